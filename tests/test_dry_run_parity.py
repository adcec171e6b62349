"""Every dry run makes every check its real run makes before it writes, and is refused with the same error: each
command's refusals are listed (`RESTORE_REFUSALS`, `MIGRATE_REFUSALS`), each is raised by the command's `preflight`
in a scenario of its own, and the dry run and the real run both end there, with the same line, before anything is
written. A new refusal type without a scenario here fails the listing test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from commands import migrate_schemas as migrate
from commands.restore import (
    RESTORE_REFUSALS,
    ArchivedSchemaRefusedError,
    ArchiveHolesError,
    DestinationAheadError,
    DestinationBehindError,
    Preflight,
    RestoreFailedError,
    RestorePartition,
    RestoreRefusedError,
    restore_parts,
)
from commands.restore_topics import RestoredTopic
from commands.restore_verify import _partitions
from config import parse_config
from config.estate import expand
from config.restore import RestoreConfig, parse_restore_config
from core.errors import MirrorV3Error, cli_line
from kafka_clients.schema_registry import Schema
from sinks.base import DestinationError
from sinks.blob.chain import BlobRange
from sinks.filesystem.documents import FilesystemDocuments
from sinks.filesystem.reading import FilesystemBlobReader
from sinks.schemas.archived import ArchivedSchema, ArchivedSchemaMissingError, document_name, encode, schema_directory
from sinks.schemas.mapping import Registry, SchemaCopyError
from sinks.schemas.rewrite import SchemaRewrite
from tests.fakes import MemoryRegistry
from workers.archive_records import ArchiveSurvey

V1 = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "int", "default": 0}],
    }
)
OTHER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "local", "type": "int"}]})
AS_OF_MS = 1_767_225_600_000


class FakeRestoreIO:
    """The destination as `ends` says (archived offsets; None: empty), a survey as `surveys` says (else whole), the
    destination registry `registry`; remembers whether the run described or wrote."""

    def __init__(
        self,
        ends: dict[str, int | None] | None = None,
        surveys: dict[str, ArchiveSurvey] | None = None,
        registry: MemoryRegistry | None = None,
        deep_failure: Exception | None = None,
        shallow_failure: Exception | None = None,
    ) -> None:
        self.ends, self.surveys = ends or {}, surveys or {}
        self.registry_ = registry or MemoryRegistry("http://destination")
        self.deep_failure, self.shallow_failure = deep_failure, shallow_failure
        self.described = self.wrote = False

    async def would_create(self, config: RestoreConfig, topics: list[RestoredTopic]) -> dict[str, str]:
        return {}

    async def destination_end(self, config: RestoreConfig, part: RestorePartition, *, deep: bool) -> int | None:
        if self.shallow_failure is not None:
            raise self.shallow_failure
        if deep and self.deep_failure is not None:
            raise self.deep_failure
        return self.ends.get(part.name)

    async def start_spark(self, config: RestoreConfig) -> None:
        return None

    async def narrow_by_time(self, config: RestoreConfig, parts: list[RestorePartition]) -> None:
        return None

    async def survey(self, config: RestoreConfig, parts: list[RestorePartition], fields: tuple[str, ...]) -> None:
        for part in parts:
            whole = ArchiveSurvey(part.first, part.end, part.end - part.first, 0, None)
            part.survey = self.surveys.get(part.name, whole)

    def registry(self, rewrite: SchemaRewrite) -> Registry:
        return self.registry_

    async def describe(
        self, config: RestoreConfig, parts: list[RestorePartition], store: Any, checked: Preflight
    ) -> str:
        self.described = True
        return "described"

    async def write(self, config: RestoreConfig, parts: list[RestorePartition], store: Any, checked: Preflight) -> str:
        self.wrote = True
        return "written"


def restore_config(offsets: str, schemas: str | None = None, as_of: bool = False) -> RestoreConfig:
    text = (
        "archive: {type: filesystem, root: /archive}\n"
        f"destination: {{type: kafka, bootstrap-servers: 'k:9092', offsets: {offsets}"
        + (", schema-registry: {url: 'http://destination'}" if schemas else "")
        + "}\nrestore: [{topic: orders, rename: orders-back}]\n"
        + (f"schemas: {{value: {schemas}}}\n" if schemas else "")
        + (f"as-of: {AS_OF_MS}\n" if as_of else "")
    )
    return parse_restore_config(text, env={})


def partition(tmp_path: Path, first: int = 0, end: int = 1500) -> RestorePartition:
    chain = [BlobRange(0, 2999)]
    return RestorePartition("orders", 0, "orders-back", chain, first, end, FilesystemBlobReader(str(tmp_path)))


def keep_schema(tmp_path: Path, schema_id: int, text: str, version: int = 1) -> None:
    document = ArchivedSchema(
        id=schema_id,
        schema_type="AVRO",
        schema=text,
        references=(),
        subjects=(("orders-value", version),),
        source_cluster="prod",
        source_topic="orders",
        registry="http://source",
        seen_at="2026-01-01T00:00:00Z",
    )
    directory = tmp_path / "archive" / schema_directory("orders")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / document_name(schema_id)).write_bytes(encode(document))


def both_runs(tmp_path: Path, config: RestoreConfig, make_io: Any, first: int = 0, end: int = 1500) -> list[Any]:
    """The dry run and the real run of the same scenario: what each raised (or returned), and its fake world."""
    found = []
    for dry_run in (True, False):
        io = make_io()
        store = FilesystemDocuments(tmp_path / "archive")

        async def run(io: Any = io, store: Any = store, dry_run: bool = dry_run) -> str:
            return await restore_parts(config, [partition(tmp_path, first, end)], store, dry_run, io)

        try:
            outcome: Any = anyio.run(run)
        except MirrorV3Error as exc:
            outcome = exc
        found.append((outcome, io))
    return found


def assert_refused_alike(tmp_path: Path, config: RestoreConfig, make_io: Any, **bounds: int) -> MirrorV3Error:
    (dry, dry_io), (real, real_io) = both_runs(tmp_path, config, make_io, **bounds)
    assert isinstance(dry, MirrorV3Error) and isinstance(real, MirrorV3Error), (dry, real)
    assert type(dry) is type(real) and cli_line(dry, "restore") == cli_line(real, "restore")
    assert dry.exit_code == real.exit_code == 1
    assert not dry_io.described and not real_io.wrote, "refused after it wrote"
    return real


def destination_behind(tmp_path: Path) -> MirrorV3Error:
    found = assert_refused_alike(
        tmp_path, restore_config("renumber"), lambda: FakeRestoreIO(ends={"orders/0": 100}), first=200
    )
    assert isinstance(found, DestinationBehindError) and (found.held_to, found.first) == (100, 200)
    return found


def destination_ahead_preserve(tmp_path: Path) -> MirrorV3Error:
    """Records from after `as-of`: named as such, before the last record is compared with an archive that holds
    none there (which would blame compaction)."""
    failure = DestinationError("source orders/0 has no record at offset 2999 to compare it with (compacted ...)")
    io = lambda: FakeRestoreIO(ends={"orders/0": 3000}, deep_failure=failure)  # noqa: E731
    found = assert_refused_alike(tmp_path, restore_config("preserve", as_of=True), io)
    assert isinstance(found, DestinationAheadError)
    assert (found.end, found.held_to, found.beyond, found.as_of_ms) == (1500, 3000, 1500, AS_OF_MS)
    assert "1500-2999 (1500 offsets) past the restored range's end 1500" in str(found), found
    return found


def destination_ahead_renumber(tmp_path: Path) -> MirrorV3Error:
    """As of a moment before anything was archived, while the destination holds 60 000 records."""
    io = lambda: FakeRestoreIO(ends={"orders/0": 60_000})  # noqa: E731
    found = assert_refused_alike(tmp_path, restore_config("renumber", as_of=True), io, end=0)
    assert isinstance(found, DestinationAheadError) and (found.end, found.beyond) == (0, 60_000)
    assert "as of 2026-01-01T00:00:00" in str(found), found
    return found


def holes_for_preserve(tmp_path: Path) -> MirrorV3Error:
    io = lambda: FakeRestoreIO(surveys={"orders/0": ArchiveSurvey(0, 1500, 1490, 10, 40)})  # noqa: E731
    found = assert_refused_alike(tmp_path, restore_config("preserve"), io)
    assert isinstance(found, ArchiveHolesError) and (found.first_hole, found.holes) == (40, 10)
    return found


def schema_document_missing(tmp_path: Path) -> MirrorV3Error:
    """The records carry ID 7 from offset 201 on, and the archive lost `_schemas/7.json`: refused before any
    record is written (the real run used to write 600 records per partition first)."""
    keep_schema(tmp_path, 5, V1)
    survey = ArchiveSurvey(0, 1500, 1500, 0, None, (("value", 5, 0), ("value", 7, 201)))
    io = lambda: FakeRestoreIO(surveys={"orders/0": survey})  # noqa: E731
    found = assert_refused_alike(tmp_path, restore_config("renumber", schemas="lenient"), io)
    assert isinstance(found, ArchivedSchemaRefusedError)
    assert (found.field, found.schema_id, found.offset) == ("value", 7, 201)
    assert isinstance(found.cause, ArchivedSchemaMissingError) and found.cause.what == "schema ID 7"
    return found


def strict_subject_not_a_copy(tmp_path: Path) -> MirrorV3Error:
    keep_schema(tmp_path, 5, V1)

    def io() -> FakeRestoreIO:
        registry = MemoryRegistry("http://destination")
        registry.register("orders-back-value", Schema(OTHER))
        survey = ArchiveSurvey(0, 1500, 1500, 0, None, (("value", 5, 0),))
        return FakeRestoreIO(surveys={"orders/0": survey}, registry=registry)

    found = assert_refused_alike(tmp_path, restore_config("preserve", schemas="strict"), io)
    assert isinstance(found, ArchivedSchemaRefusedError) and found.schema_id == 5
    assert isinstance(found.cause, SchemaCopyError) and found.cause.subject == "orders-back-value"
    return found


def destination_topic_missing(tmp_path: Path) -> MirrorV3Error:
    failure = DestinationError("destination topic 'orders-back' does not exist on k:9092")
    io = lambda: FakeRestoreIO(shallow_failure=failure)  # noqa: E731
    found = assert_refused_alike(tmp_path, restore_config("renumber"), io)
    assert isinstance(found, RestoreFailedError) and "does not exist" in str(found)
    return found


SCENARIOS = [
    destination_behind,
    destination_ahead_preserve,
    destination_ahead_renumber,
    holes_for_preserve,
    schema_document_missing,
    strict_subject_not_a_copy,
    destination_topic_missing,
]


def subclasses(cls: type) -> set[type]:
    found: set[type] = set()
    direct: list[type] = cls.__subclasses__()
    for sub in direct:
        found |= {sub, *subclasses(sub)}
    return found


def test_every_restore_refusal_is_listed() -> None:
    assert subclasses(RestoreRefusedError) == set(RESTORE_REFUSALS)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_a_restore_and_its_dry_run_are_refused_alike_before_anything_is_written(scenario: Any, tmp_path: Path) -> None:
    scenario(tmp_path)


def test_each_restore_refusal_has_its_scenario(tmp_path: Path) -> None:
    raised = set()
    for index, scenario in enumerate(SCENARIOS):
        raised.add(type(scenario(tmp_path / str(index))))
    assert set(RESTORE_REFUSALS) <= raised


def test_a_restore_that_passes_its_checks_is_described_dry_and_written_for_real(tmp_path: Path) -> None:
    keep_schema(tmp_path, 5, V1)
    survey = ArchiveSurvey(0, 1500, 1500, 0, None, (("value", 5, 0),))
    (dry, dry_io), (real, real_io) = both_runs(
        tmp_path, restore_config("preserve", schemas="strict"), lambda: FakeRestoreIO(surveys={"orders/0": survey})
    )
    assert (dry, real) == ("described", "written") and dry_io.described and real_io.wrote
    assert dry_io.registry_.subjects == {} == real_io.registry_.subjects, "the checks registered a schema"


def test_verify_of_a_restore_names_a_destination_that_holds_more_than_the_archive_held(tmp_path: Path) -> None:
    config = restore_config("renumber", as_of=True)
    parts = [partition(tmp_path, 0, 1500)]
    rows = anyio.run(_partitions, config, parts, FakeRestoreIO(ends={"orders/0": 2000}))
    (row,) = rows
    assert not row.ok and (row.restored_to, row.beyond) == (2000, 500), row
    assert row.error is not None and "1500-1999 (500 offsets)" in row.error
    whole = anyio.run(_partitions, config, parts, FakeRestoreIO(ends={"orders/0": 1500}))
    assert whole[0].ok and whole[0].beyond is None


# -- migrate-schemas ---------------------------------------------------------------------------------------------


MIGRATE_CONFIG = """
clusters:
  prod: {bootstrap-servers: "k:9092", schema-registry: {url: "http://source"}}
