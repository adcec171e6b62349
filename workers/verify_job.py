"""One Spark job for `verify`: each task checks one slice of one destination (a run of blobs of a chain,
`workers.verify_task`, or a range of a Kafka partition, `workers.kafka_verify_task`) and returns its counts, its
first differences and its file problems (`workers.range_job.run_items`). Slices of many mirrors share a job, so
every core (or executor) works whatever the number or size of the partitions; no record reaches the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sinks.blob.chain import BlobRange
from sinks.blob.reading import BlobReader
from source.range_reader import SourcePartition
from workers.kafka_verify_task import KafkaSlice
from workers.range_job import JobSpec, balanced_packs, run_items
from workers.verify_task import SliceCheck, check_slice

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class BlobSlice:
    """Consecutive blobs of one chain, checked by one task."""

    source: SourcePartition
    reader: BlobReader
    blobs: tuple[BlobRange, ...]
    check_from: int  # the source's log start: below it, files are checked but records not compared
    source_end: int  # what the source holds up to now (exclusive)
    max_differences: int
    schema_fields: tuple[str, ...] = ()  # schemas: "key", "value" whose schema IDs are noted

    def check(self) -> SliceCheck:
        return check_slice(
            self.source,
            self.blobs,
            self.reader,
            self.check_from,
            self.source_end,
            self.max_differences,
            schema_fields=self.schema_fields,
        )


VerifySlice = BlobSlice | KafkaSlice


def run_verify_job(spark: SparkSession, slices: tuple[VerifySlice, ...], job_group: str) -> list[SliceCheck]:
    """Check every slice; results in the slices' order. A slice whose source cannot be read raises its error (the
    first such slice's, by order)."""
    spec = JobSpec(job_group, "mirror-v3.verify", f"verify {len(slices)} slices")
    outcomes = run_items(spark, slices, balanced_packs(spark, [1] * len(slices)), _check, spec)
    return [outcome.get() for outcome in outcomes]


def _check(work: VerifySlice, state: dict[str, Any]) -> SliceCheck:
    return work.check()
