"""One Spark job for `verify`: each task checks one slice of one destination (a run of blobs of a chain,
`workers.verify_task`, or a range of a Kafka partition, `workers.kafka_verify_task`) and returns its counts, its
first differences and its file problems as one row. Slices of many mirrors share a job, so every core
(or executor) works whatever the number or size of the partitions; no record reaches the driver.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from sinks.blob_chain import BlobRange
from sinks.blob_reading import BlobReader
from source.range_reader import SourcePartition
from workers.kafka_verify_task import KafkaSlice
from workers.python_worker import keep_zip_directories
from workers.range_job import TASK_ERRORS, RangeJobError, error_batch, raise_task_error, run_tasks, spark_ddl
from workers.record_comparison import Comparison, Difference
from workers.verify_task import SliceCheck, check_slice

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHECKED_SCHEMA = pa.schema(
    [
        pa.field("task", pa.int32()),
        pa.field("first", pa.int64()),
        pa.field("end", pa.int64()),
        pa.field("equal", pa.int64()),
        pa.field("different", pa.int64()),
        pa.field("missing", pa.int64()),
        pa.field("extra", pa.int64()),
        pa.field("holes", pa.int64()),
        pa.field("differences", pa.string()),  # JSON: [[offset, kind, [field, ...]], ...]
        pa.field("problems", pa.string()),  # JSON: [text, ...]
        pa.field("error_kind", pa.string()),
        pa.field("error", pa.string()),
    ]
)
CHECKED_DDL = spark_ddl(CHECKED_SCHEMA)


@dataclass(frozen=True)
class BlobSlice:
    """Consecutive blobs of one chain, checked by one task."""

    source: SourcePartition
    reader: BlobReader
    blobs: tuple[BlobRange, ...]
    check_from: int  # the source's log start: below it, files are checked but records not compared
    source_end: int  # what the source holds up to now (exclusive)
    max_differences: int

    def check(self) -> SliceCheck:
        return check_slice(self.source, self.blobs, self.reader, self.check_from, self.source_end, self.max_differences)


VerifySlice = BlobSlice | KafkaSlice


def run_verify_job(spark: SparkSession, slices: tuple[VerifySlice, ...], job_group: str) -> list[SliceCheck]:
    """Check every slice; results in the slices' order. A slice whose source cannot be read fails the job
    (RangeJobError naming the partition)."""
    rows = run_tasks(
        spark,
        job_group,
        "mirror-v3.verify",
        f"verify {len(slices)} slices",
        len(slices),
        _check_function(slices),
        CHECKED_DDL,
        lambda frame: frame.toArrow(),
    ).to_pylist()
    raise_task_error(rows)
    checks: list[SliceCheck | None] = [None] * len(slices)
    for row in rows:
        differences = tuple(Difference(o, k, tuple(f)) for o, k, f in json.loads(row["differences"]))
        comparison = Comparison(
            row["first"],
            row["end"],
            row["equal"],
            row["different"],
            row["missing"],
            row["extra"],
            row["holes"],
            differences,
        )
        checks[row["task"]] = SliceCheck(comparison, tuple(json.loads(row["problems"])))
    if any(check is None for check in checks):
        raise RangeJobError("SourceRangeError", "a verify task returned no result")
    return [check for check in checks if check is not None]


def _check_function(
    slices: tuple[VerifySlice, ...],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def check(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        keep_zip_directories()
        for batch in batches:
            for index in batch.column(0).to_pylist():
                work = slices[index]
                try:
                    result = work.check()
                except TASK_ERRORS as exc:
                    yield error_batch(CHECKED_SCHEMA, index, exc)
                    continue
                found = result.comparison
                row = {
                    "task": index,
                    "first": found.first,
                    "end": found.end,
                    "equal": found.equal,
                    "different": found.different,
                    "missing": found.missing,
                    "extra": found.extra,
                    "holes": found.holes,
                    "differences": json.dumps([[d.offset, d.kind, list(d.fields)] for d in found.differences]),
                    "problems": json.dumps(list(result.problems)),
                }
                yield pa.RecordBatch.from_pylist([row], schema=CHECKED_SCHEMA)

    return check
