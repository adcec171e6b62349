"""Kafka -> Kafka through the real CLI, between two real clusters: both offset modes, SIGTERM,
kill -9, holes, misaligned destinations, fencing and SASL pass-through.

Exactly-once is checked by reading the destination back with read_committed and comparing it with
the source record by record (renumber mode: through the `mirror-v3.source-offset` header).
"""

from __future__ import annotations

import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import SASL_PASSWORD, SASL_USER
from e2e.destinations import KafkaDestinationUnderTest
from e2e.harness import (
    ArchivedRecord,
    MirrorProcess,
    assert_same_records,
    cli_env,
    read_kafka_destination,
    run_cli,
    source_records,
    wait_until,
    write_config,
)
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    Record,
    admin_client,
    compacted_topic_config,
    consume_all,
    create_topic,
    delete_records,
    generate_records,
    produce,
    produce_transactional,
    wait_for_compaction,
    watermarks,
)
from testkit.tcp_proxy import TcpProxy
from testkit.tls import TlsFiles

MODES = ["preserve", "renumber"]


def _topics(source: KafkaBroker, destination: KafkaBroker, topic: str, partitions: int = 1) -> None:
    create_topic(source.bootstrap, topic, partitions=partitions)
    create_topic(destination.bootstrap, topic, partitions=partitions)


def _assert_exactly_once(
    source: KafkaBroker, destination: KafkaDestinationUnderTest, topic: str, partition: int = 0
) -> None:
    mirrored = read_kafka_destination(destination, topic, partition)
    expected = source_records(source.bootstrap, topic, partition)
    assert_same_records(mirrored, expected)
    if destination.offsets == "preserve":
        copied = consume_all(destination.bootstrap, topic, partition, "read_uncommitted")
        assert [r.offset for r in copied] == [r.offset for r in expected], "destination offsets differ"


def _one_mirror(
    tmp_path: Path, source: KafkaBroker, destination: KafkaDestinationUnderTest, topic: str, **settings: Any
) -> Path:
    """The config of one mirror, of partition 0 of `topic`, into `destination`."""
    return write_config(
        tmp_path / "mirror.yaml",
        bootstrap=source.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic, "partition": 0}],
        **settings,
    )


def _run_until_mirrored(
    config: Path, log: Path, destination: KafkaDestinationUnderTest, topic: str, until: dict[int, int]
) -> MirrorProcess:
    mirror = MirrorProcess(config, log)
    try:
        for partition, offset in until.items():
            wait_until(
                lambda p=partition, o=offset: destination.next_offset(topic, p) == o,
                240,
                f"partition {partition} did not reach {offset}:\n{mirror.tail()}",
            )
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    return mirror


@pytest.mark.parametrize("offsets", MODES)
def test_three_partitions_round_trip(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    _topics(kafka, kafka_destination_broker, topic_name, partitions=3)
    for partition in range(3):
        produce(kafka.bootstrap, topic_name, partition, generate_records(100_000, seed=40 + partition))
    # Each mode also proves one codec of the producer end to end.
    compression = {"preserve": "zstd", "renumber": "lz4"}[offsets]
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, offsets, compression=compression)
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": p} for p in range(3)],
        flush={"max-time-ms": 2000, "max-offsets": 25_000},
        spark={"max-offsets-per-read": 25_000, "offsets-per-task": 12_500},
    )
    mirror = _run_until_mirrored(config, tmp_path / "run.log", destination, topic_name, {p: 100_000 for p in range(3)})
    for partition in range(3):
        _assert_exactly_once(kafka, destination, topic_name, partition)
    assert re.search(r"msg=flushed .*trigger=max-offsets", mirror.log_text())

    status = run_cli("status", "--config", str(config), "--format", "json")
    assert status.returncode == 0, status.stderr
    import json

    rows = json.loads(status.stdout)["mirrors"]
    assert [(r["destination-next"], r["lag"]) for r in rows] == [(100_000, 0)] * 3


