"""The table of end-to-end scenarios: what `python -m bench` measures, and the smaller table of `--quick`.

One row is one measurement the runner makes (bench.runner), each kind by its own module; a row's fields are the
sizes that kind reads, the rest keep their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

PATHS = ("filesystem", "s3", "kafka-preserve", "kafka-renumber")
TABLE = "bench.{topic}"  # a row's Iceberg table, with `table`
KINDS = ("throughput", "latency", "restart", "idle", "restore", "schemas", "estate-steady", "outage", "compaction")


@dataclass(frozen=True)
class Scenario:
    name: str  # unique within a table: the key the report groups repeated runs by
    kind: str  # one of KINDS
    records: int = 0  # throughput, restore: the backlog over all partitions; restart: one-record blobs in the chain
    value_size: int = 100  # bytes of each record's value (keys are 8 bytes)
    partitions: int = 1
    paths: tuple[
        str, ...
    ] = ()  # throughput, estate-steady, schemas: destinations (PATHS); restart: "s3" and/or "filesystem"
    rate: int = 0  # latency: records/s; estate-steady: records/s over all partitions; outage: per cluster
    seconds: float = 0.0  # latency, estate-steady: measured window; idle: sampled window; outage: each window
    warmup: float = 0.0  # latency, estate-steady, outage: produced before the window; idle: settling time before it
    max_time_ms: int = 1000  # the mirror's flush.max-time-ms
    extra: int = 0  # restart: records copied behind the chain after the restart
    mirrors: int = 0  # idle: mirrors in one process
    selection: bool = False  # idle: one `topic-regex` entry selects them all, instead of one entry per partition
    reference: bool = False  # estate-steady: Spark Structured Streaming on the same workload, after the mirror
    # estate-steady, blob destinations: what the mirror archives beside the records. None: the product's default (topic
    # metadata read every 60 s, no group positions); False: nothing (topic-metadata-interval-ms 0); True: topic
    # metadata and the positions of CAPTURED_GROUPS read every second, those groups committing every second.
    capture: bool | None = None
    # estate-steady and throughput, filesystem: the archive as an Iceberg table (`destination.table`, the embedded
    # catalog) committed every `table_commit_ms`; None: no table. (throughput: a second filesystem row, with it.)
    table: str | None = None
    table_commit_ms: int = 60_000
    # estate-steady, filesystem: the running mirror compacts its chains every `compaction_ms` (blobs older than
    # `compaction_min_age_ms`; destination.compaction); None: no compaction in the mirror (the product's default).
    compaction_ms: int | None = None
    compaction_min_age_ms: int = 60_000
    compaction_window_ms: int = 3_600_000
    # restore, compaction: the archive's blobs hold at most `blob_offsets` records each (flush.max-offsets; 0: the
    # default); restore with `compacted`: the same archive, compacted by `compact` (everything merged, blobs up to its
    # target size), is verified and restored beside it in the same run.
    blob_offsets: int = 0
    compacted: bool = False
    # throughput with a Kafka path: MirrorMaker 2 (exactly-once and its default) copies the same backlog, the peer
    # row issue 50 measures the Kafka paths against.
    mirror_maker: bool = True


def estate_name(s: Scenario) -> str:
    """An estate-steady row's name, from the fields that tell its rows apart."""
    parts = "partition" if s.partitions == 1 else "partitions"
    capture = {None: "", False: ", capture off", True: ", capture every 1 s"}[s.capture]
    table = "" if s.table is None else f", {s.table} table every {s.table_commit_ms / 1000:g} s"
    compacting = (
        ""
        if s.compaction_ms is None
        else f", compacting every {s.compaction_ms / 1000:g} s (window {s.compaction_window_ms / 1000:g} s, "
        f"min age {s.compaction_min_age_ms / 1000:g} s)"
    )
    return f"estate-steady, {s.partitions:,} {parts}, max-time {s.max_time_ms / 1000:g} s{capture}{table}{compacting}"


def estate(
    partitions: int,
    max_time_ms: int,
    paths: tuple[str, ...] = ("filesystem",),
    *,
    rate: int = 2000,
    warmup: float = 15.0,
    seconds: float = 40.0,
) -> Scenario:
    """An estate-steady row: issue 32's workload (2,000 records/s of 1 KiB over all partitions, 15 s warm-up, 40 s
    window) unless told otherwise, with the Structured Streaming reference."""
    row = Scenario(
        "",
        "estate-steady",
        value_size=1024,
        partitions=partitions,
        paths=paths,
        rate=rate,
        seconds=seconds,
        warmup=warmup,
        max_time_ms=max_time_ms,
        reference=True,
    )
    return replace(row, name=estate_name(row))


