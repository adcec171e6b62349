"""Kafka -> filesystem through the real CLI: a round trip read back by Spark, with status, metrics and probes
watched while it runs; SIGTERM mid-stream; kill -9 at random moments (and, behind `-m soak`, a hundred of them).

The blob chain's store-level rules are proven once for every store in tests/test_blob_store_contract.py; what these
tests add is the whole process: Spark reads, the actor's buffering and flushes, signals, restarts.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from commands.status_view import STANDARD_WIDTH, TABLE_COLUMNS, TOPIC_WIDTH, WIDE_COLUMNS
from e2e.harness import (
    assert_exactly_once,
    backlog,
    mirror_config,
    one_mirror,
    partitions_of,
    refused_beside,
    run_until,
    sigterm_while_records_wait,
    standby_takes_over_a_killed_writer,
    start,
    status_json,
    status_rows,
)
from sinks.blob.chain import blob_name, is_temp_name, temp_name
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import Record, committed_offset, create_topic, generate_records, produce, watermarks
from testkit.mirror_run import MirrorRun, run_cli
from testkit.ports import free_port
from testkit.targets import FilesystemTarget, chain
from testkit.tools import promtool


def probe(port: int, path: str) -> int | None:
    """HTTP status of a probe, None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_round_trip_with_status_metrics_and_probes(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    counts = [10_000, 10_000, 10_000]
    backlog(kafka.bootstrap, topic_name, counts)
    config = mirror_config(
        tmp_path / "mirror.yaml",
        kafka.bootstrap,
        fs,
        partitions_of(topic_name, 3, source={"commit-source-offsets": True, "group-id": f"{topic_name}.mirror"}),
        flush={"max-time-ms": 2000, "max-offsets": 3_000},
        spark={"max-offsets-per-job": 2_000, "offsets-per-task": 1_000},
    )
    code, before = status_json(config)
    assert code == 0 and before["ok"], before
    assert [(r["destination-next"], r["lag"]) for r in before["mirrors"]] == [(None, 10_000)] * 3

    port = free_port()
    with MirrorRun(config, tmp_path / "run.log", metrics_port=port, env={"MIRROR_V3_READINESS_LAG": "0"}) as run:
        # Start-up: alive at once, not ready before every mirror has started and caught up.
        run.wait_until(lambda: probe(port, "/healthz") == 200, 60, "/healthz to answer")
        seen_not_ready = probe(port, "/readyz") == 503
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), dict(enumerate(counts)))
        for partition, count in enumerate(counts):
            run.wait_for_metric("mirror_v3_destination_offset_verified", count, partition=partition, topic=topic_name)
        run.wait_until(lambda: probe(port, "/readyz") == 200, 30, "/readyz to become ready")

        # Status of running mirrors: caught up, a recent flush, the same in the table.
        assert status_rows(config) == [(10_000, 10_000, 0, None)] * 3
        for row in status_json(config)[1]["mirrors"]:
            flushed = time.mktime(time.strptime(row["last-flush"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
            assert abs(time.time() - flushed) < 600, row["last-flush"]
        table = run_cli("status", "--config", str(config), "--process", f"http://127.0.0.1:{port}")
        assert table.returncode == 0, table.stderr
        summary, header, *rows, spark = table.stdout.splitlines()
        assert spark.startswith("spark (last "), spark
        assert summary.startswith("3 mirrors: 0 lagging, 0 failed; lag 0 records, oldest pending "), summary
        assert tuple(header.split()) == TABLE_COLUMNS and max(len(line) for line in rows) <= STANDARD_WIDTH
        shown = topic_name if len(topic_name) <= TOPIC_WIDTH else topic_name[: TOPIC_WIDTH - 1] + "…"
        for partition, line in enumerate(rows):
            assert re.match(rf"{re.escape(shown)}\s+{partition}\s+running\s+0\s+0\.0s\s+[\d.]+s ago$", line), line
        wide = run_cli("status", "--config", str(config), "--wide", "--topic", f"{re.escape(topic_name)}", "--lagging")
        assert wide.returncode == 0 and wide.stdout.splitlines()[0].startswith("0 mirrors"), wide.stdout
        _, header, *rows = run_cli("status", "--config", str(config), "--wide").stdout.splitlines()
        assert tuple(header.split()) == WIDE_COLUMNS
        for partition, line in enumerate(rows):
            assert re.match(rf"\S+\s+{re.escape(topic_name)}\s+{partition}\s+0\s+10000\s+10000\s+-\s+0\s", line), line

        # The real scrape passes Prometheus' own linter; time-based series are there and plausible.
        scrape = run.scrape()
        lint = subprocess.run([promtool(), "check", "metrics"], input=scrape, capture_output=True, text=True)
        assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
        assert "_created" not in scrape and "mirror_v3_build_info{" in scrape
        latency = run.metric("mirror_v3_replication_latency_seconds_count", topic=topic_name)
        assert latency == sum(counts), scrape  # every record, once
        for partition in range(3):
            assert run.metric("mirror_v3_oldest_pending_age_seconds", topic=topic_name, partition=partition) == 0
        # Per topic: nothing staged or being read once everything is durable.
        assert run.metric("mirror_v3_staged_records", topic=topic_name) == 0
        assert run.metric("mirror_v3_read_inflight_offsets", topic=topic_name) == 0

        # New records: mirrored while running, and ready again once they are durable.
        produce(kafka.bootstrap, topic_name, 0, generate_records(500, seed=99))
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 10_500})
        run.wait_until(lambda: probe(port, "/readyz") == 200, 30, "/readyz to recover")

        # commit-source-offsets: lag tools reading the source group see each mirror's durable position.
        ends = {0: 10_500, 1: 10_000, 2: 10_000}

        def group_positions() -> dict[int, int | None]:
            return {p: committed_offset(kafka.bootstrap, f"{topic_name}.mirror", topic_name, p) for p in ends}

        run.wait_until(lambda: group_positions() == ends, 30, f"the source group to reach {ends}", interval=1)

        # Shutdown: no longer ready (or no longer listening), then gone.
        run.terminate()
        assert probe(port, "/readyz") in (503, None)
        assert run.wait(60) == 0, run.tail()
        assert probe(port, "/healthz") is None
    # Spark needs seconds to start, so right after the endpoint came up the backlog was not durable.
    assert seen_not_ready
    assert "trigger=max-offsets" in run.log_text()
    assert_exactly_once(kafka.bootstrap, fs, topic_name, partitions=3)
    for partition in range(3):
        assert len(chain(fs, topic_name, partition)) >= 3  # max-offsets forced several blobs
    assert_spark_reads_it_back(kafka, fs, topic_name, 3)


def assert_spark_reads_it_back(kafka: KafkaBroker, fs: FilesystemTarget, topic: str, partitions: int) -> None:
    """`spark.read.parquet` over the archive gives the source's records, with Spark's Kafka column names."""
    from pyspark.sql import SparkSession

    from testkit.targets import source_records

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
        frame = spark.read.parquet(*[str(p) for p in (fs.root / topic).glob("*/*.parquet")])
        expected_columns = {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"}
        assert set(frame.columns) >= expected_columns
        table = frame.selectExpr(
            "partition", "offset", "key", "value", "headers", "CAST(unix_micros(timestamp) / 1000 AS BIGINT) AS ms"
        ).toArrow()
    finally:
        spark.stop()
    rows = [
        (p, o, k, v, tuple((h["key"], h["value"]) for h in (hs or [])), ms)
        for p, o, k, v, hs, ms in zip(*(table.column(i).to_pylist() for i in range(6)), strict=True)
    ]
    for partition in range(partitions):
        expected = [
            (partition, r.offset, r.key, r.value, tuple(r.headers), r.timestamp_ms)
            for r in source_records(kafka.bootstrap, topic, partition)
        ]
        assert sorted(r for r in rows if r[0] == partition) == sorted(expected)


def test_max_bytes_bounds_every_blob_and_a_larger_record_is_a_blob_of_its_own(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    max_bytes = 256 * 1024
    # Random (incompressible) values, ~270 B on average: about 25 blobs' worth, so that the few blobs cut short by
    # design (the 100-offset probe of the first flush, the blob before the big record, the last of each task) are
    # the exception.
    records = generate_records(6_000, seed=5)
    records.insert(700, Record(key=b"big", value=os.urandom(900_000)))  # under the broker's 1 MB message limit
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, records)
    flush = {"max-time-ms": 1_000, "max-bytes": max_bytes}
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, flush=flush)
    run_until(config, tmp_path / "run.log", fs, topic_name, {0: len(records)})
    assert_exactly_once(kafka.bootstrap, fs, topic_name)

    sizes = []
    for name in fs.names(topic_name, 0):
        path = fs.directory(topic_name, 0) / name
        table = pq.read_table(path)
        payload = sum(
            len(row["key"] or b"")
            + len(row["value"] or b"")
            + sum(len(h["key"].encode()) + len(h["value"] or b"") for h in row["headers"] or [])
            for row in table.to_pylist()
        )
        sizes.append((table.num_rows, payload, path.stat().st_size))
    alone = [size for size in sizes if size[1] > max_bytes]
    assert [rows for rows, _, _ in alone] == [1], sizes  # the 900 KB record, by itself
    assert all(file <= max_bytes * 9 // 8 for rows, _, file in sizes if rows > 1), sizes
    # Blobs are cut by size, not left small: most are within 1/8 of max-bytes.
    full = [payload for rows, payload, _ in sizes if rows > 1 and payload >= max_bytes * 7 // 8]
    assert len(full) >= len(sizes) // 2, sizes


def test_sigterm_mid_stream_then_restart(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [20_000], seed=7)
    flush, spark = {"max-time-ms": 60_000, "max-offsets": 10_000}, {"max-offsets-per-job": 2_000}
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, flush=flush, spark=spark)
    stopped_at = sigterm_while_records_wait(config, tmp_path / "run1.log", fs, kafka.bootstrap, topic_name, 3_000)
    produce(kafka.bootstrap, topic_name, 0, generate_records(7_000, seed=8))  # work for the restart

    # What a write interrupted by a crash leaves behind is removed on the next start.
    leftover = temp_name(blob_name(stopped_at, stopped_at + 99), "deadbeef")
    fs.write_raw(topic_name, 0, leftover, b"half a file")
    # The same mirror, with time-based flushes that do not keep the test waiting for the backlog's last records.
    restart = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, spark=spark, name="restart.yaml")
    second = run_until(restart, tmp_path / "run2.log", fs, topic_name, {0: stopped_at + 7_000})
    (starting,) = second.events("mirror starting")
    assert int(starting["start_offset"]) == stopped_at
    assert not any(is_temp_name(name) for name in fs.names(topic_name, 0))
    assert_exactly_once(kafka.bootstrap, fs, topic_name)


def kill_9_cycles(
    kafka: KafkaBroker, fs: FilesystemTarget, topic: str, tmp_path: Path, *, kills: int, seed: int
) -> None:
    """`kills` times: start the mirror, let it write, kill -9 it somewhere in a read, an encode or a rename. The
    source is topped up whenever the mirror nears its end, so every cycle has work to be killed in. Then one run
    catches up, and the chain must hold every record exactly once."""
    rng = random.Random(seed)
    flush, spark = {"max-time-ms": 500, "max-offsets": 5_000}, {"max-offsets-per-job": 5_000}
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic, flush=flush, spark=spark)
    for cycle in range(kills):
        end = watermarks(kafka.bootstrap, topic, 0)[1]
        if end - (fs.next_offset(topic, 0) or 0) < 20_000:
            produce(kafka.bootstrap, topic, 0, generate_records(30_000, seed=seed + cycle))
        log = tmp_path / f"run{cycle % 2}.log"  # two logs alternate: the soak's hundreds would fill the disk
        log.unlink(missing_ok=True)
        with start(config, log, fs) as run:
            run.wait_for_log(r"msg=flushed")
            time.sleep(rng.uniform(0.0, 2.5))
            run.kill9()
        assert fs.next_offset(topic, 0) is not None
    end = watermarks(kafka.bootstrap, topic, 0)[1]
    run_until(
        config,
        tmp_path / "final.log",
        fs,
        topic,
        {0: end},
    )
    assert_exactly_once(kafka.bootstrap, fs, topic)


