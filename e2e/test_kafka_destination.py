"""Kafka -> Kafka through the real CLI, between two real clusters: both offset modes, status while running, SIGTERM
and a lost position group, kill -9, sources with holes, refusals at start, fencing, security, destination outages.

Exactly-once is checked by reading the destination back with read_committed and comparing it with the source
record by record (renumber mode: through the `mirror-v3.source-offset` header). The refusal variants (a trimmed
source, too few partitions) are tested below the CLI in tests/test_kafka_sink_open.py.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import SASL_PASSWORD, SASL_USER
from e2e.harness import (
    assert_exactly_once,
    backlog,
    mirror_config,
    one_mirror,
    partitions_of,
    refused,
    refused_beside,
    run_until,
    sigterm_while_records_wait,
    standby_takes_over_a_killed_writer,
    start,
    status_json,
    status_rows,
)
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    Record,
    compacted_topic_config,
    consume_all,
    create_topic,
    delete_consumer_group,
    generate_records,
    produce,
    produce_transactional,
    wait_for_compaction,
    watermarks,
)
from testkit.mirror_run import MirrorRun, run_cli
from testkit.targets import KafkaTarget, source_records
from testkit.tcp_proxy import TcpProxy
from testkit.tls import TlsFiles

MODES = ["preserve", "renumber"]


def _assert_exactly_once(source: KafkaBroker, destination: KafkaTarget, topic: str, partitions: int = 1) -> None:
    assert_exactly_once(source.bootstrap, destination, topic, partitions)
    if destination.mode == "preserve":  # and not one offset more: no transaction markers, no duplicates
        for partition in range(partitions):
            copied = consume_all(destination.bootstrap, topic, partition, "read_uncommitted")
            expected = source_records(source.bootstrap, topic, partition)
            assert [r.offset for r in copied] == [r.offset for r in expected], "destination offsets differ"


def _verify(config: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = run_cli("verify", "--config", str(config), "--format", "json", *extra, timeout=300)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def _compacted_source(kafka: KafkaBroker, topic: str) -> None:
    create_topic(kafka.bootstrap, topic, config=compacted_topic_config())
    records = generate_records(5_000, seed=21, key_space=100, null_key_ratio=0.0, null_value_ratio=0.0)
    produce(kafka.bootstrap, topic, 0, records)
    assert wait_for_compaction(kafka.bootstrap, topic, 0, timeout=60) > 0, "compaction did not happen"


def _transactional_source(kafka: KafkaBroker, topic: str) -> None:
    create_topic(kafka.bootstrap, topic)
    batches = [(generate_records(500, seed=30 + i), i % 3 != 1) for i in range(9)]  # every third aborted
    produce_transactional(kafka.bootstrap, topic, 0, batches)


# preserve in the soak run (CI time): a preserve writer is killed mid-flush and continued from the destination by the
# lease test, retried through outages and its group moved in the default run; this case adds the status columns.
@pytest.mark.parametrize("offsets", [pytest.param("preserve", marks=pytest.mark.soak), "renumber"])
def test_round_trip_with_status(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    """Three partitions; in renumber mode also a compacted and a transactional source, whose holes it skips."""
    backlog(kafka.bootstrap, topic_name, [10_000] * 3, seed=40)
    create_topic(kafka_destination_broker.bootstrap, topic_name, partitions=3)
    holes: dict[str, int] = {}
    if offsets == "renumber":
        for kind, make in (("compacted", _compacted_source), ("txn", _transactional_source)):
            make(kafka, f"{topic_name}-{kind}")
            create_topic(kafka_destination_broker.bootstrap, f"{topic_name}-{kind}")
            holes[f"{topic_name}-{kind}"] = watermarks(kafka.bootstrap, f"{topic_name}-{kind}", 0)[1]
    # Each mode also proves one codec of the producer end to end.
    compression = {"preserve": "zstd", "renumber": "lz4"}[offsets]
    destination = KafkaTarget(kafka_destination_broker.bootstrap, offsets, compression=compression)
    config = mirror_config(
        tmp_path / "mirror.yaml",
        kafka.bootstrap,
        destination,
        partitions_of(topic_name, 3) + [{"topic": topic, "partition": 0} for topic in holes],
        flush={"max-time-ms": 2000, "max-offsets": 3_000},
        spark={"max-offsets-per-job": 3_000, "offsets-per-task": 1_500},
    )
    assert status_rows(config)[:3] == [(10_000, None, 10_000, None)] * 3

    with start(config, tmp_path / "run.log", destination) as run:
        run.wait_for_offsets(lambda p: destination.next_offset(topic_name, p), {p: 10_000 for p in range(3)})
        for topic, end in holes.items():
            run.wait_for_offsets(lambda p, t=topic: destination.next_offset(t, p), {0: end})  # type: ignore[misc]
        code, during = status_json(config)
        table = run_cli("status", "--config", str(config), "--wide")
        run.drain()
    assert code == 0 and during["ok"], during
    for row in during["mirrors"][:3]:
        assert (row["source-end"], row["destination-next"], row["lag"], row["last-flush"]) == (10_000, 10_000, 0, None)
    assert table.returncode == 0 and re.search(
        rf"{re.escape(topic_name)}\s+2\s+0\s+10000\s+10000\s+-\s+0\s", table.stdout
    )
    assert re.search(r"msg=flushed .*trigger=max-offsets", run.log_text())
    _assert_exactly_once(kafka, destination, topic_name, partitions=3)
    for topic, end in holes.items():
        assert len(destination.records(topic, 0)) < end, "the source was meant to have holes"
        _assert_exactly_once(kafka, destination, topic)

    # `verify` agrees, holes included; then finds a record produced into the destination by hand.
    code, document = _verify(config)
    assert code == 0 and document["ok"], document
    rows = {(row["topic"], row["partition"]): row for row in document["mirrors"]}
    for partition in range(3):
        row = rows[topic_name, partition]
        assert (row["checked-from"], row["checked-end"], row["equal"], row["holes"]) == (0, 10_000, 10_000, 0)
    for topic, end in holes.items():
        row = rows[topic, 0]
        assert (row["checked-end"], row["equal"]) == (end, len(destination.records(topic, 0))), row
        assert row["holes"] > 0 and row["equal"] + row["holes"] == end - row["checked-from"]
    appended_at = watermarks(kafka_destination_broker.bootstrap, topic_name, 1)[1]
    produce(kafka_destination_broker.bootstrap, topic_name, 1, generate_records(1, seed=99))
    code, document = _verify(config, "--mirrors", f"{re.escape(topic_name)}-1")
    (row,) = document["mirrors"]
    assert code == 1 and not document["ok"]
    expected = (10_000, "extra") if offsets == "preserve" else (appended_at, "unmapped")  # renumber: no header
    assert [(d["offset"], d["kind"]) for d in row["differences"]] == [expected]
    assert (row["equal"], row["extra"]) == (10_000, 1)


# The preserve case is a soak case: the drain is the supervisor's (test_filesystem's SIGTERM test), the Kafka
# destination's drain with its transaction is the renumber case's, and preserve's restart from the partition's end is
# test_kill_9_at_random_moments[preserve]'s.
@pytest.mark.parametrize("offsets", [pytest.param("preserve", marks=pytest.mark.soak), "renumber"])
def test_sigterm_mid_stream_then_restart(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    """In renumber mode the position group is deleted before the restart (its offsets expire after
    offsets.retention.minutes of inactivity): the position then comes from the last record's header."""
    backlog(kafka.bootstrap, topic_name, [20_000], seed=8)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    destination = KafkaTarget(kafka_destination_broker.bootstrap, offsets)
    flush, spark = {"max-time-ms": 60_000, "max-offsets": 5_000}, {"max-offsets-per-job": 1_000}
    config = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name, flush=flush, spark=spark)
    stopped_at = sigterm_while_records_wait(
        config, tmp_path / "run1.log", destination, kafka.bootstrap, topic_name, 3_000
    )
    produce(kafka.bootstrap, topic_name, 0, generate_records(4_000, seed=9))  # work for the restart

    if offsets == "renumber":
        delete_consumer_group(kafka_destination_broker.bootstrap, f"mirror-v3.{topic_name}")
        assert destination.next_offset(topic_name, 0) is None
    # The same mirror, with time-based flushes that do not keep the test waiting for the backlog's last records.
    restart = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name, spark=spark, name="restart.yaml")
    second = run_until(restart, tmp_path / "run2.log", destination, topic_name, {0: stopped_at + 4_000})
    (starting,) = second.events("mirror starting")
    assert int(starting["start_offset"]) == stopped_at
    if offsets == "renumber":
        assert "no committed position in consumer group" in second.log_text(), second.tail()
    _assert_exactly_once(kafka, destination, topic_name)


