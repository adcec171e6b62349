"""Spark jobs of `restore`: find where timestamp bounds fall, survey archived ranges, and produce them into Kafka.

Time search: each task finds, in a run of blobs, the first offsets stamped at or after a restore's timestamp
bounds (`workers.archive_records.first_stamped_at_or_after`).
Survey: each task counts the records and holes of a run of blobs (`workers.archive_records.survey_archived`).
Produce: each task takes the next range of one partition, reads it from the archived blobs and produces it with
the Kafka destination's own path (`workers.kafka_produce.produce_range`: a transaction that also commits the
position in renumber mode, offset-checked deliveries in preserve mode). One task per partition per job, so the
partitions of a job run in parallel while each partition's records go out in offset order. Only counts and
ranges come back to the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sinks.blob_chain import BlobRange
from sinks.blob_reading import BlobReader
from sinks.produce_target import KafkaProduceTarget, ProducedRange
from source.range_reader import SourcePartition
from workers.archive_records import (
    ArchiveReadError,
    ArchiveSurvey,
    first_stamped_at_or_after,
    read_archived,
    survey_archived,
)
from workers.kafka_produce import produce_range
from workers.python_worker import keep_zip_directories
from workers.range_job import (
    PRODUCED_DDL,
    PRODUCED_FIELDS,
    PRODUCED_SCHEMA,
    TASK_ERRORS,
    RangeJobError,
    error_batch,
    produced_batch,
    raise_task_error,
    run_tasks,
    spark_ddl,
)
from workers.range_task import TaskRange

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESTORE_TASK_ERRORS = (*TASK_ERRORS, ArchiveReadError)

SURVEY_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("records", pa.int64()),
        pa.field("holes", pa.int64()),
        pa.field("first_hole", pa.int64()),
        pa.field("error_kind", pa.string()),
        pa.field("error", pa.string()),
    ]
)
SURVEY_DDL = spark_ddl(SURVEY_SCHEMA)

TIMES_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("since", pa.int64()),
        pa.field("until", pa.int64()),
        pa.field("error_kind", pa.string()),
        pa.field("error", pa.string()),
    ]
)
TIMES_DDL = spark_ddl(TIMES_SCHEMA)


@dataclass(frozen=True)
class ArchivedRange:
    """[first, end) of one archived chain, and the blobs that hold it."""

    topic: str  # the archived name
    partition: int
    reader: BlobReader
    blobs: tuple[BlobRange, ...]
    first: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class RestoreTask:
    archived: ArchivedRange  # the task's range
    target: KafkaProduceTarget


@dataclass(frozen=True)
class TimeSearch:
    """Where in `archived` the first records stamped at or after `since_ms` and `until_ms` are."""

    archived: ArchivedRange
    since_ms: int | None
    until_ms: int | None


def archive_partition(work: ArchivedRange) -> SourcePartition:
    """How produce_range names the archived chain in its messages; the records come from the blobs, so nothing
    ever connects to this."""
    return SourcePartition("", work.topic, work.partition, "read_committed", "", 0.0)


def _restore_rows(
    spark: SparkSession, job_group: str, what: str, count: int, function: Any, ddl: str
) -> list[dict[str, Any]]:
    """The rows of one restore job of `count` tasks; RangeJobError for the first task that reported an error."""
    frame = run_tasks(spark, job_group, "mirror-v3.restore", what, count, function, ddl, lambda f: f.toArrow())
    rows: list[dict[str, Any]] = frame.to_pylist()
    raise_task_error(rows)
    return rows


def run_survey_job(spark: SparkSession, ranges: tuple[ArchivedRange, ...], job_group: str) -> list[ArchiveSurvey]:
    rows = _restore_rows(
        spark, job_group, f"survey {len(ranges)} archived ranges", len(ranges), _survey_function(ranges), SURVEY_DDL
    )
    found: dict[int, ArchiveSurvey] = {}
    for row in rows:
        work = ranges[row["task"]]
        found[row["task"]] = ArchiveSurvey(work.first, work.end, row["records"], row["holes"], row["first_hole"])
    if len(found) != len(ranges):
        raise RangeJobError("ArchiveReadError", "a survey task returned no result")
    return [found[index] for index in range(len(ranges))]


def run_time_search_job(
    spark: SparkSession, searches: tuple[TimeSearch, ...], job_group: str
) -> list[tuple[int | None, int | None]]:
    """Each search's (since, until) offsets: the first of its range stamped at or after each time, or None."""
    what = f"find timestamps in {len(searches)} archived ranges"
    rows = _restore_rows(spark, job_group, what, len(searches), _time_search_function(searches), TIMES_DDL)
    found = {row["task"]: (row["since"], row["until"]) for row in rows}
    if len(found) != len(searches):
        raise RangeJobError("ArchiveReadError", "a timestamp search task returned no result")
    return [found[index] for index in range(len(searches))]


def run_restore_job(spark: SparkSession, tasks: tuple[RestoreTask, ...], job_group: str) -> list[ProducedRange]:
    """Produce every task's range; what landed, in the tasks' order. The first failed task (by order) fails the
    job with RangeJobError; the others' ranges landed all the same, and the destination says so on the next run."""
    rows = _restore_rows(
        spark, job_group, f"restore {len(tasks)} ranges", len(tasks), _produce_function(tasks), PRODUCED_DDL
    )
    produced: dict[int, ProducedRange] = {}
    for row in rows:
        produced[row["task"]] = ProducedRange(**{f: row[f] for f in PRODUCED_FIELDS})
    if len(produced) != len(tasks):
        raise RangeJobError("DestinationTaskError", "a restore task returned no result")
    return [produced[index] for index in range(len(tasks))]


def _survey_function(
    ranges: tuple[ArchivedRange, ...],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def survey(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_zip_directories()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                work = ranges[index]
                try:
                    found = survey_archived(work.reader, work.blobs, work.first, work.end)
                except RESTORE_TASK_ERRORS as exc:
                    yield error_batch(SURVEY_SCHEMA, index, exc)
                    continue
                row = {"task": index, "records": found.records, "holes": found.holes, "first_hole": found.first_hole}
                yield pa.RecordBatch.from_pylist([row], schema=SURVEY_SCHEMA)

    return survey


def _time_search_function(
    searches: tuple[TimeSearch, ...],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def search(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_zip_directories()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                work = searches[index]
                archived = work.archived
                try:
                    since, until = first_stamped_at_or_after(
                        archived.reader, archived.blobs, archived.first, archived.end, (work.since_ms, work.until_ms)
                    )
                except RESTORE_TASK_ERRORS as exc:
                    yield error_batch(TIMES_SCHEMA, index, exc)
                    continue
                yield pa.RecordBatch.from_pylist([{"task": index, "since": since, "until": until}], schema=TIMES_SCHEMA)

    return search


def _produce_function(tasks: tuple[RestoreTask, ...]) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_zip_directories()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                work = tasks[index].archived
                target = tasks[index].target
                source = archive_partition(work)

                def read(read_from: int, end: int, work: ArchivedRange = work) -> Iterator[list[Any]]:
                    yield from read_archived(work.reader, work.blobs, read_from, end)

                try:
                    produced = produce_range(source, TaskRange(work.first, work.first, work.end), target, read=read)
                except RESTORE_TASK_ERRORS as exc:
                    yield error_batch(PRODUCED_SCHEMA, index, exc)
                    continue
                yield produced_batch(index, produced)

    return produce
