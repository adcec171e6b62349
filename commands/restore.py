"""`restore`: put archived chains back into Kafka topics, exactly once, resumable after a kill at any moment.

The driver decides, Spark tasks move the records:
1. The archive's chains are listed (`sinks.archive_catalog`) and selected by the config's entries; each chain's
   blob names are validated in full, and its range to restore is the chain's extent cut by the entry's offset
   bounds, then by its timestamp bounds (a Spark job finds the first offsets stamped at or after them).
2. In preserve mode (and for `--dry-run`) a survey job counts each range's records and holes first: a hole
   cannot keep its offset, so preserve refuses before anything is written, naming the first hole.
3. Each destination partition is opened as the Kafka destination of a mirror would be (`sinks.kafka.KafkaSink`):
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

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial

import anyio
import anyio.to_thread
from prometheus_client import CollectorRegistry

from commands.output import table_lines
from commands.restore_groups import RestoredRange, restore_positions
from commands.restore_progress import Progress, RestoreMetrics
from commands.restore_topics import prepare_topics, restored_topics
from config.errors import ConfigError
from config.model import FilesystemDestination, S3Destination
from config.restore import RestoreConfig, RestoreEntry
from core.errors import MirrorV3Error
from core.logs import log_event
from core.retry import RetryPolicy
from kafka_clients.clients import KafkaRecord
from kafka_clients.settings import registry_access
from sinks.archive_catalog import filesystem_chains, s3_chains
from sinks.archive_documents import ArchiveDocuments, moment_text
from sinks.archived_schemas import ArchivedSchemas
from sinks.blob_chain import BlobRange, BlobStore, verify_all
from sinks.blob_reading import BlobReader
from sinks.factory import SinkFactory, kafka_settings, retry_policy, s3_settings
from sinks.kafka import KafkaSink, KafkaSinkSettings, partition_name, refuse_preserve_into_empty
from sinks.kafka_produce import ProducedRange
from sinks.retry import RetryingSink
from sinks.schema_archive import read_schemas
from sinks.schema_rewrite import SchemaRewrite
from supervisor.describe import describe_error
from supervisor.http import HttpEndpoint, PlainMirror, Readiness
from supervisor.metrics import MetricFamilies
from supervisor.spark_start import start_spark
from workers.archive_records import ArchiveSurvey, read_archived
from workers.restore_job import (
    ArchivedRange,
    RestoreTask,
    TimeSearch,
    run_restore_job,
    run_survey_job,
    run_time_search_job,
)
from workers.spark_session import SparkLaunch, started_spark

log = logging.getLogger("mirror_v3.restore")


class RestoreRefusedError(MirrorV3Error):
    """The restore cannot be done as configured; nothing was written for it."""

    headline = "restore refused"

    def __init__(self, chain: str, problem: str) -> None:
        self.chain, self.problem = chain, problem
        super().__init__(f"{chain}: {problem}")


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


async def select_partitions(config: RestoreConfig, factory: SinkFactory) -> list[RestorePartition]:
    """The archived chains the entries select, each with its range; ConfigError for a name or partition the
    archive does not hold, a chain selected twice, or two chains restored into one partition."""
    archive = config.archive
    if isinstance(archive, FilesystemDestination):
        catalog = await anyio.to_thread.run_sync(filesystem_chains, archive.root)
        where = archive.root
    else:
        assert isinstance(archive, S3Destination)
        settings = s3_settings(archive)
        catalog = await anyio.to_thread.run_sync(s3_chains, settings, archive.prefix, retry_policy(archive.retry))
        where = f"s3://{archive.bucket}/{archive.prefix or ''}"
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
            store = factory.chain_store(name, partition)
            try:
                chain = await verify_all(store)
                if config.as_of_ms is not None:
                    chain = await held_at(store, chain, config.as_of_ms / 1000)
            except Exception as exc:  # reported after the others finish, as one error (not an exception group)
                failures.append(RestoreFailedError(f"{name}/{partition}: {describe_error(exc)}"))
                return
            finally:
                await store.close()
        reader = factory.chain_reader(name, partition)
        assert reader is not None
        first = max(chain[0].first, entry.from_offset or 0) if chain else 0
        end = (
            min(chain[-1].last + 1, entry.to_offset if entry.to_offset is not None else chain[-1].last + 1)
            if chain
            else 0
        )
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


async def held_at(store: BlobStore, chain: list[BlobRange], moment_s: float) -> list[BlobRange]:
    """The blobs of `chain` the archive held at `moment_s`: those committed by then. A chain grows in offset
    order, so they are a prefix, found by a binary search over the blobs' times (O(log n) looks: HEADs on S3). A
    blob's time is its object's (S3: the upload's completion; filesystem: when its data was written, a moment
    before its commit)."""
    lower, upper = 0, len(chain)  # the answer: how many blobs were held
    while lower < upper:
        middle = (lower + upper) // 2
        written = await store.modified_at(chain[middle].name)
        if written is not None and written <= moment_s:
            lower = middle + 1
        else:
            upper = middle
    return chain[:lower]


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

    def run() -> list[tuple[int | None, int | None]]:
        return run_time_search_job(started_spark(), tuple(w for _, w in work), _job_group("times"))

    since: dict[str, int] = {}  # chain → the first slice's answer, in offset order
    until: dict[str, int] = {}
    for (part, _), (found_since, found_until) in zip(work, await anyio.to_thread.run_sync(run), strict=True):
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


async def survey(config: RestoreConfig, parts: list[RestorePartition]) -> None:
    """Count each range's records and holes in one Spark job (slices of whole blobs, summed per partition)."""
    work = [(part, archived) for part in parts for archived in part.slices(config.spark.offsets_per_task)]
    for part in parts:
        part.survey = ArchiveSurvey(part.first, part.end, 0, 0, None)
    if not work:
        return

    def run() -> list[ArchiveSurvey]:
        return run_survey_job(started_spark(), tuple(r for _, r in work), _job_group("survey"))

    for (part, _), found in zip(work, await anyio.to_thread.run_sync(run), strict=True):
        assert part.survey is not None
        so_far = part.survey
        part.survey = ArchiveSurvey(
            part.first,
            part.end,
            so_far.records + found.records,
            so_far.holes + found.holes,
            so_far.first_hole if so_far.first_hole is not None else found.first_hole,
        )