# preserve in the soak run: the lease test kills a preserve writer mid-flush, continues from the destination and
# compares record by record, the same property with one kill instead of three.
@pytest.mark.parametrize("offsets", [pytest.param("preserve", marks=pytest.mark.soak), "renumber"])
def test_kill_9_at_random_moments(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    total = 40_000
    backlog(kafka.bootstrap, topic_name, [total], seed=12)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    destination = KafkaTarget(kafka_destination_broker.bootstrap, offsets)
    flush, spark = {"max-time-ms": 300, "max-offsets": 4_000}, {"max-offsets-per-job": 4_000}
    config = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name, flush=flush, spark=spark)
    rng = random.Random(401)
    for attempt in range(3):
        if attempt > 0:  # work for this run even if the one before caught up before its kill (a fast machine)
            produce(kafka.bootstrap, topic_name, 0, generate_records(10_000, seed=12 + attempt))
            total += 10_000
        with start(config, tmp_path / f"run{attempt}.log", destination) as run:
            run.wait_for_log(r"msg=flushed")
            time.sleep(rng.uniform(0.0, 2.0))  # somewhere in a read, a send or a transaction
            run.kill9()
    run_until(config, tmp_path / "final.log", destination, topic_name, {0: total})
    _assert_exactly_once(kafka, destination, topic_name)