# In the soak run (with test_soak_kill_9_cycles' hundred): the lease test kills a writer mid-flush, continues from
# the chain and compares record by record, the same property with one kill instead of four.
@pytest.mark.soak
def test_kill_9_at_random_moments(kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path) -> None:
    backlog(kafka.bootstrap, topic_name, [0])
    kill_9_cycles(kafka, fs, topic_name, tmp_path, kills=4, seed=20261121)


@pytest.mark.soak
@pytest.mark.timeout(7200)  # a hundred cycles of ~12 s each, beyond the suite's 900 s per test
def test_soak_kill_9_cycles(kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path) -> None:
    """MIRROR_V3_SOAK_KILLS (default 100) kill -9 cycles on one chain."""
    backlog(kafka.bootstrap, topic_name, [0])
    kills = int(os.environ.get("MIRROR_V3_SOAK_KILLS", "100"))
    kill_9_cycles(kafka, fs, topic_name, tmp_path, kills=kills, seed=20261123)


def test_a_second_process_is_refused_by_the_lease_and_a_standby_takes_over_a_killed_one(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """A newcomer on a live writer's chain touches nothing (its staged files included) and exits 1 quickly, naming
    the holder; a standby waits, and once the writer is killed mid-flush it takes over within the lease timeout and
    the chain ends up holding every record exactly once."""
    backlog(kafka.bootstrap, topic_name, [20_000], seed=70)
    flush, spark = {"max-time-ms": 300, "max-offsets": 1_000}, {"max-offsets-per-job": 1_000}
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, flush=flush, spark=spark)
    chain_dir = fs.root / topic_name / "0"
    with start(config, tmp_path / "active.log", fs) as active:
        active.wait_for_log(r"msg=flushed")
        line = refused_beside(active, config, tmp_path / "second.log", fs)
        assert f'msg="another writer holds the destination" error="{chain_dir}/.chain.lease: ' in line, line
        standby_takes_over_a_killed_writer(
            active, config, tmp_path / "standby.log", fs, kafka.bootstrap, topic_name, 71
        )
    assert_exactly_once(kafka.bootstrap, fs, topic_name)


def test_a_destination_that_refuses_writes_is_one_error_line(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """The chain's directory made immutable mid-run (root ignores permissions, not `chattr +i`): the Spark task's
    failure and the job's abort are the JVM's WARN lines; the one ERROR line is the mirror's, naming the cause."""
    backlog(kafka.bootstrap, topic_name, [2_000], seed=80)
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, flush={"max-time-ms": 300})
    chain_dir = fs.root / topic_name / "0"
    with start(config, tmp_path / "run.log", fs) as run:
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 2_000})
        subprocess.run(["chattr", "+i", str(chain_dir)], check=True)
        try:
            produce(kafka.bootstrap, topic_name, 0, generate_records(100, seed=81))
            line = run.expect_failure(1, timeout=120)
        finally:
            subprocess.run(["chattr", "-i", str(chain_dir)], check=True)
    assert "mirror failed" in line and "Operation not permitted" in line and str(chain_dir) in line, line
    assert fs.next_offset(topic_name, 0) == 2_000
