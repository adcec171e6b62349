"""One Spark job per flush: tasks read consecutive sub-ranges of one partition on the executors.

The job is a DataFrame of task numbers (`spark.range(n, numPartitions=n)`, one row per partition)
mapped with `mapInArrow`: each Spark task runs `workers.range_task` on its sub-range. For blob
destinations the tasks stage the blobs themselves and return one metadata row per blob, so no record
crosses into the driver. For the Kafka destination they return the records, which the driver's
producer writes. DataFrame APIs only (no RDDs) keep Spark Connect open as a later option.

`run_range_job` blocks; callers run it in a worker thread. A running job is cancelled from another
thread with `cancel_job`, which interrupts its job group.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JNetworkError

from sinks.records import conform
from sinks.staging import BlobStaging, RecordsToDriver, StagedBlob
from workers.kafka_range import SourcePartition
from workers.range_task import BlobLimits, TaskRange, read_records, stage_blobs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

STAGED_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("first", pa.int64()),
        pa.field("last", pa.int64()),
        pa.field("records", pa.int64()),
        pa.field("record_bytes", pa.int64()),
        pa.field("size", pa.int64()),
        pa.field("ref", pa.string()),
        pa.field("sha256", pa.string()),
        pa.field("parts", pa.string()),
        pa.field("retries", pa.int32()),
    ]
)
STAGED_DDL = (
    "task int, first long, last long, records long, record_bytes long, size long, ref string, sha256 string, "
    "parts string, retries int"
)
RECORDS_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)


@dataclass(frozen=True)
class RangeJob:
    source: SourcePartition
    tasks: tuple[TaskRange, ...]
    limits: BlobLimits
    target: BlobStaging | RecordsToDriver
    job_group: str  # for cancelling
    pool: str  # FAIR scheduler pool: one per mirror, so one backlog cannot starve the others


class RangeJobError(RuntimeError):
    """A task failed; `kind` is the task's exception type (e.g. OffsetsDeletedError), the message its own."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class SparkGoneError(RuntimeError):
    """The Spark driver JVM died under us."""


SPARK_GONE = (
    "the Spark driver JVM is gone (killed, crashed or out of memory: raise spark.driver-memory; the JVM's own "
    "output above says which)"
)


def run_staging_job(spark: SparkSession, job: RangeJob) -> list[list[StagedBlob]]:
    """Stage every task's blobs; return them per task, in offset order."""
    if isinstance(job.target, RecordsToDriver):
        raise TypeError("run_staging_job needs a blob staging target")
    rows = _run(spark, job, _stage_function(job), STAGED_DDL, lambda frame: frame.toArrow())
    staged: list[list[StagedBlob]] = [[] for _ in job.tasks]
    for row in rows.to_pylist():
        staged[row["task"]].append(
            StagedBlob(
                first=row["first"],
                last=row["last"],
                records=row["records"],
                record_bytes=row["record_bytes"],
                size=row["size"],
                ref=row["ref"],
                sha256=row["sha256"],
                parts=tuple((int(n), str(etag)) for n, etag in json.loads(row["parts"])),
                retries=row["retries"],
            )
        )
    for task, blobs in zip(job.tasks, staged, strict=True):
        _check_coverage(job.source, task, blobs)
    return staged


def run_records_job(spark: SparkSession, job: RangeJob) -> list[pa.Table]:
    """Bring every task's records into the driver; return one table per task, sorted by offset."""
    table = conform(_run(spark, job, _records_function(job), RECORDS_DDL, lambda frame: frame.toArrow()))
    tables = []
    offsets = table.column("offset")
    for task in job.tasks:
        mask = pc.and_(pc.greater_equal(offsets, task.read_from), pc.less(offsets, task.end))
        part = table.filter(mask).sort_by("offset")
        _check_offsets(job.source, task, part)
        tables.append(part)
    if sum(t.num_rows for t in tables) != table.num_rows:
        raise RangeJobError("SourceRangeError", f"{job.source.name}: records outside the requested ranges")
    return tables


def cancel_job(spark: SparkSession, job_group: str) -> None:
    spark.sparkContext.cancelJobGroup(job_group)


def _run(spark: SparkSession, job: RangeJob, function: Any, ddl: str, collect: Callable[[Any], pa.Table]) -> pa.Table:
    context = spark.sparkContext
    description = f"{job.source.name} [{job.tasks[0].first}, {job.tasks[-1].end})"
    try:
        context.setJobGroup(job.job_group, description, interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", job.pool)
        frame = spark.range(0, len(job.tasks), 1, len(job.tasks)).mapInArrow(function, ddl)
        return collect(frame)
    except (Py4JNetworkError, ConnectionError) as exc:
        raise SparkGoneError(SPARK_GONE) from exc
    except Exception as exc:
        kind, message = task_failure(str(exc))
        if kind is None:
            raise
        raise RangeJobError(kind, message) from None
    finally:
        with contextlib.suppress(Py4JNetworkError, ConnectionError):
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]


# The last line of a Python traceback inside a Spark error: "module.ErrorType: message".
_TRACEBACK_TAIL = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def task_failure(text: str) -> tuple[str | None, str]:
    """(exception type, message) of the failed Python task in a Spark error's text, if it has one."""
    found: tuple[str | None, str] = (None, "")
    in_python = False
    for line in text.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            in_python = True
            continue
        if in_python and (match := _TRACEBACK_TAIL.match(line.strip())):
            found = (match.group(1), match.group(2))
            in_python = False
    return found


def _stage_function(job: RangeJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    source, tasks, limits, staging = job.source, job.tasks, job.limits, job.target
    assert not isinstance(staging, RecordsToDriver)

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                blobs = stage_blobs(source, tasks[index], limits, staging)
                yield pa.RecordBatch.from_pylist(
                    [
                        {
                            "task": index,
                            "first": b.first,
                            "last": b.last,
                            "records": b.records,
                            "record_bytes": b.record_bytes,
                            "size": b.size,
                            "ref": b.ref,
                            "sha256": b.sha256,
                            "parts": json.dumps(b.parts),
                            "retries": b.retries,
                        }
                        for b in blobs
                    ],
                    schema=STAGED_SCHEMA,
                )

    return stage


def _records_function(job: RangeJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    source, tasks = job.source, job.tasks

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                yield from read_records(source, tasks[index])

    return read


def _check_coverage(source: SourcePartition, task: TaskRange, blobs: list[StagedBlob]) -> None:
    """A task's blobs must cover its range exactly, in order; anything else must never be committed."""
    expected = task.first
    for blob in blobs:
        if blob.first != expected or blob.last < blob.first:
            raise RangeJobError(
                "SourceRangeError", f"{source.name}: staged blobs do not tile [{task.first}, {task.end})"
            )
        expected = blob.last + 1
    if expected != task.end:
        raise RangeJobError("SourceRangeError", f"{source.name}: staged blobs end at {expected}, not {task.end}")


def _check_offsets(source: SourcePartition, task: TaskRange, table: pa.Table) -> None:
    if table.num_rows > 1:
        values = table.column("offset").combine_chunks()
        increasing = pc.all(pc.greater(values.slice(1), values.slice(0, len(values) - 1))).as_py()
        if not increasing:
            raise RangeJobError("SourceRangeError", f"{source.name}: offsets not strictly increasing")
