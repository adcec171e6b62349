"""`verify`: compare every mirror's destination with its source, record by record, as one Spark job.

Per mirror, the driver lists the whole chain (every name validated) and asks the source where it starts and ends;
then the chain is cut into slices of whole blobs (about `spark.offsets-per-task` offsets each) and one job checks
every slice of every mirror (`workers.verify_job`): no record reaches the driver, and memory stays bounded
whatever the partition's size. What the source no longer holds (below its log start) cannot be compared: its files
are still checked as files, and the range is reported as unverifiable.

Blob destinations (filesystem, S3): the chain is cut into slices of whole blobs, every file checked as a file.
Kafka destinations: the partition is cut into ranges of about `spark.offsets-per-task` destination offsets. In
renumber mode the driver first reads the first record at or after each range's start: its source-offset header
says where in the source the range begins (`KafkaSink.source_offset_from`), so consecutive tasks compare ranges
that meet exactly, whatever the destination holds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import uuid
from dataclasses import dataclass
from functools import partial
from typing import Annotated

import anyio
import anyio.to_thread
import msgspec

from commands.job_progress import JobProgress, JobTasks, reported, spark_job_tasks
from commands.output import about, document_schema, table_lines
from config.estate import MirrorSpec, Shard, compile_entries
from config.model import Config
from core.describe import describe_error
from core.errors import MirrorV3Error, SourceError
from core.logs import log_event
from sinks.blob.chain import BlobRange, verify_all
from sinks.blob.sink import BlobSink
from sinks.destination import Destination, DestinationCluster
from sinks.destinations import open_destination
from sinks.kafka.sink import KafkaSink
from sinks.schemas.archive import SchemaArchive
from sinks.schemas.rewrite import SchemaRewrite
from source.discovery import plan_estate
from source.lookup import source_lookup, source_registry
from source.offsets import SourceClusters, SourceOffsets
from source.range_reader import SourcePartition
from workers.kafka_verify_task import KafkaSlice
from workers.partition_source import source_partition
from workers.spark_session import SparkLaunch, started_spark
from workers.spark_start import start_spark
from workers.verify_job import BlobSlice, VerifySlice, run_verify_job
from workers.verify_task import SliceCheck

log = logging.getLogger("mirror_v3.verify")


class FoundDifference(msgspec.Struct, rename="kebab"):
    offset: Annotated[int, about("Source offset (for `unmapped`: the destination offset).")]
    kind: Annotated[
        str,
        about(
            "different, missing (at the destination), extra or duplicate (at the destination), unmapped (a renumbered "
            "Kafka destination's record without the mirror-v3.source-offset header)."
        ),
    ]
    fields: Annotated[list[str], about("For `different`: key, value, headers, timestamp, timestamp_type.")]


class MirrorVerification(msgspec.Struct, rename="kebab"):
    """One mirror's result. Counts are null when the mirror could not be checked (`error` says why)."""

    name: Annotated[str, about("The mirror's name.")]
    topic: Annotated[str, about("Source topic.")]
    partition: Annotated[int, about("Source partition.")]
    cluster: Annotated[str, about("The source cluster's name.")]
    destination: Annotated[str, about("Where the mirror writes, without secrets.")]
    checked_from: Annotated[int | None, about("First source offset compared.")] = None
    checked_end: Annotated[int | None, about("End (exclusive) of the compared range: the destination's end.")] = None
    equal: Annotated[int | None, about("Records identical on both sides.")] = None
    different: Annotated[int | None, about("Offsets held by both sides with different contents.")] = None
    missing: Annotated[int | None, about("Records of the source that the destination lacks.")] = None
    extra: Annotated[int | None, about("Records the destination holds that the source does not (duplicates too).")] = (
        None
    )
    holes: Annotated[
        int | None, about("Offsets neither side holds: compaction, transaction markers, aborted records (legal).")
    ] = None
    unverifiable_from: Annotated[
        int | None, about("Start of the destination's range below the source's log start (files checked only).")
    ] = None
    unverifiable_end: Annotated[int | None, about("End (exclusive) of that range: the source's log start.")] = None
    not_yet_mirrored: Annotated[int | None, about("Source offsets beyond the destination's end (the lag).")] = None
    problems: Annotated[list[str], about("Files that are not what their names promise.")] = msgspec.field(
        default_factory=list
    )
    differences: Annotated[list[FoundDifference], about("The first differences, by offset.")] = msgspec.field(
        default_factory=list
    )
    error: Annotated[str | None, about("Why the mirror could not be checked; null when it was.")] = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.problems and not (self.different or self.missing or self.extra)


class VerifyDocument(msgspec.Struct):
    """`verify --format json`: the exit code is 0 exactly when `ok` is true."""

    ok: Annotated[bool, about("Every mirror was checked, and everything checked is equal.")]
    mirrors: list[MirrorVerification]