def test_preserve_refuses_a_source_with_holes(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    """Transaction markers here; compaction makes the same kind of hole (sinks.kafka.produce)."""
    _transactional_source(kafka, topic_name)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    destination = KafkaTarget(kafka_destination_broker.bootstrap, "preserve")
    config = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name)
    line = refused(config, tmp_path / "run.log", destination)
    assert re.search(r"offsets \d+\.\.\d+ hold no records", line), line
    assert "use offsets: renumber" in line


def test_preserve_refuses_a_misaligned_destination(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [1_000], seed=50)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    foreign = [Record(b"foreign", b"not from this source") for _ in range(5)]
    produce(kafka_destination_broker.bootstrap, topic_name, 0, foreign)
    destination = KafkaTarget(kafka_destination_broker.bootstrap, "preserve")
    config = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name)
    line = refused(config, tmp_path / "run.log", destination)
    assert re.search(r"ends at offset 5, but its record at offset 4 differs from source \S+ offset 4", line), line
    assert watermarks(kafka_destination_broker.bootstrap, topic_name, 0) == (0, 5), "something was written"


def test_a_missing_destination_topic_is_named(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [0, 0, 10])
    destination = KafkaTarget(kafka_destination_broker.bootstrap, "preserve")
    config = mirror_config(
        tmp_path / "mirror.yaml", kafka.bootstrap, destination, [{"topic": topic_name, "partition": 2}]
    )
    line = refused(config, tmp_path / "run.log", destination)
    assert f"destination topic '{topic_name}' does not exist" in line, line
    assert "create it with at least 3 partition(s)" in line


