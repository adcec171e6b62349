"""commit-source-offsets: positions coalesced per group, a refused commit retried with the newest positions."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from config.model import SourceConfig
from kafka_clients.admin import AdminRequestError
from supervisor.source_commits import CommitGroup, SourceOffsetCommitter
from telemetry.metrics import MetricFamilies

SOURCE = SourceConfig(bootstrap_servers="k:9092")
GROUP = CommitGroup("prod", "mirror-v3.orders", SOURCE, "clusters.prod")


class FakeAdmin:
    def __init__(self) -> None:
        self.commits: list[tuple[str, dict[tuple[str, int], int]]] = []
        self.refuse: str | None = None

    def get(self, source: SourceConfig, field: str) -> FakeAdmin:
        assert (source, field) == (SOURCE, "clusters.prod")
        return self

    async def commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        if self.refuse is not None:
            raise AdminRequestError("k:9092", f"group {group!r}", "commit offsets of", self.refuse)
        self.commits.append((group, dict(offsets)))


def counter(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name, {"source_cluster": "prod"})


async def test_positions_noted_between_rounds_travel_in_one_request_per_group() -> None:
    registry, admin = CollectorRegistry(), FakeAdmin()
    committer = SourceOffsetCommitter(admin, MetricFamilies(registry))
    committer.durable(GROUP, "orders", 0, 100)
    committer.durable(GROUP, "orders", 1, 50)
    committer.durable(GROUP, "orders", 0, 180)  # the newest position of a partition wins
    assert await committer.commit_pending()
    assert admin.commits == [("mirror-v3.orders", {("orders", 0): 180, ("orders", 1): 50})]
    assert counter(registry, "mirror_v3_source_offset_commits_total") == 2
    assert await committer.commit_pending() and len(admin.commits) == 1  # nothing new: no request


async def test_a_refused_commit_warns_once_and_is_retried_with_the_newest_positions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry, admin = CollectorRegistry(), FakeAdmin()
    committer = SourceOffsetCommitter(admin, MetricFamilies(registry))
    admin.refuse = "NON_EMPTY_GROUP: the group has members"
    committer.durable(GROUP, "orders", 0, 100)
    committer.durable(GROUP, "orders", 1, 10)
    with caplog.at_level(logging.INFO, logger="mirror_v3.source_commits"):
        assert not await committer.commit_pending()
        committer.durable(GROUP, "orders", 0, 150)  # arrived after the failed round: newer than the kept one
        assert not await committer.commit_pending()
        admin.refuse = None
        assert await committer.commit_pending()
    assert admin.commits == [("mirror-v3.orders", {("orders", 0): 150, ("orders", 1): 10})]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert getattr(warnings[0], "mirror_v3_fields", {}).get("error") == "NON_EMPTY_GROUP: the group has members"
    assert any("work again" in r.getMessage() for r in caplog.records)
    assert counter(registry, "mirror_v3_source_offset_commit_failures_total") == 2