def _job_group(kind: str) -> str:
    return f"mirror-v3.restore.{kind}.{uuid.uuid4().hex[:12]}"


def refuse_holes_for_preserve(parts: list[RestorePartition]) -> None:
    for part in parts:
        found = part.survey
        if found is not None and found.first_hole is not None:
            raise RestoreRefusedError(
                part.name,
                f"the archive holds no record at offset {found.first_hole} (the first of {found.holes} holes in "
                f"{part.first}-{part.end - 1}: compaction, transaction markers or aborted records): offsets: "
                "preserve cannot give the records after it their offsets; use offsets: renumber",
            )


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
        part.position = _continue_at(part, await part.sink.open())
        metrics.opened(part)
        views[part.name].started = True

    await _for_each(parts, _open_one)


async def check_destinations(
    config: RestoreConfig, parts: list[RestorePartition], created: dict[str, str] | None = None
) -> None:
    """What open_destinations checks, read-only (`--dry-run`): no producer starts, no group offset is committed,
    so nothing is fenced or written. Sets each part's position: where a real run would continue. `created`: the
    topics the real run would create (empty, so only their preserve rule is checked)."""
    settings, policy = kafka_settings(config.destination), retry_policy(config.destination.retry)

    async def check_one(part: RestorePartition) -> None:
        if created and part.topic in created:  # the real run makes it: empty, so only preserve's offset rule applies
            if config.destination.offsets == "preserve":
                refuse_preserve_into_empty(partition_name(part.topic, part.partition), part.name, part.first)
            part.position = _continue_at(part, None)
            return
        part.position = await destination_position(settings, policy, part)

    await _for_each(parts, check_one)


async def destination_position(settings: KafkaSinkSettings, policy: RetryPolicy, part: RestorePartition) -> int:
    """Where the restore of `part` continues (its `end`: done), read-only: the destination partition is inspected
    as a mirror inspects it at start (its last record checked against the archive), no producer started."""
    sink = _destination_sink(settings, part)
    retrying = RetryingSink(sink, policy, log_fields={"chain": part.name, "topic": part.topic})
    try:
        return _continue_at(part, (await retrying.inspect(deep=True)).next_offset)
    finally:
        await retrying.close()


def _destination_sink(settings: KafkaSinkSettings, part: RestorePartition) -> KafkaSink:
    """The destination partition of `part`, checked against the archive as a mirror's is against its source."""
    return KafkaSink(
        settings, part.topic, part.partition, source=ArchiveLookup(part), source_name=part.name, schemas=part.schemas
    )


