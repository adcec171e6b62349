"""Kafka -> Kafka as a migration tool, through the real CLI between two real clusters: with `create-topics`, the
destination topics of a regex selection are created like their sources (partition count, allow-listed configs),
follow a partition the source gains, and take a config change within one sync interval; every record lands
exactly once."""

from __future__ import annotations

from pathlib import Path

import yaml

from e2e.harness import SOURCE_DEFAULTS, assert_exactly_once
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    add_partitions,
    compacted_topic_config,
    create_topic,
    generate_records,
    partition_count,
    produce,
    set_topic_config,
    topic_configs,
    watermarks,
)
from testkit.mirror_run import MirrorRun
from testkit.targets import KafkaTarget

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
