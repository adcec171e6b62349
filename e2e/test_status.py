"""`status` against running mirrors of every destination type, a stopped broker and a corrupt chain."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from e2e.destinations import (
    DestinationConfig,
    FilesystemDestinationUnderTest,
    KafkaDestinationUnderTest,
    S3DestinationUnderTest,
)
from e2e.harness import MirrorProcess, run_cli, wait_until, write_config
from supervisor.status import STATUS_SCHEMA_PATH, TABLE_COLUMNS
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce
from testkit.s3_servers import MotoServer

KINDS = ["filesystem", "s3", "kafka-preserve", "kafka-renumber"]
SCHEMA = json.loads(STATUS_SCHEMA_PATH.read_text())


def status_json(config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("status", "--config", str(config), "--format", "json", *extra)
    document = json.loads(result.stdout)
    jsonschema.validate(document, SCHEMA)
    return result.returncode, document


@pytest.fixture
def any_destination(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[DestinationConfig, KafkaBroker | None]:
    kind: str = request.param
    if kind == "filesystem":
        return FilesystemDestinationUnderTest(tmp_path / "archive"), None
    if kind == "s3":
        server: MotoServer = request.getfixturevalue("moto")
        s3 = S3DestinationUnderTest(server.endpoint, server.access_key, server.secret_key, server.region)
        for name, value in s3.env().items():
            monkeypatch.setenv(name, value)
        return s3, None
    broker: KafkaBroker = request.getfixturevalue("kafka_destination_broker")
    return KafkaDestinationUnderTest(broker.bootstrap, kind.removeprefix("kafka-")), broker


@pytest.mark.parametrize("any_destination", KINDS, indirect=True)
def test_status_of_running_mirrors(
    kafka: KafkaBroker,
    any_destination: tuple[DestinationConfig, KafkaBroker | None],
    topic_name: str,
    tmp_path: Path,
) -> None:
    destination, destination_broker = any_destination
    create_topic(kafka.bootstrap, topic_name, partitions=2)
    if destination_broker is not None:
        create_topic(destination_broker.bootstrap, topic_name, partitions=2)
    for partition in range(2):
        produce(kafka.bootstrap, topic_name, partition, generate_records(2_000, seed=100 + partition))
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": p} for p in range(2)],
        flush={"max-time-ms": 500},
    )
    code, before = status_json(config)
    assert code == 0 and before["ok"], before
    assert [(row["destination-next"], row["lag"]) for row in before["mirrors"]] == [(None, 2_000)] * 2

    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        # Lag reaches 0 while the mirrors keep running.
        wait_until(
            lambda: [row["lag"] for row in status_json(config)[1]["mirrors"]] == [0, 0],
            180,
            f"lag did not reach 0:\n{mirror.tail()}",
            interval=1.0,
        )
        code, during = status_json(config)
        table = run_cli("status", "--config", str(config))
        assert mirror.proc.poll() is None, "the mirror was meant to be running"
    finally:
        mirror.stop()
    assert code == 0 and during["ok"], during
    for partition, row in enumerate(during["mirrors"]):
        assert (row["topic"], row["partition"]) == (topic_name, partition)
        assert (row["source-end"], row["destination-next"], row["lag"], row["error"]) == (2_000, 2_000, 0, None)
        if destination.kind in ("filesystem", "s3"):
            flushed = time.mktime(time.strptime(row["last-flush"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
            assert abs(time.time() - flushed) < 600, row["last-flush"]
        else:
            assert row["last-flush"] is None  # Kafka keeps no write time of its own
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert tuple(header.split()) == TABLE_COLUMNS
    for partition, line in enumerate(rows):
        assert re.match(rf"\S+\s+{re.escape(topic_name)}\s+{partition}\s+0\s+2000\s+2000\s+0\s", line), line


def test_status_with_the_broker_stopped_names_it_within_the_timeout(topic_name: str, tmp_path: Path) -> None:
    broker = KafkaBroker()
    broker.start()
    try:
        create_topic(broker.bootstrap, topic_name)
        produce(broker.bootstrap, topic_name, 0, generate_records(100, seed=110))
        config = write_config(
            tmp_path / "mirror.yaml",
            bootstrap=broker.bootstrap,
            destination=FilesystemDestinationUnderTest(tmp_path / "archive"),
            mirrors=[{"topic": topic_name, "partition": 0}],
        )
        assert status_json(config)[0] == 0
    finally:
        broker.stop()
    began = time.monotonic()
    code, document = status_json(config, "--timeout", "5")
    elapsed = time.monotonic() - began
    assert code == 1 and not document["ok"]
    (row,) = document["mirrors"]
    assert broker.bootstrap in row["error"], row
    assert row["source-end"] is None and row["lag"] is None
    assert elapsed < 5 + 15, f"status took {elapsed:.1f}s"  # the timeout, plus interpreter start-up


def test_status_names_the_files_of_a_corrupt_chain(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafka.bootstrap, topic_name)
    destination = FilesystemDestinationUnderTest(tmp_path / "archive")
    # Two files that overlap: 0-9 and 5-14.
    destination.write_raw(topic_name, 0, "00000000000000000000-00000000000000000009.parquet", b"x")
    destination.write_raw(topic_name, 0, "00000000000000000005-00000000000000000014.parquet", b"x")
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
    )
    code, document = status_json(config)
    assert code == 1
    (row,) = document["mirrors"]
    assert "corrupt chain" in row["error"]
    assert destination.location(topic_name, 0, "00000000000000000005-00000000000000000014.parquet") in row["error"]
    table = run_cli("status", "--config", str(config))
    assert table.returncode == 1 and "corrupt chain" in table.stdout
