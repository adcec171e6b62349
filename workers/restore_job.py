"""Spark jobs of `restore`: find where timestamp bounds fall, survey archived ranges, and produce them into Kafka.

Time search: each item finds, in a run of blobs, the first offsets stamped at or after a restore's timestamp
bounds (`workers.archive_records.first_stamped_at_or_after`).
Survey: each item counts the records and holes of a run of blobs, and notes the schema IDs its keys or values carry
(`workers.archive_records.survey_archived`).
Produce: each item is the next range of one partition, read from the archived blobs (`ArchivedRange` is its
reader) and written with the Kafka destination's own target (`sinks.kafka.produce`: a transaction that also
commits the position in renumber mode, offset-checked deliveries in preserve mode), exactly as a live flush is
(`workers.range_job.run_write_job`). Every job's items are packed into one task per core, balanced by offsets
(`workers.job_packing`): the partitions of a job run in parallel, each partition's records in offset order.
Only counts and ranges come back to the driver; an item's failure comes back as its typed error.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.errors import MirrorV3Error
from sinks.blob.chain import BlobRange
from sinks.blob.reading import BlobReader
from sinks.kafka.produce import ProducedRange
from sinks.write_target import UNCUT, TaskRange, WriteTarget
from source.range_reader import SharedConsumers
from workers.archive_records import ArchiveSurvey, first_stamped_at_or_after, read_archived, survey_archived
from workers.range_job import JobSpec, Outcome, WriteItem, balanced_packs, run_items, run_write_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ArchivedRange:
    """[first, end) of one archived chain, and the blobs that hold it; a `RecordSource` of its own records."""

    topic: str  # the archived name
    partition: int
    reader: BlobReader
    blobs: tuple[BlobRange, ...]
    first: int
    end: int

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def uses_task_consumers(self) -> bool:
        return False  # its own blobs: writes that run at the same time read them at the same time, streaming

    def open(self, consumers: SharedConsumers) -> ArchivedRange:
        return self  # read from the blobs: no consumer

    def announce(self, consumers: SharedConsumers, read_from: int, end: int, estimated_bytes: int) -> None:
        return None  # blobs are read as they stream

    def read(self, read_from: int, end: int) -> Iterator[list[Any]]:
        yield from read_archived(self.reader, self.blobs, read_from, end)


@dataclass(frozen=True)
class RestoreTask:
    archived: ArchivedRange  # the task's range
    target: WriteTarget[ProducedRange]  # the Kafka destination's (`sinks.kafka.produce.KafkaProduceTarget`)


@dataclass(frozen=True)
class TimeSearch:
    """Where in `archived` the first records stamped at or after `since_ms` and `until_ms` are."""

    archived: ArchivedRange
    since_ms: int | None
    until_ms: int | None


def _results(outcomes: Sequence[Outcome[Any]]) -> list[Any]:
    """Every item's result; the first failed item's error (by item order) raised."""
    return [outcome.get() for outcome in outcomes]


@dataclass(frozen=True)
class Survey:
    """Count the records and holes of `archived`, and note the schema IDs its `fields` ("key", "value") carry."""

    archived: ArchivedRange
    fields: tuple[str, ...] = ()


def run_survey_job(spark: SparkSession, surveys: tuple[Survey, ...], job_group: str) -> list[ArchiveSurvey]:
    spec = JobSpec(job_group, "mirror-v3.restore", f"survey {len(surveys)} archived ranges")
    packs = balanced_packs(spark, [work.archived.end - work.archived.first for work in surveys])
    return _results(run_items(spark, surveys, packs, _survey, spec))


def _survey(work: Survey, state: dict[str, Any]) -> ArchiveSurvey:
    archived = work.archived
    return survey_archived(archived.reader, archived.blobs, archived.first, archived.end, work.fields)


def run_time_search_job(
    spark: SparkSession, searches: tuple[TimeSearch, ...], job_group: str
) -> list[tuple[int | None, int | None]]:
    """Each search's (since, until) offsets: the first of its range stamped at or after each time, or None."""
    spec = JobSpec(job_group, "mirror-v3.restore", f"find timestamps in {len(searches)} archived ranges")
    packs = balanced_packs(spark, [work.archived.end - work.archived.first for work in searches])
    return _results(run_items(spark, searches, packs, _time_search, spec))


def _time_search(work: TimeSearch, state: dict[str, Any]) -> tuple[int | None, int | None]:
    archived = work.archived
    since, until = first_stamped_at_or_after(
        archived.reader, archived.blobs, archived.first, archived.end, (work.since_ms, work.until_ms)
    )
    return since, until


def run_restore_job(
    spark: SparkSession, tasks: tuple[RestoreTask, ...], job_group: str
) -> list[ProducedRange | MirrorV3Error]:
    """Produce every task's range; per task, in the tasks' order, what landed or why it did not (the others'
    ranges land all the same, and the destination says so on the next run)."""
    items = [
        WriteItem(
            work.archived,
            TaskRange(work.archived.first, work.archived.first, work.archived.end),
            UNCUT,
            work.target,
        )
        for work in tasks
    ]
    spec = JobSpec(job_group, "mirror-v3.restore", f"restore {len(tasks)} ranges")
    found: list[ProducedRange | MirrorV3Error] = []
    # Many partitions' ranges share a task (each in offset order): a task per core, not one per partition.
    packs = balanced_packs(spark, [item.task.offset_count for item in items])
    for outcome in run_write_job(spark, items, packs, spec):
        if outcome.error is not None:
            found.append(outcome.error)
            continue
        (produced,) = outcome.get()
        assert isinstance(produced, ProducedRange)
        found.append(produced)
    return found
