"""`migrate-schemas`: copy the subjects of a config's entries with `schemas` to the destination registry ahead of a
cutover, each as its entry's mode copies it while mirroring (strict: an exact copy; lenient: the source's versions
in order among the destination's own), then the compatibility level set on each source subject. Both the dry run
and the real run first plan every copy (`preflight`: the copy's own code on a `PlannedRegistry`, which plans
registrations instead of making them), so every check the copy makes is made before anything is registered: a
subject that cannot be copied refuses the command, dry or not, with the same line and exit code, and nothing is
written. `--dry-run` then prints what it would register and set.

Which subjects: under the `topic` strategy, `<topic>-key` / `<topic>-value` of every topic the entry selects now
(for the fields it mirrors), where the source registry has them; under `record` and `topic-record`, subjects are
named after record types, which only the records tell: `--subjects REGEX` picks source subjects by name (for every
entry, added to the topic subjects). Copying is the mirror's own (`sinks.schemas.mapping`), so a rerun registers
nothing, and a mirror started afterwards finds its subjects ready.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import anyio.to_thread

from config.estate import MirrorSpec, compile_entries
from config.model import Config, SchemaMode, SchemasConfig
from core.errors import MirrorV3Error
from kafka_clients.schema_registry import RegistryAccess, RegistryClient, Schema
from sinks.destinations import open_destination
from sinks.schemas.mapping import (
    Field,
    PlannedRegistry,
    Registry,
    SchemaCopyError,
    SchemaIdMap,
    SourceRegistry,
    SubjectNames,
    SubjectStrategy,
)
from source.discovery import plan_estate
from source.lookup import source_registry
from source.offsets import SourceClusters


@dataclass
class SubjectCopy:
    """One subject's copy: what was (or would be) registered and set."""

    source_subject: str
    destination_subject: str
    mode: str
    versions: int  # the source subject's
    missing: list[int] = field(default_factory=list)  # source versions the destination lacked
    compatibility: str | None = None  # the source subject's own level, set on the destination subject
    refusal: SchemaCopyError | None = None  # why the copy cannot be made (strict: not a copy); nothing is written

    def line(self, dry_run: bool) -> str:
        verb = "would register" if dry_run else "registered"
        versions = ", ".join(map(str, self.missing)) or "none"
        text = (
            f"{self.source_subject} -> {self.destination_subject} ({self.mode}): {self.versions} versions, "
            f"{verb} {versions}"
        )
        if self.compatibility is not None:
            text += f"; compatibility {self.compatibility}"
        return text + (f"; refused: {self.refusal}" if self.refusal else "")


class MigrationRefusedError(MirrorV3Error):
    """Some subject cannot be copied as its mode asks (strict: the destination subject is not a copy; lenient: it
    holds the source's versions in another order): found before anything is registered, by the dry run and the
    real run alike, so neither writes. `refusals`: every subject's, in the order they would be copied."""

    headline = "migrate-schemas refused"

    def __init__(self, refusals: list[SchemaCopyError]) -> None:
        self.refusals = refusals
        first, others = refusals[0], refusals[1:]
        more = "" if not others else f" (and {len(others)} more: {', '.join(repr(r.subject) for r in others)})"
        super().__init__(f"{first}{more}; nothing was registered")


# Every refusal migrate-schemas makes before it writes (a test holds `preflight`, which the dry run and the real run
# both call, to raising each one).
MIGRATE_REFUSALS: tuple[type[MirrorV3Error], ...] = (MigrationRefusedError,)


async def migrate_schemas(config: Config, *, dry_run: bool, subjects: re.Pattern[str] | None = None) -> list[str]:
    """Copy (or, dry, survey) every subject; the lines the command prints. Both first plan every copy on a
    `PlannedRegistry` (`preflight`): the real run's own checks, nothing written; a refusal there
    (MigrationRefusedError) ends either before anything is registered, with the same line."""
    cluster = open_destination(config.destination).cluster
    target = None if cluster is None else cluster.schema_registry
    if target is None:
        return ["no entry copies schemas: nothing to migrate"]
    clusters = SourceClusters()
    try:
        plan = await plan_estate(clusters, compile_entries(config), None)
    finally:
        await clusters.close()
    work = _subjects_of(plan.mirrors)
    if not work:
        return ["no entry copies schemas: nothing to migrate"]
    planned = await anyio.to_thread.run_sync(preflight, work, RegistryClient(target), subjects, RegistryClient)
    if not dry_run:
        await anyio.to_thread.run_sync(_copy_all, planned, RegistryClient(target))
    copies = [p.copy for p in planned]
    lines = [copy.line(dry_run) for copy in copies]
    registered = sum(len(copy.missing) for copy in copies)
    lines.append(f"{len(copies)} subjects, {registered} versions {'to register' if dry_run else 'registered'}")
    return lines


@dataclass(frozen=True)
class _Entry:
    """What one entry with schemas copies: its registries, its modes and the topics it selects now."""

    source: RegistryAccess
    schemas: SchemasConfig
    topics: dict[str, str]  # source topic -> destination topic


