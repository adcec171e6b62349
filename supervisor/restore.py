"""`restore`: put archived chains back into Kafka topics, exactly once, resumable after a kill at any moment.

The driver decides, Spark tasks move the records:
1. The archive's chains are listed (`sinks.archive_catalog`) and selected by the config's entries; each chain's
   blob names are validated in full, and its range to restore is the chain's extent cut by the entry's bounds.
2. In preserve mode (and for `--dry-run`) a survey job counts each range's records and holes first: a hole
   cannot keep its offset, so preserve refuses before anything is written, naming the first hole.
3. Each destination partition is opened as the Kafka destination of a mirror would be (`sinks.kafka.KafkaSink`):
   renumber takes the partition over and fences older writers, and its position is the archived offset its
   consumer group committed (or the last record's header); preserve's position is the partition's end, whose
   last record must be the archive's own record at that offset. The restore continues from there.
4. Jobs run until every range is restored: each job has one task per unfinished partition, producing its next
   `spark.offsets-per-task` offsets (one transaction in renumber mode), so partitions run in parallel and each
   one's records go out in offset order. The driver records each produced range in order.

Restart correctness comes from the destination alone: a killed restore leaves committed transactions (renumber)
or offset-checked records (preserve), and the next run's open finds where they end.
"""

from __future__ import annotations

import logging
import re
import sys
import time
import uuid
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from config.errors import ConfigError
from config.kafka_clients import ClientSettingsError
from config.model import FilesystemDestination, S3Destination
from config.restore import RestoreConfig, RestoreEntry
from sinks.archive_catalog import filesystem_chains, s3_chains
from sinks.blob_chain import BlobRange, verify_all
from sinks.blob_reading import BlobReader
from sinks.factory import SinkFactory, kafka_settings, retry_policy, s3_settings
from sinks.kafka import KafkaRecord, KafkaSink
from sinks.produce_target import KafkaProduceTarget, ProducedRange
from sinks.retry import RetryingSink
from supervisor.describe import describe_error
from supervisor.output import table_lines
from workers.archive_records import ArchiveSurvey, read_archived
from workers.range_job import RangeJobError
from workers.restore_job import ArchivedRange, RestoreTask, run_restore_job, run_survey_job
from workers.spark_session import get_spark

log = logging.getLogger("mirror_v3.restore")

PROGRESS_EVERY_S = 5.0


class RestoreRefusedError(Exception):
    """The restore cannot be done as configured; nothing was written for it."""

    def __init__(self, chain: str, problem: str) -> None:
        self.chain, self.problem = chain, problem
        super().__init__(f"{chain}: {problem}")


class RestoreFailedError(Exception):
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
    survey: ArchiveSurvey | None = None
    position: int | None = None  # the next archived offset to restore, once the destination is opened
    records: int = 0  # restored by this run
    record_bytes: int = 0
    sink: RetryingSink | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.archived}/{self.partition}"

    def blobs(self, first: int, end: int) -> tuple[BlobRange, ...]:
        return tuple(blob for blob in self.chain if blob.last >= first and blob.first < end)


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
                        f"restore[{index}].partitions: the archive holds no partition {absent[0]} of {name!r} "
                        f"(it holds {', '.join(map(str, partitions))})"
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
            name, partition, entry.destination_topic(name), chain, first, max(first, end), reader
        )

    async with anyio.create_task_group() as tasks:
        for slot, (_, entry, name, partition) in enumerate(chosen):
            tasks.start_soon(load, slot, entry, name, partition)
    if failures:
        raise failures[0]
    return [part for part in found if part is not None]


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
                f"restore[{index}].{key}: the archive at {where} holds no chain named {name!r} (it holds: {held})"
            )
    return [name for name in wanted if name is not None]