destination: {type: kafka, bootstrap-servers: "d:9092", schema-registry: {url: "http://destination"}}
mirrors:
  - {name: orders, cluster: prod, topic: orders, partition: 0, schemas: {value: MODE}}
"""


class FakeSource:
    """A source registry with the calls migrate-schemas makes of it besides the mapping's."""

    def __init__(self, registry: MemoryRegistry) -> None:
        self.url, self.registry = registry.url, registry
        self.schema, self.subjects_of = registry.schema, registry.subjects_of
        self.versions, self.version = registry.versions, registry.version

    def subjects(self) -> list[str]:
        return sorted(self.registry.subjects)

    def compatibility(self, subject: str) -> str | None:
        return "BACKWARD"


class FakeDestination(MemoryRegistry):
    def set_compatibility(self, subject: str, level: str) -> None:
        self.levels = {**getattr(self, "levels", {}), subject: level}


class FakeClusters:
    async def close(self) -> None:
        return None


def migration(
    monkeypatch: pytest.MonkeyPatch, mode: str, source: MemoryRegistry, destination: FakeDestination, dry_run: bool
) -> list[str]:
    """migrate-schemas of MIGRATE_CONFIG with these registries (the estate's plan: topic orders, as configured)."""
    config = parse_config(MIGRATE_CONFIG.replace("MODE", mode))

    async def plan(clusters: Any, entries: Any, shard: Any) -> Any:
        return expand(entries, {})  # a single-form entry needs no metadata

    monkeypatch.setattr(migrate, "SourceClusters", FakeClusters)
    monkeypatch.setattr(migrate, "plan_estate", plan)
    monkeypatch.setattr(
        migrate, "RegistryClient", lambda access: destination if access.url == destination.url else FakeSource(source)
    )
    return anyio.run(lambda: migrate.migrate_schemas(config, dry_run=dry_run))


