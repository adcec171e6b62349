"""How `run` starts, fails and stops: corrupt chains, unreachable brokers, missing jars, signals,
and every flush trigger."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from e2e.harness import (
    MirrorProcess,
    assert_same_records,
    cli_env,
    destination_next,
    partition_dir,
    read_archive,
    source_records,
    wait_until,
    write_config,
)
from sinks.blob_chain import blob_name
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import Record, create_topic, generate_records, produce
from testkit.ports import free_port


def _single_error_line(mirror: MirrorProcess) -> str:
    text = mirror.log_text()
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1, text
    return errors[0]


CORRUPTIONS = {
    "overlap": [blob_name(0, 99), blob_name(50, 149)],
    "hole": [blob_name(0, 99), blob_name(150, 199)],
    "foreign-file": [blob_name(0, 99), "notes.txt"],
    "unparseable-name": [blob_name(0, 99), "0-99.parquet"],
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_chain_refuses_to_start(kafka: KafkaBroker, topic_name: str, tmp_path: Path, kind: str) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(300, seed=1))
    root = tmp_path / "archive"
    directory = partition_dir(root, topic_name, 0)
    directory.mkdir(parents=True)
    for name in CORRUPTIONS[kind]:
        (directory / name).write_bytes(b"not really parquet")
    before = sorted(p.name for p in directory.iterdir())
    config = write_config(
        tmp_path / "mirror.yaml", bootstrap=kafka.bootstrap, root=root, mirrors=[{"topic": topic_name, "partition": 0}]
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        assert mirror.wait(120) == 1
    finally:
        mirror.stop()
    line = _single_error_line(mirror)
    assert "corrupt chain" in line
    offending = CORRUPTIONS[kind] if kind in ("overlap", "hole") else CORRUPTIONS[kind][1:]
    for name in offending:
        assert str(directory / name) in line, line
    assert sorted(p.name for p in directory.iterdir()) == before  # nothing touched


def test_leftover_temp_file_is_removed_and_ignored(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(500, seed=2))
    root = tmp_path / "archive"
    directory = partition_dir(root, topic_name, 0)
    directory.mkdir(parents=True)
    leftover = directory / f".{blob_name(0, 499)}.tmp-deadbeef"
    leftover.write_bytes(b"half a file")
    config = write_config(
        tmp_path / "mirror.yaml", bootstrap=kafka.bootstrap, root=root, mirrors=[{"topic": topic_name, "partition": 0}]
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        wait_until(lambda: destination_next(directory) == 500, 180, "not mirrored")
        mirror.terminate()
        assert mirror.wait(60) == 0
    finally:
        mirror.stop()
    assert not leftover.exists()
    assert_same_records(read_archive(directory), source_records(kafka.bootstrap, topic_name, 0))


def test_unreachable_broker_fails_with_one_line(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=dead,
        root=tmp_path / "archive",
        mirrors=[{"topic": "orders", "partition": 0, "source": {"request-timeout-ms": 3000}}],
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        assert mirror.wait(120) == 1
    finally:
        mirror.stop()
    line = _single_error_line(mirror)
    assert dead in line and "unreachable" in line, line


def test_missing_connector_jars_exit_3_with_the_fetch_command(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "mirror.yaml", bootstrap="127.0.0.1:9", root=tmp_path / "a", mirrors=[{"topic": "t", "partition": 0}]
    )
    env = cli_env(MIRROR_V3_SPARK_JARS=str(tmp_path / "no-jars-here"))
    mirror = MirrorProcess(config, tmp_path / "run.log", env=env)
    try:
        assert mirror.wait(60) == 3
    finally:
        mirror.stop()
    line = _single_error_line(mirror)
    assert "bash scripts/fetch-jars.sh" in line and "no-jars-here" in line, line


def test_second_signal_exits_at_once(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafka.bootstrap, topic_name)
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        root=tmp_path / "archive",
        mirrors=[{"topic": topic_name, "partition": 0}],
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        # During Spark's start-up the drain has to wait for it, which leaves time for a second signal.
        mirror.wait_for_log(r'msg="mirror starting"|msg="metrics endpoint', timeout=60)
        mirror.proc.send_signal(signal.SIGTERM)
        mirror.wait_for_log(r"msg=\"draining", timeout=30)
        mirror.proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        code = mirror.wait(30)
    finally:
        mirror.stop()
    if "all mirrors stopped" in mirror.log_text():
        pytest.skip("the drain finished before the second signal arrived")
    assert code == 130, mirror.tail()
    assert time.monotonic() - began < 5
    assert "second signal during drain" in mirror.log_text()


def test_every_flush_trigger_fires(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    """One process, three partitions shaped so that each trips a different trigger first."""
    create_topic(kafka.bootstrap, topic_name, partitions=3)
    big = bytes(2048)
    produce(kafka.bootstrap, topic_name, 0, [Record(b"k", big) for _ in range(3_000)])  # ~6 MB: max-bytes
    produce(kafka.bootstrap, topic_name, 1, [Record(b"k", b"v") for _ in range(12_000)])  # many tiny: max-offsets
    produce(kafka.bootstrap, topic_name, 2, [Record(b"k", b"v") for _ in range(10)])  # a trickle: max-time
    root = tmp_path / "archive"
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        root=root,
        mirrors=[{"topic": topic_name, "partition": p} for p in range(3)],
        flush={"max-time-ms": 1500, "max-bytes": 1_000_000, "max-offsets": 5_000},
        spark={"max-offsets-per-read": 1_000},
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        for partition, total in enumerate([3_000, 12_000, 10]):
            directory = partition_dir(root, topic_name, partition)
            wait_until(lambda d=directory, t=total: destination_next(d) == t, 180, f"partition {partition}")
        mirror.terminate()
        assert mirror.wait(60) == 0
    finally:
        mirror.stop()
    flushes = re.findall(r"msg=flushed mirror=\S+-(\d) .* trigger=(\S+)", mirror.log_text())
    by_partition: dict[str, set[str]] = {}
    for partition, trigger in flushes:
        by_partition.setdefault(partition, set()).add(trigger)
    assert "max-bytes" in by_partition["0"], flushes
    assert "max-offsets" in by_partition["1"], flushes
    assert by_partition["2"] == {"max-time"}, flushes
    for partition in range(3):
        directory = partition_dir(root, topic_name, partition)
        assert_same_records(read_archive(directory), source_records(kafka.bootstrap, topic_name, partition))