@pytest.mark.parametrize("offsets", MODES)
def test_sigterm_mid_stream_then_restart(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(60_000, seed=8))
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, offsets)
    config = _one_mirror(
        tmp_path,
        kafka,
        destination,
        topic_name,
        flush={"max-time-ms": 60_000, "max-offsets": 20_000},
        spark={"max-offsets-per-read": 4_000},
    )
    # DEBUG heartbeats show what is buffered, so the signal lands while records sit in memory.
    mirror = MirrorProcess(
        config, tmp_path / "run1.log", env=cli_env(LOG_LEVEL="DEBUG", MIRROR_V3_HEARTBEAT_SECS="0.2")
    )
    try:
        mirror.wait_for_log(r"msg=flushed[\s\S]*msg=heartbeat .*buffered_offsets=[1-9]", timeout=180)
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    stopped = re.search(r'msg="mirror stopped" mirror=\S+ next_offset=(\d+)', mirror.log_text())
    assert stopped, mirror.tail()
    assert destination.next_offset(topic_name, 0) == int(stopped.group(1))
    assert 20_000 < int(stopped.group(1)) < 60_000, "SIGTERM was meant to land mid-stream"
    assert "trigger=shutdown" in mirror.log_text()

    restarted = _run_until_mirrored(config, tmp_path / "run2.log", destination, topic_name, {0: 60_000})
    start = re.search(r'msg="mirror starting" .*start_offset=(\d+)', restarted.log_text())
    assert start and int(start.group(1)) == int(stopped.group(1))
    _assert_exactly_once(kafka, destination, topic_name)


@pytest.mark.parametrize("offsets", MODES)
def test_kill_9_at_random_moments(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    total = 150_000
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(total, seed=12))
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, offsets)
    config = _one_mirror(
        tmp_path,
        kafka,
        destination,
        topic_name,
        flush={"max-time-ms": 300, "max-offsets": 8_000},
        spark={"max-offsets-per-read": 8_000},
    )
    rng = random.Random(4_0_1)
    for attempt in range(5):
        mirror = MirrorProcess(config, tmp_path / f"run{attempt}.log")
        try:
            mirror.wait_for_log(r"msg=flushed", timeout=180)
            time.sleep(rng.uniform(0.0, 2.0))  # somewhere in a read, a send or a transaction
            mirror.kill9()
            mirror.wait(30)
        finally:
            mirror.stop()
    _run_until_mirrored(config, tmp_path / "final.log", destination, topic_name, {0: total})
    _assert_exactly_once(kafka, destination, topic_name)


def _compacted_source(kafka: KafkaBroker, topic: str) -> None:
    create_topic(kafka.bootstrap, topic, config=compacted_topic_config())
    records = generate_records(5_000, seed=21, key_space=100, null_key_ratio=0.0, null_value_ratio=0.0)
    produce(kafka.bootstrap, topic, 0, records)
    first_readable = wait_for_compaction(kafka.bootstrap, topic, 0, timeout=60)
    assert first_readable > watermarks(kafka.bootstrap, topic, 0)[0], "compaction did not happen"


def _transactional_source(kafka: KafkaBroker, topic: str) -> None:
    create_topic(kafka.bootstrap, topic)
    batches = [(generate_records(500, seed=30 + i), i % 3 != 1) for i in range(9)]  # every third aborted
    produce_transactional(kafka.bootstrap, topic, 0, batches)


SOURCES_WITH_HOLES = {"compacted": _compacted_source, "transactional": _transactional_source}


@pytest.mark.parametrize("kind", sorted(SOURCES_WITH_HOLES))
def test_renumber_mirrors_sources_with_holes(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, kind: str
) -> None:
    SOURCES_WITH_HOLES[kind](kafka, topic_name)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    end = watermarks(kafka.bootstrap, topic_name, 0)[1]
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "renumber")
    config = _one_mirror(tmp_path, kafka, destination, topic_name, spark={"max-offsets-per-read": 1_000})
    _run_until_mirrored(config, tmp_path / "run.log", destination, topic_name, {0: end})
    mirrored = read_kafka_destination(destination, topic_name, 0)
    assert len(mirrored) < end, "the source was meant to have holes"
    _assert_exactly_once(kafka, destination, topic_name)