@dataclass(frozen=True)
class VerifyReport:
    rows: list[MirrorVerification]

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)


def slices_of(chain: list[BlobRange], offsets_per_slice: int) -> list[tuple[BlobRange, ...]]:
    """Consecutive whole blobs, about `offsets_per_slice` offsets per slice (a larger blob is a slice alone).
    Pure; cost O(blobs)."""
    slices: list[tuple[BlobRange, ...]] = []
    current: list[BlobRange] = []
    for blob in chain:
        if current and blob.last + 1 - current[0].first > offsets_per_slice:
            slices.append(tuple(current))
            current = []
        current.append(blob)
    if current:
        slices.append(tuple(current))
    return slices


@dataclass(frozen=True)
class _Prepared:
    row: MirrorVerification
    slices: tuple[VerifySlice, ...]
    schemas: SchemaArchive | None = None  # an archive that keeps the schemas of the records' IDs


async def collect_verification(
    config: Config,
    launch: SparkLaunch,
    *,
    shard: Shard | None = None,
    select: re.Pattern[str] | None = None,
    max_differences: int = 20,
    timeout_s: float = 30.0,
    ignore_unmapped: bool = False,
) -> VerifyReport:
    """Check every selected mirror. Raises ConfigError (unusable destination settings, a collision) and SourceError
    (a cluster whose topics cannot be read)."""
    clusters = SourceClusters()
    try:
        with anyio.fail_after(timeout_s):
            plan = await plan_estate(clusters, compile_entries(config), shard)
        mirrors = [m for m in plan.mirrors if select is None or select.fullmatch(m.name)]
        destination = open_destination(
            config.destination, source_lookups=source_lookup, source_registries=source_registry
        )
        if destination.archive is not None:
            await destination.archive.check_format()  # an archive of a newer layout is refused, not misread
        prepared: list[_Prepared | None] = [None] * len(mirrors)
        destination_id = await _destination_id(destination.cluster) if mirrors else None

        read = [0]

        async def prepare(index: int, mirror: MirrorSpec) -> None:
            prepared[index] = await _prepare(
                mirror, destination, clusters, config, max_differences, timeout_s, ignore_unmapped, destination_id
            )
            read[0] += 1

        # Listing a large archive's chains takes a while: said every few seconds, as the job's progress is.
        reading = JobProgress(f"reading {len(mirrors)} mirrors' sources and destinations", "verify reading", "mirrors")
        async with reported(reading, lambda: JobTasks(read[0], len(mirrors))), anyio.create_task_group() as preparing:
            for index, mirror in enumerate(mirrors):
                preparing.start_soon(prepare, index, mirror)
    except TimeoutError:
        raise SourceError(f"reading the source clusters' topics timed out after {timeout_s:g}s") from None
    finally:
        await clusters.close()
    ready = [p for p in prepared if p is not None]
    work = tuple(s for p in ready for s in p.slices)
    if work:
        log_event(log, logging.INFO, "verify planned", mirrors=len(ready), slices=len(work))
        await start_spark(config.spark, launch)
        group = f"mirror-v3.verify.{uuid.uuid4().hex[:12]}"
        checking = JobProgress(f"verifying {len(work)} slices", "verifying")
        async with reported(checking, partial(spark_job_tasks, group)):
            checks = await anyio.to_thread.run_sync(_run_job, config, work, group)
        _apply(ready, checks)
        if not isinstance(checks, str):
            await _check_schemas(ready, checks)
    return VerifyReport([p.row for p in ready])


def _run_job(config: Config, work: tuple[VerifySlice, ...], group: str) -> list[SliceCheck] | str:
    spark = started_spark()
    try:
        return run_verify_job(spark, work, group)
    except MirrorV3Error as exc:
        return str(exc)