def _subjects_of(mirrors: tuple[MirrorSpec, ...]) -> list[_Entry]:
    entries: dict[int, _Entry] = {}
    for mirror in mirrors:
        if mirror.schemas is None:
            continue
        found = entries.get(mirror.entry)
        if found is None:
            registry = source_registry(mirror)
            assert registry is not None, "config.loader checks that an entry with schemas has its registry"
            found = entries[mirror.entry] = _Entry(registry, mirror.schemas, {})
        found.topics[mirror.topic] = mirror.destination_name
    return list(entries.values())


@dataclass
class _Planned:
    """A subject to copy, with what copying it takes."""

    source: SourceSubjects
    subject: str
    names: SubjectNames
    mode: SchemaMode
    copy: SubjectCopy


class SourceSubjects(SourceRegistry, Protocol):
    """The calls made of a source registry (kafka_clients.schema_registry.RegistryClient's)."""

    def subjects(self) -> list[str]: ...

    def compatibility(self, subject: str) -> str | None: ...


def preflight(
    entries: list[_Entry],
    destination: Registry,
    pattern: re.Pattern[str] | None,
    client: Callable[[RegistryAccess], SourceSubjects] = RegistryClient,
) -> list[_Planned]:
    """Every subject's copy planned on a `PlannedRegistry` over `destination`, in the order the real run copies them
    (each sees the registrations planned before it): the copy's own code, so every check it makes is made; nothing is
    written. MigrationRefusedError when a copy cannot be made (after every subject was planned)."""
    planned = PlannedRegistry(destination)
    found: list[_Planned] = []
    for entry in entries:
        source = client(entry.source)
        for subject, names, mode in _chosen(entry, source.subjects(), pattern):
            found.append(_plan_one(source, planned, subject, names, mode))
    refusals = [p.copy.refusal for p in found if p.copy.refusal is not None]
    if refusals:
        raise MigrationRefusedError(refusals)
    return found


def _chosen(
    entry: _Entry, listed: list[str], pattern: re.Pattern[str] | None
) -> list[tuple[str, SubjectNames, SchemaMode]]:
    """The entry's subjects: (source subject, how it is named at the destination, its mode)."""
    # (subject, field, strategy, source topic, destination topic)
    chosen: list[tuple[str, Field, SubjectStrategy, str, str]] = []
    strategy = entry.schemas.subject_name_strategy
    fields: tuple[tuple[Field, SchemaMode], ...] = (("key", entry.schemas.key), ("value", entry.schemas.value))
    for field_name, mode in fields:
        if mode == "off":
            continue
        for topic, renamed in sorted(entry.topics.items()):
            if strategy == "topic" and f"{topic}-{field_name}" in listed:
                chosen.append((f"{topic}-{field_name}", field_name, strategy, topic, renamed))
    if pattern is not None:
        named: Field = "value" if entry.schemas.value != "off" else "key"
        topic, renamed = next(iter(sorted(entry.topics.items())), ("", ""))
        known = {subject for subject, *_ in chosen}
        # Named after a record type: kept as it is (record), or given the destination topic (topic-record).
        by_name: SubjectStrategy = "record" if strategy == "topic" else strategy
        chosen += [(s, named, by_name, topic, renamed) for s in listed if pattern.fullmatch(s) and s not in known]
    return [
        (
            subject,
            SubjectNames(rule, topic, renamed, field_name),
            entry.schemas.value if field_name == "value" else entry.schemas.key,
        )
        for subject, field_name, rule, topic, renamed in chosen
    ]


def _plan_one(
    source: SourceSubjects, planned: PlannedRegistry, subject: str, names: SubjectNames, mode: SchemaMode
) -> _Planned:
    target = names.destination_subject(subject)
    versions = source.versions(subject)
    # Each version as the destination would hold it: its references at the destination's versions; None while a
    # referenced version is not there yet (then the version itself cannot be there either).
    reading = SchemaIdMap(source, planned, mode, names, read_only=True)
    wanted = [_destination_form(reading, source.version(subject, v).schema) for v in versions]
    copy = SubjectCopy(subject, target, mode, len(versions), compatibility=source.compatibility(subject))
    copy.missing = [
        v for v, form in zip(versions, wanted, strict=True) if form is None or planned.lookup(target, form) is None
    ]
    try:
        SchemaIdMap(source, planned, mode, names).copy_subject(subject)  # the real run's copy, planned
    except SchemaCopyError as exc:
        copy.refusal = exc
    return _Planned(source, subject, names, mode, copy)


def _copy_all(work: list[_Planned], destination: RegistryClient) -> None:
    """The planned copies, made (each as `preflight` planned it; a rerun registers nothing)."""
    for planned in work:
        SchemaIdMap(planned.source, destination, planned.mode, planned.names).copy_subject(planned.subject)
        if planned.copy.compatibility is not None:
            destination.set_compatibility(planned.copy.destination_subject, planned.copy.compatibility)


def _destination_form(reading: SchemaIdMap, schema: Schema) -> Schema | None:
    try:
        return reading.destination_form(schema)
    except SchemaCopyError:
        return None