@pytest.mark.parametrize("kind", sorted(SOURCES_WITH_HOLES))
def test_preserve_refuses_sources_with_holes(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, kind: str
) -> None:
    SOURCES_WITH_HOLES[kind](kafka, topic_name)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "preserve")
    config = _one_mirror(tmp_path, kafka, destination, topic_name)
    mirror = MirrorProcess(config, tmp_path / "run.log")
    try:
        assert mirror.wait(180) == 1, mirror.tail()
    finally:
        mirror.stop()
    error = re.search(r"level=ERROR .*", mirror.log_text())
    assert error, mirror.tail()
    assert re.search(r"offsets \d+\.\.\d+ hold no records", error.group(0)), error.group(0)
    assert "use offsets: renumber" in error.group(0)
    assert "Traceback" not in mirror.log_text()


def test_preserve_refuses_a_misaligned_destination(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(1_000, seed=50))
    foreign = [Record(b"foreign", b"not from this source") for _ in range(5)]
    produce(kafka_destination_broker.bootstrap, topic_name, 0, foreign)
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "preserve")
    config = _one_mirror(tmp_path, kafka, destination, topic_name)
    result = run_cli("run", "--config", str(config), timeout=180)
    assert result.returncode == 1, result.stderr
    assert re.search(r"ends at offset 5, but its record at offset 4 differs from source \S+ offset 4", result.stderr)
    assert watermarks(kafka_destination_broker.bootstrap, topic_name, 0) == (0, 5), "something was written"


def test_preserve_refuses_an_empty_destination_behind_a_trimmed_source(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(100, seed=51))
    delete_records(kafka.bootstrap, topic_name, 0, 40)
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "preserve")
    config = _one_mirror(tmp_path, kafka, destination, topic_name)
    result = run_cli("run", "--config", str(config), timeout=180)
    assert result.returncode == 1, result.stderr
    assert "is empty (end offset 0) but source" in result.stderr and "begins at offset 40" in result.stderr
    assert "use offsets: renumber" in result.stderr
    assert watermarks(kafka_destination_broker.bootstrap, topic_name, 0) == (0, 0)


@pytest.mark.parametrize("problem", ["missing", "too-few-partitions"])
def test_destination_topic_must_exist(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, problem: str
) -> None:
    create_topic(kafka.bootstrap, topic_name, partitions=3)
    produce(kafka.bootstrap, topic_name, 2, generate_records(10, seed=52))
    if problem == "too-few-partitions":
        create_topic(kafka_destination_broker.bootstrap, topic_name, partitions=2)
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "preserve")
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 2}],
    )
    result = run_cli("run", "--config", str(config), timeout=180)
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1, result.stderr
    if problem == "missing":
        assert f"destination topic '{topic_name}' does not exist" in errors[0]
        assert "create it with at least 3 partition(s)" in errors[0]
    else:
        assert "has 2 partition(s); partition 2 is needed" in errors[0]


def test_a_second_renumber_process_fences_the_first(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(150_000, seed=60))
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "renumber")
    config = _one_mirror(
        tmp_path,
        kafka,
        destination,
        topic_name,
        flush={"max-time-ms": 300, "max-offsets": 3_000},
        spark={"max-offsets-per-read": 3_000},
    )
    first = MirrorProcess(config, tmp_path / "first.log")
    second: MirrorProcess | None = None
    try:
        first.wait_for_log(r"msg=flushed", timeout=180)
        second = MirrorProcess(config, tmp_path / "second.log")
        second.wait_for_log(r'msg="mirror starting"', timeout=180)
        # Keep the first one busy even if it had caught up: its next transaction meets the fence.
        produce(kafka.bootstrap, topic_name, 0, generate_records(2_000, seed=61))
        assert first.wait(120) == 1, first.tail()
        assert re.search(r"level=ERROR .*fenced by a newer producer", first.log_text()), first.tail()
        wait_until(lambda: destination.next_offset(topic_name, 0) == 152_000, 240, "second did not finish")
        second.terminate()
        assert second.wait(60) == 0, second.tail()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    _assert_exactly_once(kafka, destination, topic_name)


