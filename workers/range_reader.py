"""Read an exact offset range of one partition through Spark's Kafka batch source, as Arrow.

`read_range` blocks (it runs a Spark job); callers run it in a worker thread. A running read can
be cancelled from another thread with `cancel_read`, which interrupts its Spark job group.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JNetworkError
from pyspark.sql import SparkSession

from sinks.records import conform


@dataclass(frozen=True)
class RangeRequest:
    bootstrap_servers: str
    topic: str
    partition: int
    start: int  # first offset to read
    end: int  # exclusive: the read covers [start, end)
    isolation_level: str
    group_id: str
    min_partitions: int  # Spark tasks the range is split into
    job_group: str
    kafka_options: dict[str, str] = field(default_factory=dict)


# Spark's Kafka consumers fetch with the Kafka client defaults (1 MiB per partition, 500 records per
# poll), so a read of one partition is a long series of small round trips. Measured with
# bench/profile_reads.py (100 000 x 1 KiB records, 2 tasks): 59k records/s with the defaults, 104-115k
# records/s with these. They bound what each cached consumer may hold (Spark keeps its fetched data
# between tasks), so they stay modest. The source's security properties are applied after them.
FETCH_OPTIONS = {
    "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "kafka.fetch.max.bytes": str(16 * 1024 * 1024),
    "kafka.max.poll.records": "20000",
}


class RangeReadError(RuntimeError):
    pass


class SparkGoneError(RuntimeError):
    """The Spark driver JVM died under us."""


SPARK_GONE = (
    "the Spark driver JVM is gone (killed, crashed or out of memory: raise spark.driver-memory or lower "
    "spark.max-bytes-per-read; the JVM's own output above says which)"
)


def spark_options(request: RangeRequest) -> dict[str, str]:
    options = {
        **FETCH_OPTIONS,
        "kafka.bootstrap.servers": request.bootstrap_servers,
        "assign": json.dumps({request.topic: [request.partition]}),
        "startingOffsets": json.dumps({request.topic: {str(request.partition): request.start}}),
        "endingOffsets": json.dumps({request.topic: {str(request.partition): request.end}}),
        "kafka.isolation.level": request.isolation_level,
        "includeHeaders": "true",
        # Offsets the destination still needs but the broker deleted are an error, never skipped.
        "failOnDataLoss": "true",
        # A fixed group id lets Spark reuse its pooled consumers across reads of this partition;
        # nothing is ever committed to it.
        "kafka.group.id": request.group_id,
        "minPartitions": str(max(1, request.min_partitions)),
    }
    options.update(request.kafka_options)
    return options


def read_range(spark: SparkSession, request: RangeRequest) -> pa.Table:
    if request.end <= request.start:
        raise ValueError(f"empty range [{request.start}, {request.end})")
    try:
        table = _collect(spark, request)
    except (Py4JNetworkError, ConnectionError) as exc:
        raise SparkGoneError(SPARK_GONE) from exc
    table = conform(table)
    _check_offsets(table, request)
    return table


def _collect(spark: SparkSession, request: RangeRequest) -> pa.Table:
    context = spark.sparkContext
    context.setJobGroup(request.job_group, f"read {request.topic}-{request.partition}", interruptOnCancel=True)
    try:
        reader = spark.read.format("kafka")
        for key, value in spark_options(request).items():
            reader = reader.option(key, value)
        return reader.load().toArrow()
    finally:
        with contextlib.suppress(Py4JNetworkError, ConnectionError):
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]


def cancel_read(spark: SparkSession, job_group: str) -> None:
    spark.sparkContext.cancelJobGroup(job_group)


def _check_offsets(table: pa.Table, request: RangeRequest) -> None:
    """Rows must be strictly increasing offsets inside the requested range; anything else is a bug
    or a broker misbehaving, and must never reach the destination."""
    if table.num_rows == 0:
        return
    offsets = table.column("offset")
    low, high = pc.min(offsets).as_py(), pc.max(offsets).as_py()
    if low < request.start or high >= request.end:
        raise RangeReadError(
            f"{request.topic}-{request.partition}: read offsets {low}..{high} outside [{request.start}, {request.end})"
        )
    if table.num_rows > 1:
        values = offsets.combine_chunks()
        increasing = pc.all(pc.greater(values.slice(1), values.slice(0, len(values) - 1))).as_py()
        if not increasing:
            raise RangeReadError(f"{request.topic}-{request.partition}: offsets not strictly increasing")
