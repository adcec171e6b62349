"""A restore's destination topics from the archive's topic metadata: created as archived (partitions, the allowed
configs), made from the chains alone when nothing was archived, and an existing topic's differences reported."""

from __future__ import annotations

from commands.restore_topics import RestoredTopic, TopicPlan, plan_restored_topic
from kafka_clients.admin import TopicState
from sinks.archive.documents import moment_text
from sinks.archive.topic_metadata import ArchivedTopic

ALLOWED = ("cleanup.policy", "retention.ms", "max.message.bytes")
METADATA = ArchivedTopic(
    source_cluster="prod",
    source_topic="orders",
    seen_at=moment_text(1_000),
    seen_at_ms=1_000,
    partitions=6,
    replication_factor=3,
    topic_id="t-1",
    cleanup_policy="compact",
    configs={"cleanup.policy": "compact", "retention.ms": "86400000", "segment.bytes": "1048576"},
)


def restored(metadata: ArchivedTopic | None = METADATA, needed: int = 2) -> RestoredTopic:
    return RestoredTopic("orders-back", "orders", needed, metadata)


def test_a_missing_topic_is_created_as_archived_with_the_allowed_configs() -> None:
    plan = plan_restored_topic(restored(), None, ALLOWED, create=True)
    assert plan == TopicPlan(TopicState(6, {"cleanup.policy": "compact", "retention.ms": "86400000"}, "compact"), ())
    # Chains of more partitions than the newest document says (partitions added since) make it larger.
    assert plan_restored_topic(restored(needed=8), None, ALLOWED, create=True).create == TopicState(
        8, {"cleanup.policy": "compact", "retention.ms": "86400000"}, "compact"
    )
    assert plan_restored_topic(restored(), None, ALLOWED, create=False) == TopicPlan(None, ())


def test_without_archived_metadata_the_chains_decide_and_it_is_said() -> None:
    plan = plan_restored_topic(restored(None, needed=4), None, ALLOWED, create=True)
    assert plan.create == TopicState(4) and "no topic metadata archived for 'orders'" in plan.problems[0]


def test_an_existing_topic_is_compared_with_the_archive() -> None:
    same = TopicState(6, {"cleanup.policy": "compact", "retention.ms": "86400000"}, "compact")
    assert plan_restored_topic(restored(), same, ALLOWED, create=True) == TopicPlan(None, ())
    other = TopicState(3, {"retention.ms": "1000", "max.message.bytes": "2000000"}, "delete")
    assert plan_restored_topic(restored(), other, ALLOWED, create=True).problems == (
        "3 partitions, the archived topic 6",
        "cleanup.policy delete, archived compact",
        "max.message.bytes 2000000, archived (default)",
        "retention.ms 1000, archived 86400000",
    )
