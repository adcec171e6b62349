"""How `run` starts, fails and stops: corrupt chains, unreachable brokers, missing jars, signals,
and every flush trigger."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from e2e.destinations import (
    DestinationUnderTest,
    FilesystemDestinationUnderTest,
    S3DestinationUnderTest,
    next_offset,
)
from e2e.harness import (
    MirrorProcess,
    assert_same_records,
    cli_env,
    read_archive,
    source_records,
    wait_until,
    write_config,
)
from sinks.blob_chain import blob_name, is_temp_name
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
def test_corrupt_chain_refuses_to_start(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path, kind: str
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(300, seed=1))
    for name in CORRUPTIONS[kind]:
        destination.write_raw(topic_name, 0, name, b"not really parquet")
    before = destination.names(topic_name, 0)
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
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
        assert destination.location(topic_name, 0, name) in line, line
    assert destination.names(topic_name, 0) == before  # nothing touched


def test_leftovers_of_interrupted_writes_are_cleaned(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    """A temporary file (filesystem) or an unfinished multipart upload (S3) is removed on start."""
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(500, seed=2))
    if isinstance(destination, S3DestinationUnderTest):
        key = destination.key_prefix(topic_name, 0) + blob_name(0, 499)
        upload = destination.client.create_multipart_upload(Bucket=destination.bucket, Key=key)
        destination.client.upload_part(
            Bucket=destination.bucket, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"half"
        )
    else:
        destination.write_raw(topic_name, 0, f".{blob_name(0, 499)}.tmp-deadbeef", b"half a file")
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        wait_until(lambda: next_offset(destination, topic_name, 0) == 500, 180, "not mirrored")
        mirror.terminate()
        assert mirror.wait(60) == 0
    finally:
        mirror.stop()
    if isinstance(destination, S3DestinationUnderTest):
        uploads = destination.client.list_multipart_uploads(Bucket=destination.bucket)
        assert not uploads.get("Uploads"), uploads
    else:
        assert not any(is_temp_name(n) for n in destination.names(topic_name, 0))
    assert_same_records(read_archive(destination, topic_name, 0), source_records(kafka.bootstrap, topic_name, 0))


def test_unreachable_broker_fails_with_one_line(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=dead,
        destination=FilesystemDestinationUnderTest(tmp_path / "archive"),
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
        tmp_path / "mirror.yaml",
        bootstrap="127.0.0.1:9",
        destination=FilesystemDestinationUnderTest(tmp_path / "a"),
        mirrors=[{"topic": "t", "partition": 0}],
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
        destination=FilesystemDestinationUnderTest(tmp_path / "archive"),
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
    fs = FilesystemDestinationUnderTest(tmp_path / "archive")
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=fs,
        mirrors=[{"topic": topic_name, "partition": p} for p in range(3)],
        flush={"max-time-ms": 1500, "max-bytes": 1_000_000, "max-offsets": 5_000},
        spark={"max-offsets-per-read": 1_000},
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        for partition, total in enumerate([3_000, 12_000, 10]):
            wait_until(lambda p=partition, t=total: next_offset(fs, topic_name, p) == t, 180, f"partition {partition}")
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
        assert_same_records(
            read_archive(fs, topic_name, partition), source_records(kafka.bootstrap, topic_name, partition)
        )