async def _prepare(
    mirror: MirrorSpec,
    destination: Destination,
    clusters: SourceClusters,
    config: Config,
    max_differences: int,
    timeout_s: float,
    ignore_unmapped: bool = False,
    destination_id: str | Exception | None = None,
) -> _Prepared:
    sink = destination.sink(mirror, retries=False)
    schemas: SchemaArchive | None = None
    row = MirrorVerification(mirror.name, mirror.topic, mirror.partition, mirror.cluster, sink.description)
    per_slice = config.spark.offsets_per_task
    try:
        with anyio.fail_after(timeout_s):
            offsets = await clusters.get(mirror.cluster, mirror.source, mirror.source_field).offsets(
                mirror.topic, mirror.partition, mirror.source.isolation_level
            )
        # A one-shot check asks nothing again: a read waits up to a request timeout for the source, not the mirror's
        # read-stall timeout (which `run` can afford because its actors ask again).
        source = dataclasses.replace(
            source_partition(mirror, group_id=f"mirror-v3.verify.{mirror.name}"),
            stall_timeout_s=mirror.source.request_timeout_ms / 1000,
        )
        slices: tuple[VerifySlice, ...]
        cluster, archive = destination.cluster, destination.archive
        if cluster is not None:
            assert isinstance(sink, KafkaSink)
            copy = _destination_partition(cluster, mirror)
            with anyio.fail_after(timeout_s * 10):
                if isinstance(destination_id, Exception):
                    raise destination_id
                slices = await _kafka_slices(
                    row,
                    sink,
                    source,
                    copy,
                    offsets,
                    cluster.renumbers,
                    per_slice,
                    max_differences,
                    destination_id,
                    ignore_unmapped,
                    cluster.schema_rewrite(mirror, read_only=True),
                )
        else:
            assert isinstance(sink, BlobSink) and archive is not None
            reader = archive.reader(mirror.destination_name, mirror.partition)
            with anyio.fail_after(timeout_s * 10):
                chain = await verify_all(sink.chain.store)
            _ranges(row, chain, offsets)
            schemas = archive.schema_archive(mirror)
            fields = () if schemas is None else schemas.fields
            slices = tuple(
                BlobSlice(source, reader, blobs, offsets.log_start, offsets.end, max_differences, fields)
                for blobs in slices_of(chain, per_slice)
            )
    except TimeoutError:
        row.error = f"timed out after {timeout_s:g}s"
        return _Prepared(row, ())
    except Exception as exc:
        row.error = describe_error(exc)
        return _Prepared(row, ())
    finally:
        with anyio.CancelScope(shield=True):
            await sink.close()
    return _Prepared(row, slices, schemas)


async def _destination_id(cluster: DestinationCluster | None) -> str | Exception | None:
    """renumber: the destination cluster's id, read once for every mirror (a failure is each mirror's error)."""
    if cluster is None or not cluster.renumbers:
        return None
    try:
        return await cluster.admin().cluster_id()
    except Exception as exc:
        return exc


def _destination_partition(cluster: DestinationCluster, mirror: MirrorSpec) -> SourcePartition:
    """The destination partition as a Spark task reads it: committed records only."""
    return SourcePartition(
        bootstrap_servers=cluster.bootstrap_servers,
        topic=mirror.destination_name,
        partition=mirror.partition,
        isolation_level="read_committed",
        group_id=f"mirror-v3.verify.{mirror.name}",
        stall_timeout_s=cluster.request_timeout_s,
        client_properties=cluster.reader_properties(),
    )


async def _kafka_slices(
    row: MirrorVerification,
    sink: KafkaSink,
    source: SourcePartition,
    destination: SourcePartition,
    offsets: SourceOffsets,
    renumbered: bool,
    per_slice: int,
    max_differences: int,
    skip_cluster: str | None = None,
    ignore_unmapped: bool = False,
    schemas: SchemaRewrite | None = None,
) -> tuple[KafkaSlice, ...]:
    """Cut the destination partition into slices and fill in the row's ranges (in source offsets)."""
    position = (await sink.inspect()).next_offset  # checks the topic; the next source offset it expects
    dest_start, dest_end = await sink.extent()
    if renumbered:
        starts = list(range(dest_start, dest_end, per_slice))
        found: list[int | None] = [None] * len(starts)
        limiter = anyio.CapacityLimiter(8)

        async def find(index: int) -> None:
            async with limiter:
                found[index] = await sink.source_offset_from(starts[index], dest_end)

        async with anyio.create_task_group() as tasks:
            for index in range(len(starts)):
                tasks.start_soon(find, index)
        bounds = source_bounds(found, offsets.log_start if position is None else position)
        origin = bounds[0]  # the first source offset the destination holds
    else:  # a destination offset is its source offset; below the source's log start nothing can be compared
        origin = dest_start
        starts = list(range(min(max(dest_start, offsets.log_start), dest_end), dest_end, per_slice))
        bounds = [*starts, dest_end]
    end = bounds[-1]
    row.checked_from, row.checked_end = min(max(bounds[0], offsets.log_start), end), end
    if origin < row.checked_from:
        row.unverifiable_from, row.unverifiable_end = origin, row.checked_from
    row.not_yet_mirrored = max(0, offsets.end - max(end, offsets.log_start))
    if not starts:
        row.equal = row.different = row.missing = row.extra = row.holes = 0
        return ()
    return tuple(
        KafkaSlice(
            source,
            destination,
            renumbered,
            dest_first,
            bounds[index + 1] if not renumbered else starts[index + 1] if index + 1 < len(starts) else dest_end,
            bounds[index],
            bounds[index + 1],
            offsets.log_start,
            offsets.end,
            max_differences,
            skip_cluster,
            ignore_unmapped,
            schemas,
        )
        for index, dest_first in enumerate(starts)
    )