def source_with_two_versions() -> MemoryRegistry:
    source = MemoryRegistry("http://source")
    for text in (V1, V2):
        source.register("orders-value", Schema(text))
    return source


def test_every_migrate_schemas_refusal_is_listed() -> None:
    assert subclasses(MirrorV3Error) & {*migrate.MIGRATE_REFUSALS, SchemaCopyError} == {
        *migrate.MIGRATE_REFUSALS,
        SchemaCopyError,
    }
    assert (migrate.MigrationRefusedError,) == migrate.MIGRATE_REFUSALS  # every copy's refusal is gathered in it


@pytest.mark.parametrize("mode", ["strict", "lenient"])
def test_migrate_schemas_and_its_dry_run_are_refused_alike_before_anything_is_registered(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """strict: the destination subject holds another schema as version 1 (not a copy); lenient: it holds the
    source's versions in the other order. The dry run used to say `would register 1, 2` and exit 0."""
    found = []
    for dry_run in (True, False):
        destination = FakeDestination("http://destination", first_id=100)
        for text in (OTHER,) if mode == "strict" else (V2, V1):
            destination.register("orders-value", Schema(text))
        held = {subject: list(versions) for subject, versions in destination.subjects.items()}
        with pytest.raises(migrate.MigrationRefusedError) as caught:
            migration(monkeypatch, mode, source_with_two_versions(), destination, dry_run)
        assert destination.subjects == held and not hasattr(destination, "levels"), "refused after it wrote"
        found.append(caught.value)
    dry, real = found
    assert cli_line(dry, "migrate-schemas") == cli_line(real, "migrate-schemas")
    assert dry.exit_code == real.exit_code == 1
    (refusal,) = real.refusals
    assert refusal.subject == "orders-value", refusal


def test_migrate_schemas_dry_run_says_what_the_real_run_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    destination = FakeDestination("http://destination", first_id=100)
    destination.register("orders-value", Schema(V1))
    dry = migration(monkeypatch, "strict", source_with_two_versions(), destination, True)
    line = "orders-value -> orders-value (strict): 2 versions, would register 2; compatibility BACKWARD"
    assert dry == [line, "1 subjects, 1 versions to register"]
    assert len(destination.subjects["orders-value"]) == 1, "the dry run registered"
    done = migration(monkeypatch, "strict", source_with_two_versions(), destination, False)
    assert done == [line.replace("would register", "registered"), "1 subjects, 1 versions registered"]
    assert len(destination.subjects["orders-value"]) == 2 and destination.levels == {"orders-value": "BACKWARD"}
