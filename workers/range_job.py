"""One Spark job per flush: tasks read consecutive sub-ranges of one partition on the executors.

The job is a DataFrame of task numbers (`spark.range(n, numPartitions=n)`, one row per partition)
mapped with `mapInArrow`: each Spark task runs on its sub-range and returns only metadata, so no
record crosses into the driver. For blob destinations the tasks stage blobs (`workers.range_task`) and
return one row per blob; for the Kafka destination a job has one task, which produces its range
(`workers.kafka_produce`) and returns one row. DataFrame APIs only (no RDDs) keep Spark Connect open
as a later option.

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
from py4j.protocol import Py4JNetworkError

from core.errors import MirrorV3Error
from core.record_times import RecordTimes
from sinks.base import DestinationError
from sinks.produce_target import KafkaProduceTarget, ProducedRange
from sinks.staging import BlobStaging, StagedBlob
from source.range_reader import SourcePartition, SourceRangeError
from workers.kafka_produce import (
    DestinationMovedError,
    DestinationTaskError,
    PreserveHoleError,
    ProducerFencedError,
    produce_range,
)
from workers.python_worker import keep_zip_directories
from workers.range_task import BlobLimits, TaskRange, stage_blobs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def result_schema(*own: tuple[str, pa.DataType]) -> pa.Schema:
    """The row a flush task returns: its number and range, the columns of its kind, the latency summary and the
    error it reports instead of failing."""
    head = [("task", pa.int32()), *((name, pa.int64()) for name in ("first", "last", "records", "record_bytes"))]
    tail = [("times", pa.string()), ("error_kind", pa.string()), ("error", pa.string())]
    return pa.schema([pa.field(name, kind) for name, kind in (*head, *own, *tail)])


def spark_ddl(schema: pa.Schema) -> str:
    """The schema as the DDL string mapInArrow takes."""
    names = {pa.int32(): "int", pa.int64(): "long", pa.string(): "string"}
    return ", ".join(f"{field.name} {names[field.type]}" for field in schema)


STAGED_SCHEMA = result_schema(
    ("size", pa.int64()),
    ("ref", pa.string()),
    ("sha256", pa.string()),
    ("parts", pa.string()),
    ("retries", pa.int32()),
    ("cut", pa.string()),
)
STAGED_DDL = spark_ddl(STAGED_SCHEMA)
PRODUCED_SCHEMA = result_schema(
    ("destination_first", pa.int64()),
    ("destination_last", pa.int64()),
    ("retries", pa.int32()),
    ("skipped", pa.int64()),
)
PRODUCED_DDL = spark_ddl(PRODUCED_SCHEMA)
PRODUCED_FIELDS = PRODUCED_SCHEMA.names[1:-3]  # ProducedRange's plain fields: between the task number and the times
# What a task reports as a row instead of failing: the user's errors, which need no Spark task failure
# (and its ERROR lines and stack traces in the log) to reach the driver.
TASK_ERRORS = (
    SourceRangeError,
    DestinationError,
    PreserveHoleError,
    DestinationMovedError,
    ProducerFencedError,
    DestinationTaskError,
)


@dataclass(frozen=True)
class RangeJob:
    source: SourcePartition
    tasks: tuple[TaskRange, ...]
    limits: BlobLimits
    target: BlobStaging | KafkaProduceTarget
    job_group: str  # for cancelling
    pool: str  # FAIR scheduler pool: one per mirror, so one backlog cannot starve the others


class RangeJobError(MirrorV3Error):
    """A task failed; `kind` is the task's exception type (e.g. OffsetsDeletedError), the message its own."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(message)


class SparkGoneError(MirrorV3Error):
    """The Spark driver JVM died under us."""


SPARK_GONE = (
    "the Spark driver JVM is gone (killed, crashed or out of memory: raise spark.driver-memory; the JVM's own "
    "output above says which)"
)


def run_staging_job(spark: SparkSession, job: RangeJob) -> list[list[StagedBlob]]:
    """Stage every task's blobs; return them per task, in offset order."""
    if isinstance(job.target, KafkaProduceTarget):
        raise TypeError("run_staging_job needs a blob staging target")
    rows = _run(spark, job, _stage_function(job), STAGED_DDL, lambda frame: frame.toArrow()).to_pylist()
    raise_task_error(rows)
    staged: list[list[StagedBlob]] = [[] for _ in job.tasks]
    for row in rows:
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
                cut=row["cut"] or "",
                times=RecordTimes.decode(row["times"]),
            )
        )
    for task, blobs in zip(job.tasks, staged, strict=True):
        _check_coverage(job.source, task, blobs)
    return staged