def _check_unique(chosen: list[tuple[int, RestoreEntry, str, int]]) -> None:
    sources: dict[tuple[str, int], int] = {}
    targets: dict[tuple[str, int], tuple[int, str]] = {}
    for index, entry, name, partition in chosen:
        if (name, partition) in sources:
            raise ConfigError(
                f"restore[{index}]: {name}/{partition} is selected by restore[{sources[name, partition]}] already"
            )
        sources[name, partition] = index
        topic = entry.destination_topic(name)
        if (topic, partition) in targets:
            other_index, other = targets[topic, partition]
            raise ConfigError(
                f"restore[{index}]: {name}/{partition} and {other}/{partition} (restore[{other_index}]) would both "
                f"be restored into {topic} partition {partition}: rename one"
            )
        targets[topic, partition] = (index, name)


async def survey(config: RestoreConfig, parts: list[RestorePartition]) -> None:
    """Count each range's records and holes in one Spark job (slices of whole blobs, summed per partition)."""
    work: list[tuple[RestorePartition, ArchivedRange]] = []
    per_slice = config.spark.offsets_per_task
    for part in parts:
        lower = part.first
        while lower < part.end:
            upper = min(part.end, lower + per_slice)
            blobs = part.blobs(lower, upper)
            work.append((part, ArchivedRange(part.archived, part.partition, part.reader, blobs, lower, upper)))
            lower = upper
    for part in parts:
        part.survey = ArchiveSurvey(part.first, part.end, 0, 0, None)
    if not work:
        return

    def run() -> list[ArchiveSurvey]:
        return run_survey_job(get_spark(config.spark), tuple(r for _, r in work), _job_group("survey"))

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


async def open_destinations(config: RestoreConfig, parts: list[RestorePartition]) -> None:
    """Open each destination partition and find where its restore continues."""
    try:
        settings = kafka_settings(config.destination)
    except ClientSettingsError as exc:
        raise ConfigError(str(exc)) from None
    policy = retry_policy(config.destination.retry)

    failures: list[Exception] = []

    async def open_one(part: RestorePartition) -> None:
        try:
            await _open_one(part)
        except RestoreRefusedError as exc:  # reported after the others finish, as one error
            failures.append(exc)
        except Exception as exc:
            failures.append(RestoreFailedError(f"{part.name} into {part.topic}: {describe_error(exc)}"))

    async def _open_one(part: RestorePartition) -> None:
        sink = KafkaSink(settings, part.topic, part.partition, source=ArchiveLookup(part), source_name=part.name)
        part.sink = RetryingSink(sink, policy, log_fields={"chain": part.name, "topic": part.topic})
        position = await part.sink.open()
        if position is None:  # an empty destination (preserve: its first record goes to offset 0)
            position = part.first
        if position < part.first:
            raise RestoreRefusedError(
                part.name,
                f"destination {part.topic}/{part.partition} already holds this chain up to offset {position - 1}, "
                f"below the restore's first offset {part.first}: the offsets in between would be skipped; restore "
                "into another topic, or set from-offset to at most "
                f"{position}",
            )
        part.position = min(position, part.end)

    async with anyio.create_task_group() as tasks:
        for part in parts:
            tasks.start_soon(open_one, part)
    if failures:
        raise failures[0]


async def restore_all(config: RestoreConfig, parts: list[RestorePartition], progress: Progress) -> RestoreSummary:
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
            target = part.sink.staging()
            assert isinstance(target, KafkaProduceTarget)
            archived = ArchivedRange(
                part.archived, part.partition, part.reader, part.blobs(part.position, end), part.position, end
            )
            tasks.append(RestoreTask(archived, target))
        job = tuple(tasks)

        def run(job: tuple[RestoreTask, ...] = job) -> list[ProducedRange]:
            try:
                return list(run_restore_job(get_spark(config.spark), job, _job_group("produce")))
            except RangeJobError as exc:
                raise RestoreFailedError(str(exc)) from None

        produced = await anyio.to_thread.run_sync(run)
        for part, item in zip(active, produced, strict=True):
            assert part.sink is not None
            await part.sink.commit(item)
            part.position = item.last + 1
            part.records += item.records
            part.record_bytes += item.record_bytes
        progress.update(parts)
    progress.finish(parts)
    return RestoreSummary(
        len(parts),
        sum(p.records for p in parts),
        sum(p.record_bytes for p in parts),
        time.monotonic() - started,
    )