# renumber in the soak run: its takeover is a restart's (kill_9_at_random_moments[renumber] kills mid-flush in the
# default run) behind the same lease.
@pytest.mark.parametrize("mode", ["preserve", pytest.param("renumber", marks=pytest.mark.soak)])
def test_a_second_process_is_refused_by_the_lease_and_a_standby_takes_over_a_killed_one(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, mode: str
) -> None:
    """A newcomer on a live writer's partitions neither fences nor appends (preserve has no fence of its own) and
    exits 1 quickly, naming the holder; a standby waits, and once the writer is killed mid-flush it takes over
    within 15 s and the destination ends up with every record exactly once."""
    backlog(kafka.bootstrap, topic_name, [20_000], seed=60)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    destination = KafkaTarget(kafka_destination_broker.bootstrap, mode)
    flush, spark = {"max-time-ms": 300, "max-offsets": 1_000}, {"max-offsets-per-job": 1_000}
    config = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name, flush=flush, spark=spark)
    with start(config, tmp_path / "active.log", destination) as active:
        active.wait_for_log(r"msg=flushed")
        line = refused_beside(active, config, tmp_path / "second.log", destination)
        where = f"kafka://{kafka_destination_broker.bootstrap}/{topic_name}/0 (group mirror-v3.lease)"
        assert f'msg="another writer holds the destination" error="{where}: ' in line, line
        standby_takes_over_a_killed_writer(
            active, config, tmp_path / "standby.log", destination, kafka.bootstrap, topic_name, seed=61
        )
    assert "fenced" not in active.log_text()
    _assert_exactly_once(kafka, destination, topic_name)


def test_security_settings_reach_every_client(
    kafka_destination_broker: KafkaBroker, destination_tls: TlsFiles, topic_name: str, tmp_path: Path
) -> None:
    """One mirror reads through SASL/PLAIN, another through mutual TLS, both write through mutual TLS: offset
    queries, Spark's reader and the producer all authenticate. A missing secret is a config error (exit 2), a wrong
    password and a missing client certificate each end in one clear line."""
    broker = kafka_destination_broker
    assert broker.sasl_bootstrap is not None and broker.ssl_bootstrap is not None
    sasl_topic, tls_topic = f"{topic_name}-sasl", f"{topic_name}-tls"
    for topic, seed in ((sasl_topic, 70), (tls_topic, 71)):
        backlog(broker.bootstrap, topic, [3_000], seed=seed)
        create_topic(broker.bootstrap, f"{topic}-copy")
    sasl: dict[str, Any] = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {"mechanism": "PLAIN", "username": SASL_USER, "password-env": "E2E_KAFKA_PASSWORD"},
    }
    tls_files = {"ca-file": str(destination_tls.ca)}
    client_cert = {"cert-file": str(destination_tls.client_cert), "key-file": str(destination_tls.client_key)}
    mutual_tls = {"protocol": "SSL", "tls": {**tls_files, **client_cert}}
    destination = KafkaTarget(broker.ssl_bootstrap, "renumber", security=mutual_tls)
    config = mirror_config(
        tmp_path / "mirror.yaml",
        broker.sasl_bootstrap,
        destination,
        [
            {"topic": sasl_topic, "partition": 0, "override": f"{sasl_topic}-copy", "source": {"security": sasl}},
            {
                "topic": tls_topic,
                "partition": 0,
                "override": f"{tls_topic}-copy",
                "source": {"bootstrap-servers": broker.ssl_bootstrap, "security": mutual_tls},
            },
        ],
    )

    unset = run_cli("run", "--config", str(config))
    assert unset.returncode == 2, unset.stderr
    assert "security.sasl.password-env: environment variable E2E_KAFKA_PASSWORD is not set" in unset.stderr

    began = time.monotonic()
    line = refused(config, tmp_path / "wrong.log", destination, E2E_KAFKA_PASSWORD="wrong-password")
    assert time.monotonic() - began < 15, "a refused password was waited for"  # not librdkafka's 30 s timeout
    assert re.search(r"(?i)auth", line) and "wrong-password" not in (tmp_path / "wrong.log").read_text(), line

    # The same class of failure (a source that will not let us in), as `status` reports it: no client certificate.
    anonymous = mirror_config(
        tmp_path / "anonymous.yaml",
        broker.ssl_bootstrap,
        KafkaTarget(broker.bootstrap, "renumber"),
        [{"topic": tls_topic, "partition": 0, "source": {"security": {"protocol": "SSL", "tls": tls_files}}}],
    )
    code, document = status_json(anonymous, "--timeout", "10")
    assert code == 1 and "unreachable" in document["mirrors"][0]["error"], document

    plain = KafkaTarget(broker.bootstrap, "renumber")
    with MirrorRun(config, tmp_path / "run.log", env={"E2E_KAFKA_PASSWORD": SASL_PASSWORD}) as run:
        for topic in (sasl_topic, tls_topic):
            run.wait_for_offsets(lambda p, t=topic: plain.next_offset(f"{t}-copy", p), {0: 3_000})  # type: ignore[misc]
        run.drain()
    assert SASL_PASSWORD not in run.log_text()
    for topic in (sasl_topic, tls_topic):
        assert_exactly_once(broker.bootstrap, plain, topic, name=f"{topic}-copy")


