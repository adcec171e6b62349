"""`python -m bench.profile_reads`: where a Spark range read spends its time, in-process.

Starts a broker (or uses --bootstrap/--topic), produces a backlog, then times, with the same building blocks the
mirror uses (workers.spark_session.get_spark, workers.range_reader.read_range / spark_options,
sinks.records.encode_parquet):

- Spark session start-up and the first (cold) read;
- the fixed cost of one Spark job (a 1-record read);
- one read of the whole range as the mirror does it (`toArrow`), against `count()` (Kafka fetch + job, no
  transfer to Python) and `select("offset").toArrow()` (fetch + job, almost nothing transferred);
- how a read scales with minPartitions (config `spark.offsets-per-task`) and with the range size
  (config `spark.max-offsets-per-read`), and with Kafka consumer fetch sizes;
- Parquet encoding per codec.

Each number is the median of --repeat runs. A development aid: it prints, it writes no document.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from bench import jfr
from bench.data import KEY_BYTES, produce_backlog
from bench.machine import load_average
from config.model import SparkConfig
from sinks.records import conform, encode_parquet
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic
from workers.range_reader import RangeRequest, read_range, spark_options
from workers.spark_session import get_spark, stop_spark

TOPIC = "bench"


@dataclass(frozen=True)
class Timing:
    label: str
    records: int
    seconds: float
    note: str = ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_reads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="backlog size (default 200000)")
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown (default 3)")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed reads of --read-size after the cold one (JIT; default 3)"
    )
    parser.add_argument("--read-size", type=int, default=100_000, help="range of the per-read experiments (100000)")
    parser.add_argument(
        "--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting (repeatable)"
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        choices=["overhead", "modes", "tasks", "sizes", "fetch", "batch", "parquet"],
        help="run only these experiments (repeatable; default all)",
    )
    parser.add_argument("--log-level", default="ERROR", choices=["ERROR", "WARN", "INFO", "DEBUG"], help="Spark's")
    parser.add_argument("--bootstrap", help="use this broker instead of starting one (with --topic, already filled)")
    parser.add_argument("--topic", default=TOPIC)
    parser.add_argument(
        "--jfr", type=Path, metavar="FILE", help="record the Spark JVM with Java Flight Recorder and summarise it"
    )
    args = parser.parse_args(argv)
    conf = dict(entry.split("=", 1) for entry in args.spark_conf)
    if args.jfr is not None:
        conf["spark.driver.extraJavaOptions"] = jfr.jvm_options(args.jfr.resolve())
    spark_config = SparkConfig(conf=conf, log_level=args.log_level)
    experiments = set(args.only) or {"overhead", "modes", "tasks", "sizes", "fetch", "batch", "parquet"}
    say(f"load average {' / '.join(f'{x:.2f}' for x in load_average())}")

    with tempfile.TemporaryDirectory(prefix="mirror-v3-profile-") as scratch:
        if args.bootstrap:
            profile(args, args.bootstrap, args.topic, spark_config, experiments)
        else:
            with KafkaBroker(Path(scratch) / "broker") as broker:
                create_topic(broker.bootstrap, args.topic)
                produced = produce_backlog(broker.bootstrap, args.topic, 1, args.records, args.value_size)
                say(f"produced {args.records:,} records in {produced.seconds:.2f} s")
                profile(args, broker.bootstrap, args.topic, spark_config, experiments)
    say(f"load average {' / '.join(f'{x:.2f}' for x in load_average())}")
    if args.jfr is not None:
        jfr.print_summary(jfr.summarise(args.jfr))
    return 0


def profile(
    args: argparse.Namespace, bootstrap: str, topic: str, spark_config: SparkConfig, experiments: set[str]
) -> None:
    record_bytes = KEY_BYTES + args.value_size
    total, read_size, repeat = args.records, min(args.read_size, args.records), args.repeat
    base = RangeRequest(
        bootstrap_servers=bootstrap,
        topic=topic,
        partition=0,
        start=0,
        end=read_size,
        isolation_level="read_committed",
        group_id="mirror-v3.profile",
        min_partitions=-(-read_size // spark_config.offsets_per_task),
        job_group="profile",
    )
    timings: list[Timing] = []

    def show(timing: Timing) -> None:
        timings.append(timing)
        print(format_timing(timing, record_bytes), flush=True)

    began = time.monotonic()
    spark = get_spark(spark_config)
    show(Timing("Spark session start (JVM launch, in-process)", 0, time.monotonic() - began))
    try:
        began = time.monotonic()
        read_range(spark, replace(base, end=1000))
        show(Timing("first read, 1000 records (cold: classes, JIT, Kafka clients)", 1000, time.monotonic() - began))
        if args.warmup > 0:
            warm = median(f"warm-up: read_range {read_size:,}", read_size, args.warmup, lambda: read_range(spark, base))
            show(replace(warm, label=f"warm-up: read_range {read_size:,} x {args.warmup} (JIT; median)"))

        if "overhead" in experiments:
            show(
                median(
                    "one Spark job: read_range of 1 record", 1, repeat, lambda: read_range(spark, replace(base, end=1))
                )
            )

        if "modes" in experiments:
            request = base
            show(
                median(
                    f"read_range {read_size:,} (toArrow + conform + checks)",
                    read_size,
                    repeat,
                    lambda: read_range(spark, request),
                )
            )
            show(median("  load().toArrow() only", read_size, repeat, lambda: load(spark, request).toArrow()))
            show(
                median(
                    "  load().count(): Kafka fetch + job, no transfer",
                    read_size,
                    repeat,
                    lambda: load(spark, request).count(),
                )
            )
            show(
                median(
                    '  load().select("offset").toArrow(): fetch + job, ~no transfer',
                    read_size,
                    repeat,
                    lambda: load(spark, request).select("offset").toArrow(),
                )
            )
            table = load(spark, request).toArrow()
            show(median("  conform() of the Arrow table (Python)", read_size, repeat, lambda: conform(table)))

        if "tasks" in experiments:
            for per_task in sorted({read_size // 8, read_size // 4, read_size // 2, read_size, 250_000, 1_000_000}):
                if per_task < 1:
                    continue
                tasks = -(-read_size // per_task)
                request = replace(base, min_partitions=tasks)
                show(
                    median(
                        f"read_range {read_size:,}, offsets-per-task {per_task:,} ({tasks} tasks)",
                        read_size,
                        repeat,
                        partial(read_range, spark, request),
                    )
                )

        if "sizes" in experiments:
            for size in sorted({10_000, 50_000, 100_000, 200_000, 500_000, total} - {0}):
                if size > total:
                    continue
                tasks = -(-size // spark_config.offsets_per_task)
                request = replace(base, end=size, min_partitions=tasks)
                show(
                    median(
                        f"read_range {size:,} (offsets-per-task {spark_config.offsets_per_task:,}, {tasks} tasks)",
                        size,
                        repeat,
                        partial(read_range, spark, request),
                    )
                )

        if "fetch" in experiments:
            for options in (
                {"kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024)},
                {"kafka.max.partition.fetch.bytes": str(32 * 1024 * 1024), "kafka.fetch.max.bytes": str(64 << 20)},
                {"kafka.receive.buffer.bytes": str(4 * 1024 * 1024), "kafka.max.partition.fetch.bytes": str(8 << 20)},
                {"kafka.max.poll.records": "10000", "kafka.max.partition.fetch.bytes": str(8 << 20)},
            ):
                # Spark pools consumers per (group id, partition) and refuses other Kafka parameters for a pooled
                # key: each variant needs its own group id.
                request = replace(base, kafka_options=options, group_id=f"{base.group_id}.{len(timings)}")
                label = ", ".join(f"{k.removeprefix('kafka.')}={v}" for k, v in options.items())
                show(
                    median(
                        f"read_range {read_size:,} with {label}",
                        read_size,
                        repeat,
                        partial(read_range, spark, request),
                    )
                )

        if "batch" in experiments:
            key = "spark.sql.execution.arrow.maxRecordsPerBatch"
            default = spark.conf.get(key) or "10000"
            try:
                for batch in (10_000, 25_000, 100_000, 1_000_000):
                    spark.conf.set(key, str(batch))
                    show(
                        median(
                            f"read_range {read_size:,} with arrow.maxRecordsPerBatch {batch:,}",
                            read_size,
                            repeat,
                            lambda: read_range(spark, base),
                        )
                    )
            finally:
                spark.conf.set(key, default)

        if "parquet" in experiments:
            table = read_range(spark, base)
            for codec, level in (("zstd", None), ("zstd", 1), ("snappy", None), ("lz4", None), ("none", None)):
                note = f"{len(encode_parquet(table, codec, level)) / 1e6:,.1f} MB"
                timing = median(
                    f"encode_parquet {codec}{'' if level is None else f' level {level}'}",
                    read_size,
                    repeat,
                    partial(encode_parquet, table, codec, level),
                )
                show(replace(timing, note=note))
    finally:
        stop_spark()


def load(spark: Any, request: RangeRequest) -> Any:
    reader = spark.read.format("kafka")
    for key, value in spark_options(request).items():
        reader = reader.option(key, value)
    return reader.load()


def median(label: str, records: int, repeat: int, action: Callable[[], object]) -> Timing:
    samples = []
    for _ in range(max(1, repeat)):
        with stopwatch() as elapsed:
            action()
        samples.append(elapsed())
    note = f"runs {', '.join(f'{s:.2f}' for s in samples)} s" if len(samples) > 1 else ""
    return Timing(label, records, statistics.median(samples), note)


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    began = time.monotonic()
    ended: list[float] = []
    try:
        yield lambda: (ended[0] if ended else time.monotonic()) - began
    finally:
        ended.append(time.monotonic())


def format_timing(timing: Timing, record_bytes: int) -> str:
    rate = ""
    if timing.records > 1 and timing.seconds > 0:
        per_second = timing.records / timing.seconds
        rate = f"{per_second:>11,.0f} rec/s {per_second * record_bytes / 1e6:>8,.1f} MB/s"
    return f"{timing.label:<78} {timing.seconds:>7.3f} s {rate:<35} {timing.note}"


def say(message: str) -> None:
    print(f"profile: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
