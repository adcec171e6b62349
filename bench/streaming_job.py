"""The benchmark's reference: what a Spark user writes to archive a Kafka topic instead of running mirror-v3.

Spark Structured Streaming with Spark's own Kafka source (`format("kafka")`, every partition of one topic from the
earliest offset), the Parquet file sink, `trigger(processingTime=...)` and `local[*]`, every other setting Spark's
default. Run by bench.streaming as its own process with the virtualenv's pyspark:

    python -m bench.streaming_job --bootstrap H:P --topic T --output DIR --checkpoint DIR --trigger-ms 1000 \
        --jars a.jar,b.jar

It prints `query started` once the query runs and then runs until SIGTERM or SIGINT, which stops the query and the
session. Output rows are the source's columns as Spark reads them (key, value, topic, partition, offset, timestamp,
timestampType); a file is committed when its batch's entry is written to `<output>/_spark_metadata`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.streaming_job", description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--output", required=True, help="the Parquet sink's directory")
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--trigger-ms", type=int, required=True, help="processingTime trigger (the mirror's max-time)")
    p.add_argument("--jars", required=True, help="comma-separated: Spark's Kafka source and what pyspark lacks")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    stop = threading.Event()

    def stopping(_signal: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, stopping)
    signal.signal(signal.SIGINT, stopping)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("bench-structured-streaming")
        .config("spark.jars", args.jars)
        # The two departures from Spark's defaults, both as the mirror's own session has them: no web UI (nothing
        # here reads it, and its listeners cost CPU per batch), and loopback only (the bench talks to nothing else).
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        source.writeStream.format("parquet")
        .option("path", args.output)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.trigger_ms} milliseconds")
        .start()
    )
    print("query started", flush=True)
    while not stop.wait(0.5):
        if not query.isActive:  # failed: its exception says why
            print(f"query ended: {query.exception()}", file=sys.stderr, flush=True)
            return 1
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
