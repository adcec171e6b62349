"""What create-topics decides for one destination topic: create like the source, grow only when in step (or
allowed), follow allow-listed configs, report what it must not change."""

from __future__ import annotations

from config.model import DEFAULT_TOPIC_CONFIGS
from kafka_clients.admin import TopicState
from supervisor.topic_plan import TopicActions, plan_topic

ALLOWED = DEFAULT_TOPIC_CONFIGS
SOURCE = TopicState(4, {"retention.ms": "100", "segment.bytes": "1000", "cleanup.policy": "compact"}, "compact")


def plan(destination: TopicState | None, *, in_step_at: int | None = None, add: bool = False) -> TopicActions:
    return plan_topic("t", SOURCE, destination, ALLOWED, in_step_at=in_step_at, add_partitions=add, sync_configs=True)


def test_a_missing_topic_is_created_with_the_partitions_and_allowed_configs_of_its_source() -> None:
    created = plan(None).create
    assert created == TopicState(4, {"retention.ms": "100", "cleanup.policy": "compact"}, "compact")


def test_partitions_are_added_only_when_in_step_before_or_allowed() -> None:
    behind = TopicState(3, {"retention.ms": "100"}, "compact")
    refused = plan(behind)
    assert refused.partitions_to is None and not refused.changes
    assert refused.problems == (
        "destination topic 't' has 3 partitions, its source 4: partition 3 cannot be mirrored "
        "(set add-partitions: true, or add them)",
    )
    assert plan(behind, in_step_at=3).partitions_to == 4  # the source grew while this process watched
    assert plan(behind, add=True).partitions_to == 4
    assert plan(TopicState(6, {"retention.ms": "100"}, "compact")).partitions_to is None  # more is fine


def test_allowed_configs_follow_the_source_and_a_different_cleanup_policy_is_only_reported() -> None:
    destination = TopicState(4, {"retention.ms": "50", "max.message.bytes": "9", "segment.bytes": "7"}, "delete")
    actions = plan(destination)
    assert actions.set_configs == {"retention.ms": "100"}
    assert actions.delete_configs == ("max.message.bytes",)  # the source no longer sets it
    assert actions.problems == ("destination topic 't' has cleanup.policy delete, its source compact: not changed",)
    in_sync = plan(TopicState(4, {"retention.ms": "100", "cleanup.policy": "compact"}, "compact"))
    assert not in_sync.changes and not in_sync.problems