def test_sasl_settings_reach_every_client(
    kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    """Source and destination both behind SASL/PLAIN: offset queries, Spark's reader and the producer
    all authenticate; a wrong password ends in one clear line."""
    broker = kafka_destination_broker
    sasl_bootstrap = broker.sasl_bootstrap
    assert sasl_bootstrap is not None
    copy = f"{topic_name}-copy"
    create_topic(broker.bootstrap, topic_name)
    create_topic(broker.bootstrap, copy)
    produce(broker.bootstrap, topic_name, 0, generate_records(3_000, seed=70))

    security = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {"mechanism": "PLAIN", "username": SASL_USER, "password-env": "E2E_KAFKA_PASSWORD"},
    }
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=sasl_bootstrap,
        destination=KafkaDestinationUnderTest(sasl_bootstrap, "renumber", security=security),
        mirrors=[{"topic": topic_name, "partition": 0, "override": copy, "source": {"security": security}}],
    )

    unset = run_cli("run", "--config", str(config), timeout=60)
    assert unset.returncode == 2, unset.stderr
    assert "security.sasl.password-env: environment variable E2E_KAFKA_PASSWORD is not set" in unset.stderr

    wrong = run_cli("run", "--config", str(config), env=cli_env(E2E_KAFKA_PASSWORD="wrong-password"), timeout=180)
    assert wrong.returncode == 1, wrong.stderr
    errors = [line for line in wrong.stderr.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1 and re.search(r"(?i)auth", errors[0]), wrong.stderr
    assert "wrong-password" not in wrong.stderr

    plain = KafkaDestinationUnderTest(broker.bootstrap, "renumber")
    mirror = MirrorProcess(config, tmp_path / "run.log", env=cli_env(E2E_KAFKA_PASSWORD=SASL_PASSWORD))
    try:
        wait_until(lambda: plain.next_offset(copy, 0) == 3_000, 240, f"not mirrored:\n{mirror.tail()}")
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    assert SASL_PASSWORD not in mirror.log_text()
    mirrored = read_kafka_destination(plain, copy, 0)
    assert_same_records(mirrored, source_records(broker.bootstrap, topic_name, 0))


@pytest.mark.parametrize("offsets", MODES)
def test_destination_outages_are_retried_without_duplicates(
    kafka: KafkaBroker,
    kafka_destination_broker: KafkaBroker,
    healthy_destination_proxy: TcpProxy,
    topic_name: str,
    tmp_path: Path,
    offsets: str,
) -> None:
    """Connections to the destination are reset mid-flush and refused for a while, three times. The
    retry layer waits it out; each retry first asks the destination what of the chunk landed."""
    total = 150_000
    proxy = healthy_destination_proxy
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(total, seed=80))
    assert kafka_destination_broker.advertised_bootstrap is not None
    destination = KafkaDestinationUnderTest(
        kafka_destination_broker.advertised_bootstrap, offsets, **{"request-timeout-ms": 1_500}
    )
    direct = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, offsets)
    config = _one_mirror(
        tmp_path,
        kafka,
        destination,
        topic_name,
        flush={"max-time-ms": 300, "max-offsets": 10_000},
        spark={"max-offsets-per-read": 10_000},
    )
    mirror = MirrorProcess(config, tmp_path / "run.log")
    rng = random.Random(81)
    try:
        for outage in range(3):
            mirror.wait_for_log(r"msg=flushed", timeout=180, count=outage * 3 + 1)
            time.sleep(rng.uniform(0.0, 0.5))
            proxy.refuse(True)
            proxy.cut()
            time.sleep(rng.uniform(3.0, 4.5))  # longer than a request may take: the sink must retry
            proxy.refuse(False)
        wait_until(lambda: direct.next_offset(topic_name, 0) == total, 240, f"not mirrored:\n{mirror.tail()}")
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    assert re.search(r"level=WARNING .*retry", mirror.log_text()), "no outage was noticed"
    _assert_exactly_once(kafka, direct, topic_name)