# preserve in the soak run (CI time): the retry layer and the transactional producer under it are both modes'; the
# renumber case, whose resend checks the destination's headers, is the one with more to get wrong.
@pytest.mark.parametrize("offsets", [pytest.param("preserve", marks=pytest.mark.soak), "renumber"])
def test_destination_outages_are_retried_without_duplicates(
    kafka: KafkaBroker,
    kafka_destination_broker: KafkaBroker,
    healthy_destination_proxy: TcpProxy,
    topic_name: str,
    tmp_path: Path,
    offsets: str,
) -> None:
    """Connections to the destination are reset and refused for longer than a request may take, three times, while
    Spark tasks produce. librdkafka rides the outage out inside the task until destination.retry.deadline-ms (a
    flush takes as long as the outage): preserve's sequence numbers keep a resent batch from landing twice;
    renumber's transaction either commits whole or is aborted and run again after its position is re-checked."""
    total = 30_000
    proxy = healthy_destination_proxy
    backlog(kafka.bootstrap, topic_name, [total], seed=80)
    create_topic(kafka_destination_broker.bootstrap, topic_name)
    assert kafka_destination_broker.advertised_bootstrap is not None
    destination = KafkaTarget(kafka_destination_broker.advertised_bootstrap, offsets, **{"request-timeout-ms": 1_500})
    direct = KafkaTarget(kafka_destination_broker.bootstrap, offsets)
    flush, spark = {"max-time-ms": 300, "max-offsets": 3_000}, {"max-offsets-per-job": 3_000}
    config = one_mirror(tmp_path, kafka.bootstrap, destination, topic_name, flush=flush, spark=spark)
    rng = random.Random(81)
    with start(config, tmp_path / "run.log", destination) as run:
        for outage in range(3):
            run.wait_for_log(r"msg=flushed", count=outage * 3 + 1)
            time.sleep(rng.uniform(0.0, 0.5))
            proxy.refuse(True)
            proxy.cut()
            time.sleep(rng.uniform(3.0, 4.5))  # longer than a request may take: the sink must retry
            proxy.refuse(False)
        run.wait_for_offsets(lambda p: direct.next_offset(topic_name, p), {0: total})
        run.drain()
    assert max(int(flush["elapsed_ms"]) for flush in run.events("flushed")) >= 1_000, "no flush met an outage"
    _assert_exactly_once(kafka, direct, topic_name)