def _cell(value_size: int, partitions: int, records: int, paths: tuple[str, ...] = PATHS) -> Scenario:
    label = f"{value_size // 1024} KiB" if value_size % 1024 == 0 else f"{value_size} B"
    parts = "partition" if partitions == 1 else "partitions"
    return Scenario(f"{label} records, {partitions} {parts}", "throughput", records, value_size, partitions, paths)


# Issue 46: one of two clusters blackholed, then killed, under the shared flush jobs: the other's latency per window.
OUTAGE = Scenario(
    "two clusters, one blackholed then killed",
    "outage",
    value_size=1024,
    partitions=16,
    rate=500,
    seconds=30,
    warmup=15,
)

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
    Scenario(
        "restore and verify of an archive of 1 000-record blobs, compacted and not, 1 KiB records, 4 partitions",
        "restore",
        1_000_000,
        1024,
        4,
        blob_offsets=1000,
        compacted=True,
    ),
    Scenario(
        "compaction and prune of an S3 archive of 1 000-record blobs, 1 KiB records, 4 partitions",
        "compaction",
        400_000,
        1024,
        4,
        blob_offsets=1000,
    ),
    Scenario(
        "schema IDs rewritten, 1 KiB records, 4 partitions",
        "schemas",
        1_000_000,
        1024,
        4,
        ("kafka-preserve", "kafka-renumber", "filesystem"),
    ),
    # Issue 32's targets: P = 4 ... 256 at max-time 1 s, the Kafka and S3 destinations at P = 64, P = 1,024 at 10 s.
    estate(4, 1000),
    estate(16, 1000),
    estate(64, 1000, PATHS),
    estate(256, 1000),
    estate(1024, 10_000, warmup=60.0, seconds=60.0),  # 15 s: 1,024 partitions still settling (lag falling)
    OUTAGE,
)


# Every kind and every throughput path once, small: a smoke run of the whole bench in a few minutes.
QUICK = (
    _cell(100, 1, 10_000),
    Scenario("latency", "latency", value_size=1024, rate=1000, seconds=4, warmup=1),
    Scenario("restart", "restart", records=300, extra=50, paths=("s3",)),
    Scenario("10 idle mirrors", "idle", mirrors=10, seconds=3, warmup=1),
    Scenario("20 selected partitions", "idle", mirrors=20, seconds=3, warmup=1, selection=True),
    Scenario("restore and verify, 1 KiB records, 2 partitions", "restore", 20_000, 1024, 2),
    Scenario(
        "compaction and prune of an S3 archive of 500-record blobs, 1 KiB records, 2 partitions",
        "compaction",
        20_000,
        1024,
        2,
        blob_offsets=500,
    ),
    Scenario(
        "schema IDs rewritten, 1 KiB records, 2 partitions",
        "schemas",
        20_000,
        1024,
        2,
        ("kafka-renumber", "filesystem"),
    ),
    estate(4, 1000, rate=500, warmup=2.0, seconds=5.0),
    Scenario(
        "two clusters, one blackholed then killed",
        "outage",
        value_size=1024,
        partitions=2,
        rate=100,
        seconds=8,
        warmup=3,
    ),
)

# `python -m bench KIND`: the one row of that kind run alone (its fields changed with --set).
ALONE = {"estate-steady": estate(16, 1000), "outage": OUTAGE}


def with_settings(s: Scenario, settings: Mapping[str, Any]) -> Scenario:
    """`s` with some of its fields changed (`python -m bench --set KEY=VALUE`; `max-time-ms` spells `max_time_ms`),
    renamed so that the report does not show it under the name of the row it was."""
    if not settings:
        return s
    known = {f.name for f in fields(Scenario)} - {"name", "kind"}
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ValueError(f"--set {key}: a scenario has no such field (it has {', '.join(sorted(known))})")
        changes[name] = tuple(value) if isinstance(value, list) else value
    if unknown := set(changes.get("paths", ())) - set(PATHS):
        raise ValueError(f"--set paths: unknown {sorted(unknown)} (paths are {', '.join(PATHS)})")
    changed = replace(s, **changes)
    if s.kind == "estate-steady":
        return replace(changed, name=estate_name(changed))
    return replace(changed, name=f"{s.name} ({', '.join(f'{k}={v}' for k, v in settings.items())})")