def test_mutual_tls_settings_reach_every_client(
    kafka_destination_broker: KafkaBroker, destination_tls: TlsFiles, topic_name: str, tmp_path: Path
) -> None:
    """Source and destination both behind TLS with client certificates: the PEM files reach aiokafka and,
    inline, Spark's JVM reader; without a client certificate the broker refuses and the error says so."""
    broker = kafka_destination_broker
    ssl_bootstrap = broker.ssl_bootstrap
    assert ssl_bootstrap is not None
    copy = f"{topic_name}-copy"
    create_topic(broker.bootstrap, topic_name)
    create_topic(broker.bootstrap, copy)
    produce(broker.bootstrap, topic_name, 0, generate_records(3_000, seed=90))

    def config(name: str, tls: dict[str, str]) -> Path:
        security = {"protocol": "SSL", "tls": tls}
        return write_config(
            tmp_path / name,
            bootstrap=ssl_bootstrap,
            destination=KafkaDestinationUnderTest(ssl_bootstrap, "preserve", security=security),
            mirrors=[{"topic": topic_name, "partition": 0, "override": copy, "source": {"security": security}}],
        )

    anonymous = run_cli("run", "--config", str(config("anonymous.yaml", {"ca-file": str(destination_tls.ca)})))
    assert anonymous.returncode == 1, anonymous.stderr
    errors = [line for line in anonymous.stderr.splitlines() if "level=ERROR" in line]
    assert len(errors) == 1 and "unreachable" in errors[0], anonymous.stderr
    assert watermarks(broker.bootstrap, copy, 0) == (0, 0)

    mutual = config(
        "mutual.yaml",
        {
            "ca-file": str(destination_tls.ca),
            "cert-file": str(destination_tls.client_cert),
            "key-file": str(destination_tls.client_key),
        },
    )
    _run_until_mirrored(
        mutual, tmp_path / "run.log", KafkaDestinationUnderTest(broker.bootstrap, "preserve"), copy, {0: 3_000}
    )
    copied = consume_all(broker.bootstrap, copy, 0, "read_uncommitted")
    assert_same_records(
        [ArchivedRecord(r.offset, r.key, r.value, list(r.headers or []), r.timestamp_ms) for r in copied],
        source_records(broker.bootstrap, topic_name, 0),
    )


def test_renumber_position_survives_a_lost_consumer_group(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    """The group's committed offsets expire after offsets.retention.minutes of inactivity (or an admin
    deletes the group): the position then comes from the last mirrored record's header."""
    _topics(kafka, kafka_destination_broker, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(3_000, seed=130))
    destination = KafkaDestinationUnderTest(kafka_destination_broker.bootstrap, "renumber")
    config = _one_mirror(tmp_path, kafka, destination, topic_name)
    _run_until_mirrored(config, tmp_path / "run1.log", destination, topic_name, {0: 3_000})

    admin = admin_client(kafka_destination_broker.bootstrap)
    admin.delete_consumer_groups([f"mirror-v3.{topic_name}"])[f"mirror-v3.{topic_name}"].result(30)
    assert destination.next_offset(topic_name, 0) is None

    produce(kafka.bootstrap, topic_name, 0, generate_records(1_000, seed=131))
    restarted = _run_until_mirrored(config, tmp_path / "run2.log", destination, topic_name, {0: 4_000})
    assert re.search(r"no committed position in consumer group", restarted.log_text()), restarted.tail()
    start = re.search(r'msg="mirror starting" .*start_offset=(\d+)', restarted.log_text())
    assert start and int(start.group(1)) == 3_000
    _assert_exactly_once(kafka, destination, topic_name)
