"""The table of end-to-end scenarios: what `python -m bench` measures, and the smaller table of `--quick`.

One row is one measurement the runner makes (bench.runner), each kind by its own module; a row's fields are the
sizes that kind reads, the rest keep their defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

PATHS = ("filesystem", "s3", "kafka-preserve", "kafka-renumber")
KINDS = ("throughput", "latency", "restart", "idle", "restore")


@dataclass(frozen=True)
class Scenario:
    name: str  # unique within a table: the key the report groups repeated runs by
    kind: str  # one of KINDS
    records: int = 0  # throughput, restore: the backlog over all partitions; restart: one-record blobs in the chain
    value_size: int = 100  # bytes of each record's value (keys are 8 bytes)
    partitions: int = 1
    paths: tuple[str, ...] = ()  # throughput: destinations (PATHS); restart: "s3" and/or "filesystem"
    rate: int = 0  # latency: records/s
    seconds: float = 0.0  # latency: measured window; idle: sampled window
    warmup: float = 0.0  # latency: produced before the window; idle: settling time before it
    max_time_ms: int = 1000  # the mirror's flush.max-time-ms
    extra: int = 0  # restart: records copied behind the chain after the restart
    mirrors: int = 0  # idle: mirrors in one process
    selection: bool = False  # idle: one `topic-regex` entry selects them all, instead of one entry per partition


def _cell(value_size: int, partitions: int, records: int, paths: tuple[str, ...] = PATHS) -> Scenario:
    label = f"{value_size // 1024} KiB" if value_size % 1024 == 0 else f"{value_size} B"
    parts = "partition" if partitions == 1 else "partitions"
    return Scenario(f"{label} records, {partitions} {parts}", "throughput", records, value_size, partitions, paths)


# About a gigabyte of 1 KiB records per cell, and enough 100 B records for a backlog of several seconds at the
# target rate (500,000 records/s).
FULL = (
    _cell(100, 1, 4_000_000),
    _cell(100, 8, 4_000_000),
    _cell(1024, 1, 1_000_000),
    _cell(1024, 8, 1_000_000),
    Scenario("latency", "latency", value_size=1024, rate=5000, seconds=60, warmup=10),
    Scenario("restart", "restart", records=10_000, extra=1000, paths=("s3", "filesystem")),
    Scenario("100 idle mirrors", "idle", mirrors=100, seconds=30, warmup=30),
    Scenario("1,000 idle mirrors", "idle", mirrors=1000, seconds=30, warmup=30),
    Scenario("2,000 selected partitions", "idle", mirrors=2000, seconds=30, warmup=30, selection=True),
    Scenario("restore and verify, 1 KiB records, 4 partitions", "restore", 1_000_000, 1024, 4),
)

# Every kind and every throughput path once, small: a smoke run of the whole bench in a few minutes.
QUICK = (
    _cell(100, 1, 10_000),
    Scenario("latency", "latency", value_size=1024, rate=1000, seconds=4, warmup=1),
    Scenario("restart", "restart", records=300, extra=50, paths=("s3",)),
    Scenario("10 idle mirrors", "idle", mirrors=10, seconds=3, warmup=1),
    Scenario("20 selected partitions", "idle", mirrors=20, seconds=3, warmup=1, selection=True),
    Scenario("restore and verify, 1 KiB records, 2 partitions", "restore", 20_000, 1024, 2),
)