class Progress:
    """Records, MB/s and ETA on stderr: a bar redrawn in place on a terminal, an INFO line every few seconds
    otherwise. The ETA assumes the offsets still to restore go at the rate so far."""

    def __init__(self, parts: list[RestorePartition], tty: bool | None = None) -> None:
        self._tty = sys.stderr.isatty() if tty is None else tty
        self._started = time.monotonic()
        self._last_line = 0.0
        self._offsets_at_start = sum(p.end - (p.position if p.position is not None else p.first) for p in parts)

    def _numbers(self, parts: list[RestorePartition]) -> tuple[int, int, float, float, float | None]:
        records = sum(p.records for p in parts)
        left = sum(p.end - (p.position if p.position is not None else p.first) for p in parts)
        elapsed = max(1e-6, time.monotonic() - self._started)
        megabytes = sum(p.record_bytes for p in parts) / 1e6 / elapsed
        done = self._offsets_at_start - left
        eta = left * elapsed / done if done > 0 else None
        return records, left, records / elapsed, megabytes, eta

    def update(self, parts: list[RestorePartition]) -> None:
        records, left, rate, megabytes, eta = self._numbers(parts)
        if self._tty:
            total = max(1, self._offsets_at_start)
            share = (total - left) / total
            bar = "#" * int(share * 30)
            when = "-" if eta is None else f"{eta:.0f}s"
            sys.stderr.write(
                f"\r[{bar:<30}] {share:6.1%} {records} records {rate:,.0f}/s {megabytes:.1f} MB/s ETA {when}  "
            )
            sys.stderr.flush()
            return
        now = time.monotonic()
        if now - self._last_line < PROGRESS_EVERY_S:
            return
        self._last_line = now
        fields = {
            "records": records,
            "offsets_left": left,
            "records_per_s": round(rate),
            "mb_per_s": round(megabytes, 2),
            "eta_s": None if eta is None else round(eta),
        }
        log.info("restoring", extra={"mirror_v3_fields": fields})

    def finish(self, parts: list[RestorePartition]) -> None:
        if self._tty:
            sys.stderr.write("\n")


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
    first_holed = next((p for p in parts if p.survey is not None and p.survey.first_hole is not None), None)
    if mode == "preserve" and first_holed is not None and first_holed.survey is not None:
        lines.append(
            f"offsets: preserve would be refused: {first_holed.name} has a hole at offset "
            f"{first_holed.survey.first_hole}; use offsets: renumber"
        )
    return "\n".join(lines)


async def close_all(parts: list[RestorePartition]) -> None:
    for part in parts:
        if part.sink is not None:
            with anyio.CancelScope(shield=True):
                await part.sink.close()


async def run_restore(config: RestoreConfig, *, dry_run: bool = False) -> str:
    """The whole command; returns what it prints on stdout."""
    try:
        factory = SinkFactory(config.archive)
    except ClientSettingsError as exc:
        raise ConfigError(str(exc)) from None
    parts = await select_partitions(config, factory)
    if not parts:
        raise ConfigError("restore: the entries select no archived chain")
    mode = config.destination.offsets
    if dry_run or mode == "preserve":
        await survey(config, parts)
    if dry_run:
        return render_dry_run(parts, mode)
    if mode == "preserve":
        refuse_holes_for_preserve(parts)
    try:
        await open_destinations(config, parts)
        progress = Progress(parts)
        summary = await restore_all(config, parts, progress)
    finally:
        await close_all(parts)
    fields = {
        "partitions": summary.partitions,
        "records": summary.records,
        "mb": round(summary.record_bytes / 1e6, 2),
        "seconds": round(summary.seconds, 1),
    }
    log.info("restore finished", extra={"mirror_v3_fields": fields})
    rate = summary.records / summary.seconds if summary.seconds > 0 else 0.0
    return (
        f"restored {summary.records} records ({summary.record_bytes / 1e6:.1f} MB) into {summary.partitions} "
        f"partitions in {summary.seconds:.1f}s ({rate:,.0f} records/s), offsets: {mode}"
    )
