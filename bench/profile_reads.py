"""`python -m bench.profile_reads`: where a Spark range read spends its time, timed in this process.

Starts a broker (or uses --bootstrap/--topic), produces a backlog, then times with the mirror's own building blocks
(get_spark, read_range, encode_parquet): the session start and a cold read; one job's fixed cost; a read as the mirror
does it against count() and an offset-only read; reads by task count, by range size, with other Kafka fetch sizes and
Arrow batch sizes; Parquet encoding per codec. Each number is the median of --repeat runs. A development aid: it
prints, it writes no document. `--jfr FILE` records Spark's JVM with Java Flight Recorder and prints its busiest frames.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from bench.profilers import jfr_options, jfr_summary
from bench.raw import KEY_BYTES, produce_backlog
from config.model import SparkConfig
from sinks.records import conform, encode_parquet
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic
from workers.range_reader import RangeRequest, read_range, spark_options
from workers.spark_session import get_spark, stop_spark

EXPERIMENTS = ("overhead", "modes", "tasks", "sizes", "fetch", "batch", "parquet")
Experiment = tuple[str, int, Callable[[], object]]  # label, records, what to time
MIB = 1024 * 1024
FETCHES = (  # Kafka consumer options of the `fetch` experiment
    {"max.partition.fetch.bytes": 8 * MIB},
    {"max.partition.fetch.bytes": 32 * MIB, "fetch.max.bytes": 64 * MIB},
    {"receive.buffer.bytes": 4 * MIB, "max.partition.fetch.bytes": 8 * MIB},
    {"max.poll.records": 10_000, "max.partition.fetch.bytes": 8 * MIB},
)


def load(spark: Any, request: RangeRequest) -> Any:
    """The DataFrame read_range collects, to time parts of it."""
    reader = spark.read.format("kafka")
    for key, value in spark_options(request).items():
        reader = reader.option(key, value)
    return reader.load()


def experiments(spark: Any, base: RangeRequest, total: int, per_task: int, only: set[str]) -> Iterator[Experiment]:
    size = base.end
    if "overhead" in only:
        yield "one Spark job: read_range of 1 record", 1, lambda: read_range(spark, replace(base, end=1))
    if "modes" in only:
        yield f"read_range {size:,} (toArrow + conform + checks)", size, lambda: read_range(spark, base)
        yield "  load().toArrow() only", size, lambda: load(spark, base).toArrow()
        yield "  load().count(): Kafka fetch + job, no transfer", size, lambda: load(spark, base).count()
        yield '  load().select("offset").toArrow()', size, lambda: load(spark, base).select("offset").toArrow()
        table = load(spark, base).toArrow()
        yield "  conform() of the Arrow table (Python)", size, lambda: conform(table)
    for each in sorted({size // 8, size // 4, size // 2, size, 250_000, 1_000_000} - {0}) if "tasks" in only else []:
        request = replace(base, min_partitions=-(-size // each))
        yield f"read_range {size:,}, offsets-per-task {each:,}", size, partial(read_range, spark, request)
    for end in sorted({10_000, 50_000, 100_000, 200_000, 500_000, total}) if "sizes" in only else []:
        request = replace(base, end=end, min_partitions=-(-end // per_task))
        if end <= total:
            yield f"read_range {end:,} (offsets-per-task {per_task:,})", end, partial(read_range, spark, request)
    for n, options in enumerate(FETCHES if "fetch" in only else ()):
        # Spark pools consumers per (group id, partition) and refuses other options for a pooled key.
        kafka = {f"kafka.{key}": str(value) for key, value in options.items()}
        request = replace(base, kafka_options=kafka, group_id=f"{base.group_id}.{n}")
        yield f"read_range {size:,} with {options}", size, partial(read_range, spark, request)
    for batch in (10_000, 100_000, 1_000_000) if "batch" in only else ():
        setting = ("spark.sql.execution.arrow.maxRecordsPerBatch", str(batch))
        yield (
            f"read_range {size:,}, arrow.maxRecordsPerBatch {batch:,}",
            size,
            partial(batched, spark, base, setting),
        )
    table = read_range(spark, base) if "parquet" in only else None
    for codec, level in (("zstd", None), ("zstd", 1), ("snappy", None), ("lz4", None), ("none", None)):
        if table is not None:
            yield (
                f"encode_parquet {codec} level {level or 'default'}",
                size,
                partial(encode_parquet, table, codec, level),
            )


def batched(spark: Any, request: RangeRequest, setting: tuple[str, str]) -> object:
    previous = spark.conf.get(setting[0]) or "10000"
    spark.conf.set(*setting)
    try:
        return read_range(spark, request)
    finally:
        spark.conf.set(setting[0], previous)


def profile(args: argparse.Namespace, bootstrap: str, spark_config: SparkConfig) -> None:
    size = min(args.read_size, args.records)
    per_task = spark_config.offsets_per_task
    base = RangeRequest(
        bootstrap, args.topic, 0, 0, size, "read_committed", "mirror-v3.profile", -(-size // per_task), "p"
    )
    began = time.monotonic()
    spark = get_spark(spark_config)
    show("Spark session start (JVM launch, in-process)", 0, [time.monotonic() - began], args.value_size)
    try:
        show("first read, 1000 records (cold)", 1000, [timed(lambda: read_range(spark, replace(base, end=1000)))], 0)
        for _ in range(args.warmup):
            read_range(spark, base)  # JIT
        for label, records, action in experiments(spark, base, args.records, per_task, set(args.only or EXPERIMENTS)):
            show(label, records, [timed(action) for _ in range(args.repeat)], args.value_size)
    finally:
        stop_spark()
        if args.jfr is not None:
            # The recording is written when the JVM exits, which it does once its stdin (pyspark's pipe) closes.
            from pyspark import SparkContext

            gateway = SparkContext._gateway
            if gateway is not None and gateway.proc is not None:
                gateway.proc.stdin.close()
                gateway.proc.wait(120)


def timed(action: Callable[[], object]) -> float:
    began = time.monotonic()
    action()
    return time.monotonic() - began


def show(label: str, records: int, seconds: list[float], value_size: int) -> None:
    median = statistics.median(seconds)
    rate = f"{records / median:>11,.0f} rec/s {records * (KEY_BYTES + value_size) / median / 1e6:>8,.1f} MB/s"
    runs = ", ".join(f"{s:.2f}" for s in seconds)
    print(f"{label:<70} {median:>7.3f} s {rate if records > 1 else '':<35} runs {runs} s", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_reads", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="backlog size (200000)")
    parser.add_argument("--value-size", type=int, default=1024)
    parser.add_argument("--read-size", type=int, default=100_000, help="range of the per-read experiments (100000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the median is shown (3)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed reads after the cold one (JIT; 3)")
    parser.add_argument("--only", action="append", choices=EXPERIMENTS, help="only these experiments (repeatable)")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    parser.add_argument("--bootstrap", help="a running broker whose --topic is already filled")
    parser.add_argument("--topic", default="bench")
    parser.add_argument("--jfr", type=Path, metavar="FILE", help="record Spark's JVM with Java Flight Recorder")
    args = parser.parse_args(argv)
    conf = dict(entry.split("=", 1) for entry in args.spark_conf)
    if args.jfr is not None:
        conf["spark.driver.extraJavaOptions"] = jfr_options(args.jfr.resolve())
    spark_config = SparkConfig(conf=conf)
    if args.bootstrap:
        profile(args, args.bootstrap, spark_config)
    else:
        with KafkaBroker() as broker:
            create_topic(broker.bootstrap, args.topic)
            seconds = produce_backlog(broker.bootstrap, args.topic, {0: args.records}, args.value_size)
            print(f"produced {args.records:,} records in {seconds:.2f} s", file=sys.stderr)
            profile(args, broker.bootstrap, spark_config)
    if args.jfr is not None:
        summary = jfr_summary(args.jfr)
        for title in ("frames", "methods"):
            print(f"JFR, {summary.get('samples')} samples of Spark's JVM; busiest {title}:")
            for frame, share in summary.get(title, []):
                print(f"  {share:6.1%}  {frame[:150]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
