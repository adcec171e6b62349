"""Kafka -> Kafka as a migration tool, through the real CLI between two real clusters: with `create-topics`, the
destination topics of a regex selection are created like their sources (partition count, allow-listed configs),
follow a partition the source gains, and take a config change within one sync interval; every record lands
exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer

from e2e.harness import SOURCE_DEFAULTS, assert_exactly_once
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    RDKAFKA_LOGGER,
    ConsumedRecord,
    add_partitions,
    commit_offset,
    committed_offset,
    compacted_topic_config,
    consume_all,
    consume_as_group,
    create_topic,
    generate_records,
    partition_count,
    produce,
    produce_transactional,
    set_topic_config,
    topic_configs,
    watermarks,
)
from testkit.mirror_run import MirrorRun, run_cli
from testkit.targets import (
    SOURCE_CLUSTER_HEADER,
    SOURCE_OFFSET_HEADER,
    KafkaTarget,
    SourceRecord,
    assert_same_records,
    source_records,
)

SYNC_MS = 1_000


def test_create_topics_makes_and_keeps_destination_topics_like_their_sources(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    destination = kafka_destination_broker.bootstrap
    plain, compacted = f"{topic_name}-plain", f"{topic_name}-compacted"
    create_topic(
        kafka.bootstrap,
        plain,
        partitions=2,
        config={"retention.ms": "315360000000", "max.message.bytes": "2000000", "segment.bytes": "10485760"},
    )
    create_topic(kafka.bootstrap, compacted, config=compacted_topic_config())
    for partition in range(2):
        produce(kafka.bootstrap, plain, partition, generate_records(300, seed=partition))
    # Distinct keys, no tombstones: the destination compacts too (its compaction settings are copied), with
    # nothing to remove.
    unique = generate_records(200, seed=9, key_space=10**9, null_key_ratio=0.0, null_value_ratio=0.0)
    produce(kafka.bootstrap, compacted, 0, unique)
    target = KafkaTarget(destination, "renumber", **{"create-topics": True, "sync-topic-configs-interval-ms": SYNC_MS})
    config = tmp_path / "mirror.yaml"
    document = {
        "destination": target.config(),
        "clusters": {"source": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS}},
        "mirrors": [{"name": "estate", "cluster": "source", "topic-regex": f"{topic_name}-.*"}],
        "discovery": {"interval-ms": SYNC_MS},
    }
    config.write_text(yaml.safe_dump(document))

    def landed(topic: str, ends: dict[int, int]) -> bool:
        return all(target.next_offset(topic, p) == end for p, end in ends.items())

    with MirrorRun(config, tmp_path / "mirror.log") as run:
        run.wait_until(lambda: landed(plain, {0: 300, 1: 300}) and landed(compacted, {0: 200}), 120, "the backlog")
        assert partition_count(destination, plain) == 2 and partition_count(destination, compacted) == 1
        copied = topic_configs(destination, plain)
        assert copied.get("retention.ms") == "315360000000" and copied.get("max.message.bytes") == "2000000"
        assert "segment.bytes" not in copied, "not on the allow list: the destination keeps its own"
        assert topic_configs(destination, compacted).get("cleanup.policy") == "compact"
        assert run.events("destination topic created"), run.tail()

        add_partitions(kafka.bootstrap, plain, 3)
        produce(kafka.bootstrap, plain, 2, generate_records(150, seed=2))
        run.wait_until(lambda: landed(plain, {2: 150}), 120, "the new partition to be mirrored")
        assert partition_count(destination, plain) == 3

        set_topic_config(kafka.bootstrap, plain, "retention.ms", "630720000000")
        run.wait_until(
            lambda: topic_configs(destination, plain).get("retention.ms") == "630720000000",
            SYNC_MS / 1000 * 3 + 10,
            "the changed retention.ms at the destination",
        )
        run.drain()
    assert watermarks(destination, plain, 2)[1] >= 150
    assert_exactly_once(kafka.bootstrap, target, plain, 3)
    assert_exactly_once(kafka.bootstrap, target, compacted, 1)


def as_source(record: ConsumedRecord, renumbered: bool) -> SourceRecord:
    """A destination record as the source record it copies (renumber: offset from its header, header dropped)."""
    if not renumbered:
        return SourceRecord(record.offset, record.key, record.value, list(record.headers), record.timestamp_ms)
    (offset,) = [v for k, v in record.headers if k == SOURCE_OFFSET_HEADER]
    assert offset is not None
    headers = [(k, v) for k, v in record.headers if k not in (SOURCE_OFFSET_HEADER, SOURCE_CLUSTER_HEADER)]
    return SourceRecord(int(offset), record.key, record.value, headers, record.timestamp_ms)


@pytest.mark.parametrize("offsets", ["preserve", "renumber"])
def test_a_consumer_group_moves_to_the_destination_and_reads_exactly_what_it_had_not(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    destination = kafka_destination_broker.bootstrap
    topic, group, active = topic_name, f"{topic_name}-app", f"{topic_name}-busy"
    create_topic(kafka.bootstrap, topic, partitions=2)
    if offsets == "renumber":  # partition 0: transactions, the second one aborted; the group commits inside the third
        batches = [(generate_records(100, seed=10 + i), i != 1) for i in range(3)]
        produce_transactional(kafka.bootstrap, topic, 0, batches)
        committed = {0: 250, 1: 37}  # offsets 0-99 + marker, 101-200 aborted + marker, 202-301 + marker
    else:
        produce(kafka.bootstrap, topic, 0, generate_records(300, seed=10))
        committed = {0: 150, 1: 37}
    produce(kafka.bootstrap, topic, 1, generate_records(80, seed=11))
    for partition, offset in committed.items():
        commit_offset(kafka.bootstrap, group, topic, partition, offset)
        commit_offset(kafka.bootstrap, active, topic, partition, offset)
    # A consumer of `active` is already at work on the destination: the sync must leave that group alone.
    busy = Consumer(
        {"bootstrap.servers": destination, "group.id": active, "logger": RDKAFKA_LOGGER, "enable.auto.commit": False}
    )
    target = KafkaTarget(
        destination,
        offsets,
        **{"create-topics": True, "sync-groups": {"groups": [f"{topic_name}-.*"], "interval-ms": 500}},
    )
    config = tmp_path / "mirror.yaml"
    document = {
        "destination": target.config(),
        "clusters": {"source": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS}},
        "mirrors": [{"name": "app", "cluster": "source", "topics": [topic]}],
    }
    config.write_text(yaml.safe_dump(document))
    source_end = {p: watermarks(kafka.bootstrap, topic, p)[1] for p in range(2)}
    try:
        with MirrorRun(config, tmp_path / "mirror.log") as run:
            run.wait_until(lambda: partition_count(destination, topic) == 2, 60, "the destination topic")
            busy.subscribe([topic])
            run.wait_until(lambda: busy.poll(0.2) is None and bool(busy.assignment()), 60, "the busy consumer's join")
            run.wait_until(
                lambda: all(target.next_offset(topic, p) == end for p, end in source_end.items()), 120, "the backlog"
            )
            # A sync that starts after the copy is complete moves the group to exactly where it was.
            started = len(run.events("group offsets synced"))
            run.wait_until(lambda: len(run.events("group offsets synced")) >= started + 2, 60, "two syncs")
            run.drain()
        assert all(committed_offset(destination, active, topic, p) is None for p in range(2)), "busy group moved"
        assert any(e.get("skipped_active") == "1" for e in run.events("group offsets synced")), run.tail()
    finally:
        busy.close()
    for partition, offset in committed.items():
        moved = [as_source(r, offsets == "renumber") for r in consume_as_group(destination, group, topic, partition)]
        rest = [r for r in source_records(kafka.bootstrap, topic, partition) if r.offset >= offset]
        assert rest, "the group had records left to read"
        assert_same_records(moved, rest)


def test_two_way_renumber_mirrors_copy_each_record_once_and_never_back(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    """A -> B and B -> A on the same topic with producers on both sides: each side ends with its own records and
    one copy of the other's, none copied back."""
    a, b, topic = kafka.bootstrap, kafka_destination_broker.bootstrap, topic_name
    for cluster in (a, b):
        create_topic(cluster, topic)
    produce(a, topic, 0, generate_records(200, seed=21))
    produce(b, topic, 0, generate_records(150, seed=22))

    def config(name: str, source: str, destination: str) -> Path:
        document = {
            "destination": KafkaTarget(destination, "renumber").config(),
            "clusters": {name: {"bootstrap-servers": source, **SOURCE_DEFAULTS}},
            "mirrors": [{"name": name, "cluster": name, "topic": topic, "partition": 0}],
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(document))
        return path

    to_b, to_a = config("a", a, b), config("b", b, a)

    def caught_up() -> bool:  # each mirror's position (on the other side) is its source's end
        return committed_offset(b, f"mirror-v3.{topic}", topic, 0) == watermarks(a, topic, 0)[1] and (
            committed_offset(a, f"mirror-v3.{topic}", topic, 0) == watermarks(b, topic, 0)[1]
        )

    with MirrorRun(to_b, tmp_path / "a-to-b.log") as forward, MirrorRun(to_a, tmp_path / "b-to-a.log") as back:
        forward.wait_for_log(r"msg=flushed", timeout=120)
        produce(a, topic, 0, generate_records(100, seed=23))  # while both run
        produce(b, topic, 0, generate_records(100, seed=24))
        forward.wait_until(caught_up, 120, "both directions to catch up")
        forward.drain()
        back.drain()
    assert caught_up()

    def copied(headers: list[tuple[str, bytes | None]]) -> bool:
        return any(k == SOURCE_CLUSTER_HEADER for k, _ in headers)

    def natives(cluster: str) -> list[SourceRecord]:
        return [r for r in source_records(cluster, topic, 0) if not copied(r.headers)]

    def copies(cluster: str) -> list[SourceRecord]:
        found = []
        for record in consume_all(cluster, topic, 0):
            if copied(record.headers):
                found.append(as_source(record, renumbered=True))
        return found

    assert len(natives(a)) == 300 and len(natives(b)) == 250
    assert_same_records(copies(b), natives(a))  # every record of A once on B, none of B's own come back
    assert_same_records(copies(a), natives(b))
    # B's own records are in the destination topic too: without the flag they count as extra.
    verified = run_cli("verify", "--config", str(to_b), "--ignore-unmapped", timeout=300)
    assert verified.returncode == 0, verified.stdout + verified.stderr
