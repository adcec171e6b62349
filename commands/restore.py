"""`restore`: put archived chains back into Kafka topics, exactly once, resumable after a kill at any moment.

The driver decides, Spark tasks move the records:
1. The archive's chains are listed (`Archive.chains`) and selected by the config's entries; each chain's
   blob names are validated in full, and its range to restore is the chain's extent cut by the entry's offset
   bounds, then by its timestamp bounds (a Spark job finds the first offsets stamped at or after them).
2. In preserve mode (and for `--dry-run`) a survey job counts each range's records and holes first: a hole
   cannot keep its offset, so preserve refuses before anything is written, naming the first hole.
3. Each destination partition is opened as the Kafka destination of a mirror would be (`sinks.kafka.sink.KafkaSink`):
   renumber takes the partition over and fences older writers, and its position is the archived offset its
   consumer group committed (or the last record's header); preserve's position is the partition's end, whose
   last record must be the archive's own record at that offset. The restore continues from there. `--dry-run`
   makes the same checks read-only (`check_destinations`: no producer, no group offset committed), so it is
   refused exactly where the real run would be, with the same line and exit code.
4. Jobs run until every range is restored: each job has one task per unfinished partition, producing its next
   `spark.offsets-per-task` offsets (one transaction in renumber mode), so partitions run in parallel and each
   one's records go out in offset order. The driver records each produced range in order.

Restart correctness comes from the destination alone: a killed restore leaves committed transactions (renumber)
or offset-checked records (preserve), and the next run's open finds where they end.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import anyio
import anyio.to_thread
from prometheus_client import CollectorRegistry

from commands.job_progress import JobProgress, reported, spark_job_tasks
from commands.output import table_lines
from commands.restore_groups import RestoredRange, restore_positions
from commands.restore_progress import RestoreMetrics, restored_so_far
from commands.restore_topics import RestoredTopic, prepare_topics, restored_topics
from config.errors import ConfigError
from config.restore import RestoreConfig, RestoreEntry
from core.describe import describe_error
from core.errors import MirrorV3Error
from core.logs import log_event
from kafka_clients.clients import KafkaRecord
from kafka_clients.schema_registry import registry_for
from kafka_clients.settings import registry_access
from sinks.archive.documents import ArchiveDocuments, moment_text
from sinks.archive.retention import retention
from sinks.blob.chain import BlobRange, BlobStore, verify_all
from sinks.blob.compactor import list_details
from sinks.blob.merging import originals_of
from sinks.blob.reading import BlobReader
from sinks.destination import Archive
from sinks.destinations import open_destination
from sinks.kafka.destination import kafka_settings
from sinks.kafka.produce import ProducedRange
from sinks.kafka.sink import KafkaSink, KafkaSinkSettings, partition_name, refuse_preserve_into_empty
from sinks.retry import RetryingSink, retry_policy
from sinks.schemas.archive import read_schemas
from sinks.schemas.archived import ArchivedRegistry, ArchivedSchemaMissingError, ArchivedSchemas
from sinks.schemas.mapping import (
    FIELDS,
    Field,
    PlannedRegistry,
    Registry,
    SchemaCopyError,
    SchemaIdMap,
    SubjectNames,
)
from sinks.schemas.rewrite import RetryingRegistry, SchemaRewrite
from telemetry.http import HttpEndpoint, PlainMirror, Readiness
from telemetry.metrics import MetricFamilies
from workers.archive_records import ArchiveSurvey, read_archived
from workers.restore_job import (
    ArchivedRange,
    RestoreTask,
    Survey,
    TimeSearch,
    run_restore_job,
    run_survey_job,
    run_time_search_job,
)
from workers.spark_session import SparkLaunch, started_spark
from workers.spark_start import start_spark

log = logging.getLogger("mirror_v3.restore")


class RestoreRefusedError(MirrorV3Error):
    """The restore cannot be done as configured; nothing was written for it."""

    headline = "restore refused"

    def __init__(self, chain: str, problem: str) -> None:
        self.chain, self.problem = chain, problem
        super().__init__(f"{chain}: {problem}")


class ArchiveHolesError(RestoreRefusedError):
    """preserve: the archived range has offsets without a record (`holes` of them, the first `first_hole`), which
    cannot keep their offsets."""

    def __init__(self, chain: str, first: int, end: int, holes: int, first_hole: int) -> None:
        self.first, self.end, self.holes, self.first_hole = first, end, holes, first_hole
        super().__init__(
            chain,
            f"the archive holds no record at offset {first_hole} (the first of {holes} holes in {first}-{end - 1}: "
            "compaction, transaction markers or aborted records): offsets: preserve cannot give the records after it "
            "their offsets; use offsets: renumber",
        )


class DestinationBehindError(RestoreRefusedError):
    """The destination partition holds the chain up to archived offset `held_to - 1`, below the range's `first`:
    continuing would skip the offsets between."""

    def __init__(self, chain: str, topic: str, partition: int, held_to: int, first: int) -> None:
        self.topic, self.partition, self.held_to, self.first = topic, partition, held_to, first
        super().__init__(
            chain,
            f"destination {topic}/{partition} already holds this chain up to offset {held_to - 1}, below the "
            f"restore's first offset {first}: the offsets in between would be skipped; restore into another topic, "
            f"or set from-offset to at most {held_to}",
        )


class DestinationAheadError(RestoreRefusedError):
    """The destination partition holds the chain up to archived offset `held_to - 1`, past the range's `end`: more
    than the archive held (as of `as_of_ms`, or within the entry's bounds), which a restore cannot take back.
    `beyond`: how many offsets (archived offsets `end`..`held_to - 1`)."""

    def __init__(
        self, chain: str, topic: str, partition: int, end: int, held_to: int, as_of_ms: int | None, mode: str
    ) -> None:
        self.topic, self.partition, self.end, self.held_to = topic, partition, end, held_to
        self.as_of_ms, self.mode = as_of_ms, mode
        what = "offsets" if mode == "preserve" else "records of archived offsets"
        held = f"what the archive held as of {moment_text(as_of_ms)}" if as_of_ms is not None else "the restored range"
        super().__init__(
            chain,
            f"destination {topic}/{partition} holds {what} {end}-{held_to - 1} ({self.beyond} offsets) past the "
            f"restored range's end {end}: more than {held}; a restore cannot take them back: restore into an empty "
            "topic, or choose a later moment",
        )

    @property
    def beyond(self) -> int:
        return self.held_to - self.end


class ArchivedSchemaRefusedError(RestoreRefusedError):
    """With `schemas`: the archived records' `field`s carry `schema_id` (from archived offset `offset` on), and its
    copy into the destination registry cannot be made (`cause`: no document of it in the archive, or a strict
    destination subject that is not a copy)."""

    def __init__(self, chain: str, field: str, schema_id: int, offset: int, cause: MirrorV3Error) -> None:
        self.field, self.schema_id, self.offset, self.cause = field, schema_id, offset, cause
        super().__init__(chain, f"{field}s carry schema ID {schema_id} from offset {offset} on: {cause}")


# Every refusal a restore makes before it writes (a test holds `preflight`, which the dry run and the real run both
# call, to raising each one, so a new check cannot go without its dry-run twin).
RESTORE_REFUSALS: tuple[type[RestoreRefusedError], ...] = (
    ArchiveHolesError,
    DestinationBehindError,
    DestinationAheadError,
    ArchivedSchemaRefusedError,
)


class RestoreFailedError(MirrorV3Error):
    """A restore job failed; what landed before stays, and a rerun continues after it."""


@dataclass
class RestorePartition:
    archived: str  # the chain's name in the archive
    partition: int
    topic: str  # the destination topic
    chain: list[BlobRange]
    first: int  # the range to restore: [first, end)
    end: int
    reader: BlobReader
    since_ms: int | None = None  # the entry's timestamp bounds, until narrow_by_time has turned them into offsets
    until_ms: int | None = None
    survey: ArchiveSurvey | None = None
    position: int | None = None  # the next archived offset to restore, once the destination is opened
    records: int = 0  # restored by this run
    record_bytes: int = 0
    sink: RetryingSink[ProducedRange] | None = field(default=None, repr=False)
    schemas: SchemaRewrite | None = field(default=None, repr=False)  # the records' IDs made the destination's

    @property
    def name(self) -> str:
        return f"{self.archived}/{self.partition}"

    def blobs(self, first: int, end: int) -> tuple[BlobRange, ...]:
        return tuple(blob for blob in self.chain if blob.last >= first and blob.first < end)

    def slices(self, per_slice: int) -> list[ArchivedRange]:
        """The range to restore in slices of at most `per_slice` offsets, one Spark task each."""
        found = []
        for lower in range(self.first, self.end, per_slice):
            upper = min(self.end, lower + per_slice)
            found.append(
                ArchivedRange(self.archived, self.partition, self.reader, self.blobs(lower, upper), lower, upper)
            )
        return found


@dataclass(frozen=True)
class RestoreSummary:
    partitions: int
    records: int
    record_bytes: int
    seconds: float


class ArchiveLookup:
    """The archive as the Kafka sink's source: where the range begins, and the record at an offset (for the
    preserve-mode check that a non-empty destination ends with the archive's own record)."""

    def __init__(self, part: RestorePartition) -> None:
        self._part = part

    async def log_start(self) -> int:
        return self._part.first

    async def record_at(self, offset: int) -> KafkaRecord | None:
        def read() -> KafkaRecord | None:
            for messages in read_archived(self._part.reader, self._part.blobs(offset, offset + 1), offset, offset + 1):
                for message in messages:
                    timestamp_type, timestamp = message.timestamp()
                    return KafkaRecord(
                        message.offset(),
                        message.key(),
                        message.value(),
                        tuple(message.headers() or ()),
                        timestamp,
                        timestamp_type == 1,
                    )
            return None

        return await anyio.to_thread.run_sync(read)


def archive_of(config: RestoreConfig) -> Archive:
    """The archive a restore reads (`archive:` is a blob destination: config.restore checks it)."""
    archive = open_destination(config.archive).archive
    assert archive is not None, "config.restore takes only a blob destination as the archive"
    return archive


async def select_partitions(config: RestoreConfig, archive: Archive) -> list[RestorePartition]:
    """The archived chains the entries select, each with its range; ConfigError for a name or partition the
    archive does not hold, a chain selected twice, or two chains restored into one partition."""
    await archive.check_format()  # an archive of a newer layout is refused, not misread
    if config.as_of_ms is not None:
        await refuse_pruned_moment(archive, config.as_of_ms)
    catalog = await anyio.to_thread.run_sync(archive.chains)
    where = archive.root
    chosen: list[tuple[int, RestoreEntry, str, int]] = []
    for index, entry in enumerate(config.restore):
        names = _names(index, entry, catalog, where)
        for name in names:
            partitions = catalog[name]
            if entry.partitions is not None:
                absent = sorted(set(entry.partitions) - set(partitions))
                if absent and entry.topic_regex is None:
                    raise ConfigError(
                        ("restore", index, "partitions"),
                        f"the archive holds no partition {absent[0]} of {name!r} "
                        f"(it holds {', '.join(map(str, partitions))})",
                    )
                partitions = [p for p in partitions if p in entry.partitions]
            chosen += [(index, entry, name, p) for p in partitions]
    _check_unique(chosen)
    limiter = anyio.CapacityLimiter(8)
    found: list[RestorePartition | None] = [None] * len(chosen)

    failures: list[Exception] = []

    async def load(slot: int, entry: RestoreEntry, name: str, partition: int) -> None:
        async with limiter:
            store = archive.chain_store(name, partition)
            try:
                chain = await verify_all(store)
                held_end = chain[-1].last + 1 if chain else 0
                if config.as_of_ms is not None:
                    chain, held_end = await held_at(
                        store, chain, config.as_of_ms / 1000, partial(_merged_from, archive.reader(name, partition))
                    )
            except Exception as exc:  # reported after the others finish, as one error (not an exception group)
                failures.append(RestoreFailedError(f"{name}/{partition}: {describe_error(exc)}"))
                return
            finally:
                await store.close()
        reader = archive.reader(name, partition)
        first = max(chain[0].first, entry.from_offset or 0) if chain else 0
        end = min(held_end, entry.to_offset if entry.to_offset is not None else held_end) if chain else 0
        found[slot] = RestorePartition(
            name,
            partition,
            entry.destination_topic(name),
            chain,
            first,
            max(first, end),
            reader,
            since_ms=entry.from_timestamp_ms,
            until_ms=entry.to_timestamp_ms,
        )

    async with anyio.create_task_group() as tasks:
        for slot, (_, entry, name, partition) in enumerate(chosen):
            tasks.start_soon(load, slot, entry, name, partition)
    if failures:
        raise failures[0]
    return [part for part in found if part is not None]


async def refuse_pruned_moment(archive: Archive, as_of_ms: int) -> None:
    """ConfigError for a moment before what a prune kept (`sinks.archive.retention`): its records may be gone."""
    documents = archive.documents()
    try:
        kept = await retention(documents)
    finally:
        await documents.close()
    if kept is not None and as_of_ms < kept.kept_since_ms:
        raise ConfigError(
            ("--as-of",),
            f"{moment_text(as_of_ms)} is before what the archive keeps (pruned at {kept.pruned_at} of what was "
            f"committed before {kept.kept_since}): the oldest moment it can serve is {kept.kept_since}",
        )


MergedFrom = Callable[[BlobRange], Awaitable[list[tuple[int, int, int]] | None]]


async def held_at(
    store: BlobStore, chain: list[BlobRange], moment_s: float, merged_from: MergedFrom | None = None
) -> tuple[list[BlobRange], int]:
    """The blobs of `chain` the archive held at `moment_s`, and the offset after what they held then. A chain is
    committed in offset order, but a blob's time is when its data was written (filesystem: the file's modification
    time; S3: the object's), a moment before its commit, and the parallel tasks of a backlog write several at once,
    out of offset order: so a blob counts as held when it and every blob before it were written by then (the longest
    such prefix), the one rule that gives the same answer before and after a compaction.

    A merged blob's time is its newest original's: on a filesystem its file's, so the listing says it; on S3 the
    listing says when it was merged, and the object's metadata (one HEAD: `BlobStore.modified_at`) its newest
    original's. So a blob listed as later than the moment is looked at once more before the prefix ends there; and
    the blob that ends it may be a merged one whose older originals were held: it is read (`merged_from`: its
    originals and their times, oldest first) and the prefix ends inside it, by the same rule.

    Cost: one listing with the blobs' times (S3: a LIST per 1 000 names); a HEAD per blob listed as later than the
    moment (on S3, each merged blob merged after it, up to the first blob not held); at most one footer read."""
    listed = {entry.name: entry.modified_s for entry in await list_details(store)}
    count = 0
    for blob in chain:
        at = listed.get(blob.name)
        if at is not None and at > moment_s:
            at = await store.modified_at(blob.name)  # S3: a merged blob's own time is in its metadata
        if at is None or at > moment_s:
            break
        count += 1
    held, end = chain[:count], chain[count - 1].last + 1 if count else 0
    if count < len(chain) and merged_from is not None:
        originals = await merged_from(chain[count]) or []
        in_time = [last for _, last, written_ms in itertools.takewhile(lambda o: o[2] <= moment_s * 1000, originals)]
        if in_time:
            return [*held, chain[count]], in_time[-1] + 1
    return held, end


async def _merged_from(reader: BlobReader, blob: BlobRange) -> list[tuple[int, int, int]] | None:
    return await anyio.to_thread.run_sync(originals_of, reader, blob.name)


def _names(index: int, entry: RestoreEntry, catalog: dict[str, list[int]], where: str) -> list[str]:
    if entry.topic_regex is not None:
        pattern = re.compile(entry.topic_regex)
        return [name for name in catalog if pattern.fullmatch(name)]
    wanted = [entry.topic] if entry.topic is not None else list(entry.topics or ())
    key = "topic" if entry.topic is not None else "topics"
    for name in wanted:
        if name not in catalog:
            held = ", ".join(sorted(catalog)[:10]) or "nothing"
            raise ConfigError(
                ("restore", index, key), f"the archive at {where} holds no chain named {name!r} (it holds: {held})"
            )
    return [name for name in wanted if name is not None]


def _check_unique(chosen: list[tuple[int, RestoreEntry, str, int]]) -> None:
    sources: dict[tuple[str, int], int] = {}
    targets: dict[tuple[str, int], tuple[int, str]] = {}
    for index, entry, name, partition in chosen:
        if (name, partition) in sources:
            raise ConfigError(
                ("restore", index), f"{name}/{partition} is selected by restore[{sources[name, partition]}] already"
            )
        sources[name, partition] = index
        topic = entry.destination_topic(name)
        if (topic, partition) in targets:
            other_index, other = targets[topic, partition]
            raise ConfigError(
                ("restore", index),
                f"{name}/{partition} and {other}/{partition} (restore[{other_index}]) would both "
                f"be restored into {topic} partition {partition}: rename one",
            )
        targets[topic, partition] = (index, name)


async def narrow_by_time(config: RestoreConfig, parts: list[RestorePartition]) -> None:
    """Cut the ranges of partitions with timestamp bounds to [first stamped at or after from-timestamp, first
    stamped at or after to-timestamp), in one Spark job over slices of each range. Kafka's offsets-for-times
    answers the same way: the range stays one run of offsets, so a rerun finds the same range and preserve mode
    still applies. A partition with no record stamped at or after from-timestamp restores nothing."""
    bounded = [p for p in parts if p.since_ms is not None or p.until_ms is not None]
    work = [
        (part, TimeSearch(archived, part.since_ms, part.until_ms))
        for part in bounded
        for archived in part.slices(config.spark.offsets_per_task)
    ]
    if not work:
        return

    group = _job_group("times")

    def run() -> list[tuple[int | None, int | None]]:
        return run_time_search_job(started_spark(), tuple(w for _, w in work), group)

    searching = JobProgress(f"finding the time bounds in {len(work)} slices", "restore finding time bounds")
    async with reported(searching, partial(spark_job_tasks, group)):
        found = await anyio.to_thread.run_sync(run)
    since: dict[str, int] = {}  # chain → the first slice's answer, in offset order
    until: dict[str, int] = {}
    for (part, _), (found_since, found_until) in zip(work, found, strict=True):
        if found_since is not None:
            since.setdefault(part.name, found_since)
        if found_until is not None:
            until.setdefault(part.name, found_until)
    for part in bounded:
        first = part.first if part.since_ms is None else since.get(part.name, part.end)
        end = until.get(part.name, part.end)
        log_event(
            log,
            logging.INFO,
            "timestamp bounds found",
            chain=part.name,
            from_ms=part.since_ms,
            to_ms=part.until_ms,
            first=first,
            end=end,
        )
        part.first, part.end = first, max(first, end)
        part.since_ms = part.until_ms = None


async def survey(config: RestoreConfig, parts: list[RestorePartition], fields: tuple[Field, ...] = ()) -> None:
    """Count each range's records and holes, and note the schema IDs its `fields` carry, in one Spark job (slices of
    whole blobs, summed per partition)."""
    work = [
        (part, Survey(archived, fields)) for part in parts for archived in part.slices(config.spark.offsets_per_task)
    ]
    for part in parts:
        part.survey = ArchiveSurvey(part.first, part.end, 0, 0, None)
    if not work:
        return

    group = _job_group("survey")

    def run() -> list[ArchiveSurvey]:
        return run_survey_job(started_spark(), tuple(r for _, r in work), group)

    surveying = JobProgress(f"surveying {len(work)} slices of the archive", "restore surveying")
    async with reported(surveying, partial(spark_job_tasks, group)):
        surveys = await anyio.to_thread.run_sync(run)
    for (part, _), found in zip(work, surveys, strict=True):
        assert part.survey is not None
        so_far = part.survey
        noted = {(name, schema_id): offset for name, schema_id, offset in so_far.schema_ids}
        for name, schema_id, offset in found.schema_ids:  # slices in offset order: the first one's offset stays
            noted.setdefault((name, schema_id), offset)
        part.survey = ArchiveSurvey(
            part.first,
            part.end,
            so_far.records + found.records,
            so_far.holes + found.holes,
            so_far.first_hole if so_far.first_hole is not None else found.first_hole,
            tuple(sorted((name, schema_id, offset) for (name, schema_id), offset in noted.items())),
        )


def _job_group(kind: str) -> str:
    return f"mirror-v3.restore.{kind}.{uuid.uuid4().hex[:12]}"


def refuse_holes_for_preserve(parts: list[RestorePartition]) -> None:
    for part in parts:
        found = part.survey
        if found is not None and found.first_hole is not None:
            raise ArchiveHolesError(part.name, part.first, part.end, found.holes, found.first_hole)


async def open_destinations(
    config: RestoreConfig, parts: list[RestorePartition], metrics: RestoreMetrics, views: dict[str, PlainMirror]
) -> None:
    """Open each destination partition and find where its restore continues (each is then `started` in `views`,
    what /readyz reads)."""
    settings = kafka_settings(config.destination)
    policy = retry_policy(config.destination.retry)

    async def _open_one(part: RestorePartition) -> None:
        sink = _destination_sink(settings, part)
        part.sink = RetryingSink(
            sink,
            policy,
            on_retry=partial(metrics.retrying, part),
            log_fields={"chain": part.name, "topic": part.topic},
        )
        part.position = _continue_at(part, await part.sink.open(), config)
        metrics.opened(part)
        views[part.name].started = True

    await _for_each(parts, _open_one)


async def check_destinations(
    config: RestoreConfig, parts: list[RestorePartition], created: dict[str, str], io: RestoreIO
) -> None:
    """What open_destinations checks, read-only: no producer starts, no group offset is committed, so nothing is
    fenced or written. Sets each part's position: where a real run would continue. `created`: the topics the real
    run would create (empty, so only their preserve rule is checked)."""

    async def check_one(part: RestorePartition) -> None:
        if part.topic in created:  # the real run makes it: empty, so only preserve's offset rule applies
            if config.destination.offsets == "preserve":
                refuse_preserve_into_empty(partition_name(part.topic, part.partition), part.name, part.first)
            part.position = _continue_at(part, None, config)
            return
        part.position = await destination_position(config, part, io)

    await _for_each(parts, check_one)


async def destination_position(config: RestoreConfig, part: RestorePartition, io: RestoreIO) -> int:
    """Where the restore of `part` continues (its `end`: done), read-only, as a rerun of `restore` finds it: where
    the destination ends, first without comparing a record, so a destination that holds less than the range begins
    with or more than it ends with is named as such (`_continue_at`); then, in preserve mode, its last record
    compared with the archive's (the IDs of its schemas mapped, with `schemas`)."""
    shallow = _continue_at(part, await io.destination_end(config, part, deep=False), config)
    if config.destination.offsets != "preserve":
        return shallow  # the committed position: no record to compare
    return _continue_at(part, await io.destination_end(config, part, deep=True), config)


def _destination_sink(settings: KafkaSinkSettings, part: RestorePartition) -> KafkaSink:
    """The destination partition of `part`, checked against the archive as a mirror's is against its source."""
    return KafkaSink(
        settings, part.topic, part.partition, source=ArchiveLookup(part), source_name=part.name, schemas=part.schemas
    )


async def plan_schemas(
    config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, *, read_only: bool
) -> None:
    """With `schemas`: each part's rewriting, from the schemas the archive kept beside its chain (read once per
    archived topic) into the destination's registry. `read_only`: looks up, never registers (the checks before
    anything is written, and verify)."""
    schemas, registry = config.schemas, config.destination.schema_registry
    if schemas is None or not schemas.on:
        return
    assert registry is not None, "config.restore checks it"
    destination = registry_access(registry, "destination.schema-registry")
    archived: dict[str, ArchivedSchemas] = {}
    for part in parts:
        if part.archived not in archived:
            archived[part.archived] = await read_schemas(store, part.archived)
        kept = archived[part.archived]
        part.schemas = SchemaRewrite(
            source_registry=kept,
            destination_registry=destination,
            key=schemas.key,
            value=schemas.value,
            strategy=schemas.subject_name_strategy,
            source_topic=kept.source_topic or part.archived,
            destination_topic=part.topic,
            retry=retry_policy(config.destination.retry),
            read_only=read_only,
        )


def schema_fields(config: RestoreConfig) -> tuple[Field, ...]:
    """The fields whose schema IDs the restore maps: those `schemas` does not leave off."""
    schemas = config.schemas
    if schemas is None or not schemas.on:
        return ()
    return tuple(name for name in FIELDS if (schemas.key if name == "key" else schemas.value) != "off")


def check_schemas(parts: list[RestorePartition], destination: Callable[[SchemaRewrite], Registry]) -> None:
    """Every schema ID the surveys noted, mapped into the destination registry as the tasks will map it, on a
    `PlannedRegistry` (registrations planned, none made): ArchivedSchemaRefusedError for the first that cannot be
    (no document in the archive, a strict subject that is not a copy), before any record is written. Blocking."""
    planned: dict[str, PlannedRegistry] = {}
    maps: dict[tuple[str, str, str, Field], SchemaIdMap] = {}
    for part in parts:
        rewrite = part.schemas
        if rewrite is None or part.survey is None:
            continue
        assert isinstance(rewrite.source_registry, ArchivedSchemas), "a restore's source is its archive"
        registry = planned.get(rewrite.destination_registry.url)
        if registry is None:
            registry = planned[rewrite.destination_registry.url] = PlannedRegistry(destination(rewrite))
        for name, schema_id, offset in part.survey.schema_ids:
            field_name: Field = "key" if name == "key" else "value"
            mode = rewrite.key if field_name == "key" else rewrite.value
            if mode == "off":
                continue
            key = (part.archived, rewrite.source_topic, rewrite.destination_topic, field_name)
            mapping = maps.get(key)
            if mapping is None:
                names = SubjectNames(rewrite.strategy, rewrite.source_topic, rewrite.destination_topic, field_name)
                source = ArchivedRegistry(rewrite.source_registry)
                mapping = maps[key] = SchemaIdMap(source, registry, mode, names)
            try:
                mapping.destination_id(schema_id)
            except (SchemaCopyError, ArchivedSchemaMissingError) as exc:
                raise ArchivedSchemaRefusedError(part.name, field_name, schema_id, offset, exc) from None


def _continue_at(part: RestorePartition, position: int | None, config: RestoreConfig) -> int:
    """Where the restore of `part` continues, given where its destination ends in archived offsets (None: empty):
    DestinationBehindError below the range's first offset, DestinationAheadError past its end."""
    if position is None:  # an empty destination (preserve: its first record goes to offset 0)
        position = part.first
    if position < part.first:
        raise DestinationBehindError(part.name, part.topic, part.partition, position, part.first)
    if position > part.end:
        mode = config.destination.offsets
        raise DestinationAheadError(part.name, part.topic, part.partition, part.end, position, config.as_of_ms, mode)
    return position


async def _for_each(parts: list[RestorePartition], check: Callable[[RestorePartition], Awaitable[None]]) -> None:
    """`check` every part at once; the first failure (a refusal as it is, anything else as RestoreFailedError)
    is raised after all have finished."""
    failures: list[Exception] = []

    async def one(part: RestorePartition) -> None:
        try:
            await check(part)
        except RestoreRefusedError as exc:  # reported after the others finish, as one error
            failures.append(exc)
        except Exception as exc:
            failures.append(RestoreFailedError(f"{part.name} into {part.topic}: {describe_error(exc)}"))

    async with anyio.create_task_group() as tasks:
        for part in parts:
            tasks.start_soon(one, part)
    if failures:
        raise failures[0]


async def restore_all(config: RestoreConfig, parts: list[RestorePartition], metrics: RestoreMetrics) -> RestoreSummary:
    """Run jobs until every partition is restored up to its end, the offsets produced shown as they commit."""
    started = time.monotonic()
    progress = JobProgress(f"restoring {len(parts)} partitions", "restoring", "offsets")
    async with reported(progress, restored_so_far(parts)):
        await _restore_jobs(config, parts, metrics)
    return RestoreSummary(
        len(parts),
        sum(p.records for p in parts),
        sum(p.record_bytes for p in parts),
        time.monotonic() - started,
    )


async def _restore_jobs(config: RestoreConfig, parts: list[RestorePartition], metrics: RestoreMetrics) -> None:
    per_task = config.spark.offsets_per_task
    while True:
        active = [p for p in parts if p.position is not None and p.position < p.end]
        if not active:
            break
        tasks = []
        for part in active:
            assert part.position is not None and part.sink is not None
            end = min(part.end, part.position + per_task)
            archived = ArchivedRange(
                part.archived, part.partition, part.reader, part.blobs(part.position, end), part.position, end
            )
            tasks.append(RestoreTask(archived, part.sink.target()))
        job = tuple(tasks)

        def run(job: tuple[RestoreTask, ...] = job) -> list[ProducedRange | MirrorV3Error]:
            return run_restore_job(started_spark(), job, _job_group("produce"))

        failed: MirrorV3Error | None = None
        for part, item in zip(active, await anyio.to_thread.run_sync(run), strict=True):
            assert part.sink is not None
            if isinstance(item, MirrorV3Error):
                failed = failed or item  # the first partition's (by order) names the failure
                continue
            await part.sink.commit(item)
            part.position = item.last + 1
            part.records += item.records
            part.record_bytes += item.record_bytes
            metrics.produced(part, item)
        if failed is not None:
            # What the other partitions produced is recorded above; a rerun continues every one of them.
            raise RestoreFailedError(str(failed)) from None


TABLE_COLUMNS = ("ARCHIVED", "PARTITION", "TOPIC", "RANGE", "OFFSETS", "RECORDS", "HOLES", "FIRST-HOLE")


def render_dry_run(parts: list[RestorePartition], mode: str) -> str:
    body = []
    for part in parts:
        found = part.survey
        body.append(
            [
                part.archived,
                str(part.partition),
                part.topic,
                f"{part.first}-{part.end - 1}" if part.end > part.first else "none",
                str(part.end - part.first),
                "-" if found is None else str(found.records),
                "-" if found is None else str(found.holes),
                "-" if found is None or found.first_hole is None else str(found.first_hole),
            ]
        )
    lines = table_lines(TABLE_COLUMNS, body)
    records = sum(p.survey.records for p in parts if p.survey is not None)
    lines.append(f"{len(parts)} partitions, {records} records to restore with offsets: {mode}")
    return "\n".join(lines)


async def close_all(parts: list[RestorePartition]) -> None:
    for part in parts:
        if part.sink is not None:
            with anyio.CancelScope(shield=True):
                await part.sink.close()


async def log_append_time_topics(parts: list[RestorePartition]) -> list[str]:
    """The destination topics whose broker stamps its own time on every record (LogAppendTime): the archived
    timestamps are set on each record sent and replaced there. Logged as a warning, and reported at the end."""
    first_of: dict[str, RestorePartition] = {}
    for part in parts:
        first_of.setdefault(part.topic, part)
    found = []
    for topic, part in sorted(first_of.items()):
        assert part.sink is not None and isinstance(part.sink.inner, KafkaSink)
        if await part.sink.inner.stamps_log_append_time():
            log_event(
                log,
                logging.WARNING,
                "destination topic stamps LogAppendTime: restored records get the broker's time, not their archived "
                "timestamps",
                topic=topic,
            )
            found.append(topic)
    return found


class RestoreIO(Protocol):
    """What a restore asks of the world beyond its own decisions (Kafka, Spark, the registry). `preflight` runs every
    check through it; the fast tests give it fakes, the CLI `SparkKafkaIO`."""

    async def would_create(self, config: RestoreConfig, topics: list[RestoredTopic]) -> dict[str, str]:
        """The topics the real run would create, each with the line a dry run prints (nothing created)."""
        ...

    async def destination_end(self, config: RestoreConfig, part: RestorePartition, *, deep: bool) -> int | None:
        """Where `part`'s destination partition ends, in archived offsets (None: empty), read-only, its topic
        checked; `deep`: preserve's last record compared with the archive's too."""
        ...

    async def start_spark(self, config: RestoreConfig) -> None: ...

    async def narrow_by_time(self, config: RestoreConfig, parts: list[RestorePartition]) -> None: ...

    async def survey(self, config: RestoreConfig, parts: list[RestorePartition], fields: tuple[Field, ...]) -> None: ...

    def registry(self, rewrite: SchemaRewrite) -> Registry:
        """The destination registry of `rewrite`, blocking calls."""
        ...

    async def describe(
        self, config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, checked: Preflight
    ) -> str:
        """The dry run's report (nothing written)."""
        ...

    async def write(
        self, config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, checked: Preflight
    ) -> str:
        """The real run, once `preflight` has passed: create the topics, restore the records, commit the groups."""
        ...


@dataclass(frozen=True)
class Preflight:
    """What the checks found that the run then uses."""

    topics: list[RestoredTopic]
    would_create: dict[str, str]  # topic -> the dry run's line


async def preflight(
    config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, io: RestoreIO
) -> Preflight:
    """Every check a restore makes before it writes, read-only: the dry run and the real run both call it first, so
    the dry run is refused exactly where the real run would be (same error, same line, same exit code), and the real
    run refuses before its first record. In order:

    1. the destination, before Spark starts (a refused restore says why within seconds): each topic (missing, too
       few partitions), each partition (preserve into an empty one from a later offset; one that holds less than
       the range begins with or more than it ends with, e.g. records from after `as-of`; preserve: one whose last
       record is not the archive's);
    2. Spark: ranges set by timestamps, then a survey of every range (records, holes, every blob readable, the schema
       IDs the records carry);
    3. preserve: a hole refuses;
    4. `schemas`: every schema ID the records carry is copied into the destination registry on a plan (none made):
       a missing `_schemas/<id>.json` or a strict subject that is not a copy refuses;
    5. the destination of the partitions whose range a timestamp set (known only now)."""
    chosen = [(p.archived, p.topic, p.partition) for p in parts]
    topics = await restored_topics(config, chosen, store, config.as_of_ms)
    await plan_schemas(config, parts, store, read_only=True)  # preserve's check of the last record maps its IDs
    would_create = await io.would_create(config, topics)
    known = [p for p in parts if p.since_ms is None and p.until_ms is None]
    timed = [p for p in parts if p.since_ms is not None or p.until_ms is not None]
    await check_destinations(config, known, would_create, io)
    await io.start_spark(config)
    await io.narrow_by_time(config, parts)
    await io.survey(config, parts, schema_fields(config))
    if config.destination.offsets == "preserve":
        refuse_holes_for_preserve(parts)
    await anyio.to_thread.run_sync(check_schemas, parts, io.registry)
    await check_destinations(config, timed, would_create, io)
    return Preflight(topics, would_create)


async def run_restore(
    config: RestoreConfig,
    launch: SparkLaunch,
    *,
    dry_run: bool = False,
    families: MetricFamilies | None = None,
    metrics_port: int = 0,
    io: RestoreIO | None = None,
) -> str:
    """The whole command; returns what it prints on stdout. With `families`, the restore's series are served on
    the metrics port (/metrics, /healthz, /readyz: ready once every destination partition is open)."""
    archive = archive_of(config)
    parts = await select_partitions(config, archive)
    if not parts:
        raise ConfigError(("restore",), "the entries select no archived chain")
    store = archive.documents()
    try:
        return await restore_parts(config, parts, store, dry_run, io or SparkKafkaIO(launch, families, metrics_port))
    finally:
        await store.close()


async def restore_parts(
    config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, dry_run: bool, io: RestoreIO
) -> str:
    """The selected partitions restored (or, dry, described) once `preflight` passed: its refusals come first."""
    checked = await preflight(config, parts, store, io)
    if dry_run:
        return await io.describe(config, parts, store, checked)
    return await io.write(config, parts, store, checked)


class SparkKafkaIO:
    """The restore's world: the destination cluster through the Kafka sink, the archive through Spark jobs, the
    destination registry over HTTP."""

    def __init__(self, launch: SparkLaunch, families: MetricFamilies | None, metrics_port: int) -> None:
        self._launch, self._families, self._metrics_port = launch, families, metrics_port

    async def would_create(self, config: RestoreConfig, topics: list[RestoredTopic]) -> dict[str, str]:
        return await prepare_topics(config, topics, dry_run=True)

    async def destination_end(self, config: RestoreConfig, part: RestorePartition, *, deep: bool) -> int | None:
        settings, policy = kafka_settings(config.destination), retry_policy(config.destination.retry)
        retrying = RetryingSink(_destination_sink(settings, part), policy, log_fields={"chain": part.name})
        try:
            return (await retrying.inspect(deep=deep)).next_offset
        finally:
            await retrying.close()

    async def start_spark(self, config: RestoreConfig) -> None:
        await start_spark(config.spark, self._launch)

    async def narrow_by_time(self, config: RestoreConfig, parts: list[RestorePartition]) -> None:
        await narrow_by_time(config, parts)

    async def survey(self, config: RestoreConfig, parts: list[RestorePartition], fields: tuple[Field, ...]) -> None:
        await survey(config, parts, fields)

    def registry(self, rewrite: SchemaRewrite) -> Registry:
        return RetryingRegistry(registry_for(rewrite.destination_registry), rewrite.retry)

    async def describe(
        self, config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, checked: Preflight
    ) -> str:
        ranges = [RestoredRange(p.archived, p.partition, p.topic, p.first, p.end) for p in parts]
        positions = await restore_positions(config, ranges, store, dry_run=True)
        as_of = [] if config.as_of_ms is None else [f"as of {moment_text(config.as_of_ms)}"]
        mode = config.destination.offsets
        return "\n".join([*as_of, *checked.would_create.values(), render_dry_run(parts, mode), *positions])

    async def write(
        self, config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments, checked: Preflight
    ) -> str:
        await prepare_topics(config, checked.topics, dry_run=False, quiet=True)
        for part in parts:  # checked read-only; now the tasks register what the destination lacks
            if part.schemas is not None:
                part.schemas = dataclasses.replace(part.schemas, read_only=False)
        ranges = [RestoredRange(p.archived, p.partition, p.topic, p.first, p.end) for p in parts]
        families = self._families
        metrics = RestoreMetrics(families or MetricFamilies(CollectorRegistry()))
        views = {part.name: PlainMirror(part.name) for part in parts}
        endpoint = (
            None if families is None else HttpEndpoint(families.registry, Readiness(views.values), self._metrics_port)
        )
        if endpoint is not None:
            await endpoint.start()
        try:
            await open_destinations(config, parts, metrics, views)
            stamped_by_broker = await log_append_time_topics(parts)
            summary = await restore_all(config, parts, metrics)
        finally:
            await close_all(parts)
            if endpoint is not None:
                await endpoint.stop()
        fields = {
            "partitions": summary.partitions,
            "records": summary.records,
            "mb": round(summary.record_bytes / 1e6, 2),
            "seconds": round(summary.seconds, 1),
        }
        log_event(log, logging.INFO, "restore finished", **fields)
        rate = summary.records / summary.seconds if summary.seconds > 0 else 0.0
        mode = config.destination.offsets
        lines = [
            f"restored {summary.records} records ({summary.record_bytes / 1e6:.1f} MB) into {summary.partitions} "
            f"partitions in {summary.seconds:.1f}s ({rate:,.0f} records/s), offsets: {mode}"
        ]
        if stamped_by_broker:
            lines.append(
                f"timestamps not restored: {', '.join(stamped_by_broker)} stamp LogAppendTime, so the broker set its "
                "own time on every record"
            )
        lines += await restore_positions(config, ranges, store, dry_run=False)  # the records are in: consumers may come
        return "\n".join(lines)
