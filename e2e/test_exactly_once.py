"""Kafka -> filesystem and S3, through the real CLI against a real broker: round trip, SIGTERM, kill -9."""

from __future__ import annotations

import random
import re
import urllib.request
from pathlib import Path

import pytest

from e2e.destinations import DestinationUnderTest, FilesystemDestinationUnderTest, chain, next_offset
from e2e.harness import (
    MirrorProcess,
    assert_same_records,
    cli_env,
    read_archive,
    run_cli,
    source_records,
    wait_until,
    write_config,
)
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce, watermarks
from testkit.ports import free_port


def test_three_partitions_round_trip(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name, partitions=3)
    per_partition = [66_667, 66_667, 66_666]  # 200 000 records in all
    for partition, count in enumerate(per_partition):
        produce(kafka.bootstrap, topic_name, partition, generate_records(count, seed=partition))
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": p} for p in range(3)],
        flush={"max-time-ms": 5000, "max-offsets": 25_000},
        spark={"max-offsets-per-read": 20_000, "offsets-per-task": 10_000},
    )
    port = free_port()
    mirror = MirrorProcess(config, tmp_path / "run.log", env=cli_env(MIRROR_V3_METRICS_PORT=str(port)))
    try:
        for partition, count in enumerate(per_partition):
            wait_until(
                lambda p=partition, c=count: next_offset(destination, topic_name, p) == c,
                180,
                f"partition {partition} not mirrored",
            )
        # The verified-offset gauge reports the next offset once the flush is durable.
        scrape = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        for partition, count in enumerate(per_partition):
            pattern = (
                rf'mirror_v3_destination_offset_verified{{partition="{partition}",topic="{re.escape(topic_name)}"}} '
                rf"{count}\.0"
            )
            assert re.search(pattern, scrape), f"verified offset of partition {partition} not {count}"
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()

    spark_rows = _read_with_spark(destination, topic_name, tmp_path)
    for partition in range(3):
        assert len(chain(destination, topic_name, partition)) >= 3  # max-offsets forced several blobs
        archive = read_archive(destination, topic_name, partition)
        expected = source_records(kafka.bootstrap, topic_name, partition)
        assert len(expected) == per_partition[partition]
        assert_same_records(archive, expected)
        assert sorted(r for r in spark_rows if r[0] == partition) == sorted(
            (partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms) for r in expected
        )
    assert "trigger=max-offsets" in mirror.log_text()


def _read_with_spark(destination: DestinationUnderTest, topic: str, tmp_path: Path) -> list[tuple[object, ...]]:
    """Read the archive back with spark.read.parquet, as a user would (S3 objects are downloaded
    first: the pyspark wheel has no S3 filesystem)."""
    if isinstance(destination, FilesystemDestinationUnderTest):
        directory = destination.root / topic
    else:
        directory = tmp_path / "downloaded" / topic
        for partition in range(3):
            target = directory / str(partition)
            target.mkdir(parents=True)
            for blob in chain(destination, topic, partition):
                (target / blob.name).write_bytes(destination.read(topic, partition, blob.name))
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        frame = spark.read.parquet(*[str(p) for p in directory.glob("*/*.parquet")])
        assert set(frame.columns) >= {
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestampType",
            "headers",
        }
        table = frame.selectExpr(
            "partition", "offset", "key", "value", "headers", "CAST(unix_micros(timestamp) / 1000 AS BIGINT) AS ms"
        ).toArrow()
        return [
            (p, o, k, v, tuple((h["key"], h["value"]) for h in (hs or [])), ms)
            for p, o, k, v, hs, ms in zip(*(table.column(i).to_pylist() for i in range(6)), strict=True)
        ]
    finally:
        spark.stop()


def test_sigterm_mid_stream_then_restart(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(150_000, seed=7))
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
        flush={"max-time-ms": 60_000, "max-offsets": 60_000},
        spark={"max-offsets-per-read": 5_000},
    )
    # DEBUG heartbeats show what is buffered, so the signal lands while records sit in memory.
    env = cli_env(LOG_LEVEL="DEBUG", MIRROR_V3_HEARTBEAT_SECS="0.2")
    mirror = MirrorProcess(config, tmp_path / "run1.log", env=env)
    try:
        mirror.wait_for_log(r"msg=flushed", timeout=180)
        mirror.wait_for_log(r"msg=flushed[\s\S]*msg=heartbeat .*buffered_offsets=[1-9]", timeout=60)
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    stopped = re.search(r'msg="mirror stopped" mirror=\S+ next_offset=(\d+)', mirror.log_text())
    assert stopped, mirror.tail()
    # Everything read before the signal was flushed: the chain ends where the mirror says it stopped.
    assert next_offset(destination, topic_name, 0) == int(stopped.group(1))
    assert 0 < int(stopped.group(1)) < 150_000, "SIGTERM was meant to land mid-stream"
    assert "trigger=shutdown" in mirror.log_text()

    mirror = MirrorProcess(config, tmp_path / "run2.log")
    try:
        start = mirror.wait_for_log(r'msg="mirror starting" .*start_offset=(\d+)', timeout=180)
        assert int(start.group(1)) == int(stopped.group(1))
        wait_until(lambda: next_offset(destination, topic_name, 0) == 150_000, 180, "restart did not finish")
        mirror.terminate()
        assert mirror.wait(60) == 0
    finally:
        mirror.stop()
    assert_same_records(read_archive(destination, topic_name, 0), source_records(kafka.bootstrap, topic_name, 0))


def test_kill_9_at_random_moments(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    total = 500_000
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(total, seed=11))
    assert watermarks(kafka.bootstrap, topic_name, 0) == (0, total)
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
        flush={"max-time-ms": 500, "max-offsets": 10_000},
        spark={"max-offsets-per-read": 10_000},
    )
    rng = random.Random(20261121)
    kills = 0
    for attempt in range(6):
        mirror = MirrorProcess(config, tmp_path / f"run{attempt}.log")
        try:
            mirror.wait_for_log(r'msg="mirror starting"', timeout=180)
            if attempt < 5:
                # Land somewhere in the middle of reading, encoding or renaming.
                mirror.wait_for_log(r"msg=flushed", timeout=120)
                import time

                time.sleep(rng.uniform(0.0, 2.5))
                mirror.kill9()
                mirror.wait(30)
                kills += 1
                assert next_offset(destination, topic_name, 0) is not None
                continue
            wait_until(lambda: next_offset(destination, topic_name, 0) == total, 300, "final run did not catch up")
            mirror.terminate()
            assert mirror.wait(60) == 0
        finally:
            mirror.stop()
    assert kills == 5
    assert_same_records(read_archive(destination, topic_name, 0), source_records(kafka.bootstrap, topic_name, 0))


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_status_after_mirroring(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path, fmt: str
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(1_000, seed=3))
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
    )
    before = run_cli("status", "--config", str(config), "--format", fmt)
    assert before.returncode == 0, before.stderr
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        wait_until(lambda: next_offset(destination, topic_name, 0) == 1_000, 180, "not mirrored")
        mirror.terminate()
        assert mirror.wait(60) == 0
    finally:
        mirror.stop()
    after = run_cli("status", "--config", str(config), "--format", fmt)
    assert after.returncode == 0, after.stderr
    if fmt == "json":
        import json

        row = json.loads(after.stdout)["mirrors"][0]
        assert (row["source-end"], row["destination-next"], row["lag"]) == (1_000, 1_000, 0)
    else:
        assert re.search(rf"{re.escape(topic_name)}\s+0\s+0\s+1000\s+1000\s+0\s", after.stdout), after.stdout