def run_produce_job(spark: SparkSession, job: RangeJob) -> list[ProducedRange]:
    """Produce the job's one range into the Kafka destination; return what landed."""
    if not isinstance(job.target, KafkaProduceTarget) or len(job.tasks) != 1:
        raise TypeError("run_produce_job needs a Kafka target and exactly one task (records keep their order)")
    rows = _run(spark, job, _produce_function(job), PRODUCED_DDL, lambda frame: frame.toArrow()).to_pylist()
    raise_task_error(rows)
    if len(rows) != 1 or (rows[0]["first"], rows[0]["last"]) != (job.tasks[0].first, job.tasks[0].end - 1):
        raise RangeJobError("SourceRangeError", f"{job.source.name}: the task did not report its range")
    row = rows[0]
    return [
        ProducedRange(
            first=row["first"],
            last=row["last"],
            records=row["records"],
            record_bytes=row["record_bytes"],
            destination_first=row["destination_first"],
            destination_last=row["destination_last"],
            retries=row["retries"],
            skipped=row["skipped"],
            times=RecordTimes.decode(row["times"]),
        )
    ]


def cancel_job(spark: SparkSession, job_group: str) -> None:
    spark.sparkContext.cancelJobGroup(job_group)


def _run(spark: SparkSession, job: RangeJob, function: Any, ddl: str, collect: Callable[[Any], pa.Table]) -> pa.Table:
    description = f"{job.source.name} [{job.tasks[0].first}, {job.tasks[-1].end})"
    return run_tasks(spark, job.job_group, job.pool, description, len(job.tasks), function, ddl, collect)


def run_tasks(
    spark: SparkSession,
    job_group: str,
    pool: str,
    description: str,
    count: int,
    function: Any,
    ddl: str,
    collect: Callable[[Any], pa.Table],
) -> pa.Table:
    """One job of `count` tasks, task i calling `function` on a batch holding i; their rows, collected.

    A failed Python task raises RangeJobError with its exception type and message; a lost driver JVM
    SparkGoneError."""
    context = spark.sparkContext
    try:
        context.setJobGroup(job_group, description, interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", pool)
        frame = spark.range(0, count, 1, count).mapInArrow(function, ddl)
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
    assert not isinstance(staging, KafkaProduceTarget)

    def stage(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_zip_directories()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                try:
                    blobs = stage_blobs(source, tasks[index], limits, staging)
                except TASK_ERRORS as exc:
                    yield error_batch(STAGED_SCHEMA, index, exc)
                    continue
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
                            "cut": b.cut,
                            "times": None if b.times is None else b.times.encode(),
                        }
                        for b in blobs
                    ],
                    schema=STAGED_SCHEMA,
                )

    return stage


def _produce_function(job: RangeJob) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    source, tasks, target = job.source, job.tasks, job.target
    assert isinstance(target, KafkaProduceTarget)

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_zip_directories()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                try:
                    produced = produce_range(source, tasks[index], target)
                except TASK_ERRORS as exc:
                    yield error_batch(PRODUCED_SCHEMA, index, exc)
                    continue
                yield produced_batch(index, produced)

    return produce


def error_batch(schema: pa.Schema, task: int, exc: Exception) -> pa.RecordBatch:
    """The row of a task that failed with one of the user's errors (TASK_ERRORS): its type and message."""
    return pa.RecordBatch.from_pylist([{"task": task, "error_kind": type(exc).__name__, "error": str(exc)}], schema)


def produced_batch(task: int, produced: ProducedRange) -> pa.RecordBatch:
    """The row of a task that produced a range into Kafka."""
    return pa.RecordBatch.from_pylist(
        [
            {
                "task": task,
                **{f: getattr(produced, f) for f in PRODUCED_FIELDS},
                "times": None if produced.times is None else produced.times.encode(),
            }
        ],
        schema=PRODUCED_SCHEMA,
    )


def raise_task_error(rows: list[dict[str, Any]]) -> None:
    """The first task's error (by task order) becomes the job's; nothing of a failed job is committed."""
    failed = sorted((row["task"], row["error_kind"], row["error"]) for row in rows if row["error_kind"] is not None)
    if failed:
        _, kind, message = failed[0]
        raise RangeJobError(kind, message)


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