def source_bounds(found: list[int | None], end: int) -> list[int]:
    """renumber: the source offsets where consecutive slices begin, and the end. `found[i]` is the source offset of
    the first mapped record at or after slice i's start (None: none from there on); `end` is the destination's
    position. Made non-decreasing, so the slices' source ranges meet exactly and never run backwards (a record
    out of that order is counted extra by its task). Pure; O(slices)."""
    bounds: list[int] = []
    for offset in found:
        bounds.append(max(end if offset is None else offset, bounds[-1] if bounds else 0))
    bounds.append(max(end, bounds[-1] if bounds else end))
    return bounds


def _ranges(row: MirrorVerification, chain: list[BlobRange], offsets: SourceOffsets) -> None:
    """Blob destinations: the row's ranges from the chain's extent."""
    if not chain:
        row.equal = row.different = row.missing = row.extra = row.holes = 0
        row.not_yet_mirrored = max(0, offsets.end - offsets.log_start)
        return
    first, end = chain[0].first, chain[-1].last + 1
    row.checked_from, row.checked_end = min(max(first, offsets.log_start), end), end
    if offsets.log_start > first:
        row.unverifiable_from, row.unverifiable_end = first, min(offsets.log_start, end)
    row.not_yet_mirrored = max(0, offsets.end - end)


def _apply(ready: list[_Prepared], checks: list[SliceCheck] | str) -> None:
    position = 0
    for prepared in ready:
        row, count = prepared.row, len(prepared.slices)
        if not count:
            continue
        if isinstance(checks, str):
            row.error = checks
            continue
        mine = checks[position : position + count]
        position += count
        row.equal = sum(c.comparison.equal for c in mine)
        row.different = sum(c.comparison.different for c in mine)
        row.missing = sum(c.comparison.missing for c in mine)
        row.extra = sum(c.comparison.extra for c in mine)
        row.holes = sum(c.comparison.holes for c in mine)
        row.problems = [p for c in mine for p in c.problems]
        found = sorted((d for c in mine for d in c.comparison.differences), key=lambda d: d.offset)
        limit = prepared.slices[0].max_differences
        row.differences = [FoundDifference(d.offset, d.kind, list(d.fields)) for d in found[:limit]]


async def _check_schemas(ready: list[_Prepared], checks: list[SliceCheck]) -> None:
    """An archive that keeps schemas must hold a readable document for every schema ID its records carry: without
    it a restore cannot give them their schemas. Each one missing is a problem of the row."""
    position = 0
    for prepared in ready:
        mine = checks[position : position + len(prepared.slices)]
        position += len(prepared.slices)
        if prepared.schemas is None:
            continue
        first_at: dict[int, int] = {}
        for check in mine:
            for schema_id, offset in check.schema_ids:
                first_at[schema_id] = min(offset, first_at.get(schema_id, offset))
        try:
            missing = await prepared.schemas.unresolved(first_at)
        except Exception as exc:
            prepared.row.error = f"schemas of {prepared.schemas.location}: {describe_error(exc)}"
            continue
        prepared.row.problems += [
            f"{prepared.schemas.location}: no readable document of schema ID {schema_id}, carried from offset "
            f"{first_at[schema_id]} on: a restore cannot give these records their schema"
            for schema_id in missing
        ]


TABLE_COLUMNS = (
    "MIRROR",
    "TOPIC",
    "PARTITION",
    "CHECKED",
    "EQUAL",
    "DIFFERENT",
    "MISSING",
    "EXTRA",
    "HOLES",
    "UNVERIFIABLE",
    "DESTINATION",
    "ERROR",
)


def _span(first: int | None, end: int | None) -> str:
    return "-" if first is None or end is None else f"{first}-{end - 1}" if end > first else "none"


def render_table(report: VerifyReport) -> str:
    body = [
        [
            row.name,
            row.topic,
            str(row.partition),
            _span(row.checked_from, row.checked_end),
            *("-" if value is None else str(value) for value in (row.equal, row.different, row.missing, row.extra)),
            "-" if row.holes is None else str(row.holes),
            _span(row.unverifiable_from, row.unverifiable_end),
            row.destination,
            row.error or ("; ".join(row.problems) if row.problems else ""),
        ]
        for row in report.rows
    ]
    lines = table_lines(TABLE_COLUMNS, body)
    for row in report.rows:
        for difference in row.differences:
            what = f"{difference.kind} ({', '.join(difference.fields)})" if difference.fields else difference.kind
            lines.append(f"{row.name}: offset {difference.offset}: {what}")
    return "\n".join(lines)


def render_json(report: VerifyReport) -> str:
    return msgspec.json.encode(VerifyDocument(ok=report.ok, mirrors=report.rows)).decode()


def render_schema() -> str:
    schema = document_schema(VerifyDocument, "mirror-v3 verify --format json")
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