async def plan_schemas(config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments) -> None:
    """With `schemas`: each part's rewriting, from the schemas the archive kept beside its chain (read once per
    archived topic) into the destination's registry."""
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
        )


def _continue_at(part: RestorePartition, position: int | None) -> int:
    """Where the restore of `part` continues, given where its destination ends (None: empty)."""
    if position is None:  # an empty destination (preserve: its first record goes to offset 0)
        position = part.first
    if position < part.first:
        raise RestoreRefusedError(
            part.name,
            f"destination {part.topic}/{part.partition} already holds this chain up to offset {position - 1}, "
            f"below the restore's first offset {part.first}: the offsets in between would be skipped; restore "
            f"into another topic, or set from-offset to at most {position}",
        )
    return min(position, part.end)


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


async def restore_all(
    config: RestoreConfig, parts: list[RestorePartition], progress: Progress, metrics: RestoreMetrics
) -> RestoreSummary:
    """Run jobs until every partition is restored up to its end."""
    started = time.monotonic()
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
        progress.update(parts)
    progress.finish(parts)
    return RestoreSummary(
        len(parts),
        sum(p.records for p in parts),
        sum(p.record_bytes for p in parts),
        time.monotonic() - started,
    )


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


async def run_restore(
    config: RestoreConfig,
    launch: SparkLaunch,
    *,
    dry_run: bool = False,
    families: MetricFamilies | None = None,
    metrics_port: int = 0,
) -> str:
    """The whole command; returns what it prints on stdout. With `families`, the restore's series are served on
    the metrics port (/metrics, /healthz, /readyz: ready once every destination partition is open)."""
    factory = SinkFactory(config.archive)
    parts = await select_partitions(config, factory)
    if not parts:
        raise ConfigError(("restore",), "the entries select no archived chain")
    store = factory.documents()
    assert store is not None, "an archive is a blob destination"
    try:
        return await _restore(config, launch, parts, store, dry_run, families, metrics_port)
    finally:
        await store.close()


async def _restore(
    config: RestoreConfig,
    launch: SparkLaunch,
    parts: list[RestorePartition],
    store: ArchiveDocuments,
    dry_run: bool,
    families: MetricFamilies | None,
    metrics_port: int,
) -> str:
    chosen = [(p.archived, p.topic, p.partition) for p in parts]
    topics = await restored_topics(config, chosen, store, config.as_of_ms)
    # Fail fast: the destination checks that need no Spark job (a missing topic, preserve into an empty partition
    # from a later offset, a destination that already holds more) run before the session starts, read-only, in a
    # dry run and a real run alike: a refused restore says why within seconds. Ranges set by timestamps are known
    # only after a Spark job (narrow_by_time), and are checked with the rest below.
    await plan_schemas(config, parts, store)  # preserve's check of a destination's last record maps its IDs
    would_create = await prepare_topics(config, topics, dry_run=True, quiet=True)
    known = [p for p in parts if p.since_ms is None and p.until_ms is None]
    await check_destinations(config, known, would_create)
    await start_spark(config.spark, launch)  # before the clock of restore_all starts, in every mode
    await narrow_by_time(config, parts)
    mode = config.destination.offsets
    if dry_run or mode == "preserve":
        await survey(config, parts)
    if mode == "preserve":
        refuse_holes_for_preserve(parts)
    created = await prepare_topics(config, topics, dry_run=dry_run)
    ranges = [RestoredRange(p.archived, p.partition, p.topic, p.first, p.end) for p in parts]
    if dry_run:  # every check the real run makes before it writes, read-only
        await check_destinations(config, parts, created)
        positions = await restore_positions(config, ranges, store, dry_run=True)
        as_of = [] if config.as_of_ms is None else [f"as of {moment_text(config.as_of_ms)}"]
        return "\n".join([*as_of, *created.values(), render_dry_run(parts, mode), *positions])
    metrics = RestoreMetrics(families or MetricFamilies(CollectorRegistry()))
    views = {part.name: PlainMirror(part.name) for part in parts}
    endpoint = None if families is None else HttpEndpoint(families.registry, Readiness(views.values), metrics_port)
    if endpoint is not None:
        await endpoint.start()
    try:
        await open_destinations(config, parts, metrics, views)
        stamped_by_broker = await log_append_time_topics(parts)
        summary = await restore_all(config, parts, Progress(parts), metrics)
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
