"""The topic archiver: a document when a topic is first seen and whenever it changes, none when nothing did; a
failing cluster is one WARN and is tried again."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from config.estate import MirrorSpec
from config.model import FlushConfig, SourceConfig
from core.errors import MirrorV3Error
from kafka_clients.admin import TopicLayout
from sinks.archive.topic_metadata import history
from sinks.filesystem.documents import FilesystemDocuments
from supervisor.topic_archiver import TopicArchiver

LAYOUT = TopicLayout(
    partitions=3, replication_factor=1, topic_id="id-1", configs={"retention.ms": "1000"}, cleanup_policy="delete"
)


class FakeAdmin:
    def __init__(self) -> None:
        self.topics = {"orders": LAYOUT}
        self.failing: str | None = None

    async def layouts(self, topics: Sequence[str]) -> dict[str, TopicLayout]:
        if self.failing:
            raise MirrorV3Error(self.failing)
        return {t: self.topics[t] for t in topics if t in self.topics}


class FakeAdmins:
    def __init__(self, admin: FakeAdmin) -> None:
        self.admin = admin

    def get(self, source: object, field: str) -> FakeAdmin:
        return self.admin


def spec(topic: str, partition: int) -> MirrorSpec:
    source = SourceConfig(bootstrap_servers="k:9092")
    return MirrorSpec(
        f"{topic}-{partition}", 0, "prod", source, "clusters.prod", topic, partition, topic, FlushConfig()
    )


async def test_a_topic_is_archived_when_first_seen_and_again_only_when_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, admin, now = FilesystemDocuments(tmp_path), FakeAdmin(), [1_700_000_000.0]
    archiver = TopicArchiver(store, FakeAdmins(admin), 60, clock=lambda: now[0])  # type: ignore[arg-type]
    archiver.watch([spec("orders", 0), spec("orders", 1), spec("gone", 0)])  # gone: no such topic at the source
    with caplog.at_level(logging.INFO, logger="mirror_v3.topics"):
        await archiver.capture()
        now[0] += 60
        await archiver.capture()  # nothing changed
        admin.topics["orders"] = replace(LAYOUT, partitions=6, configs={"retention.ms": "2000"})
        now[0] += 60
        await archiver.capture()
    documents = await history(store, "orders")
    assert [(d.partitions, d.configs, d.seen_at_ms) for d in documents] == [
        (3, {"retention.ms": "1000"}, 1_700_000_000_000),
        (6, {"retention.ms": "2000"}, 1_700_000_120_000),
    ]
    assert await history(store, "gone") == []
    changes = [r.mirror_v3_fields["change"] for r in caplog.records]  # type: ignore[attr-defined]
    assert changes == ["first", "partitions,retention.ms"]
    # A new process reads the archive's newest document once and adds nothing while the topic stays the same.
    again = TopicArchiver(store, FakeAdmins(admin), 60, clock=lambda: now[0] + 600)  # type: ignore[arg-type]
    again.watch([spec("orders", 0)])
    await again.capture()
    assert len(await history(store, "orders")) == 2


async def test_a_cluster_that_cannot_be_read_is_one_warning_and_is_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, admin = FilesystemDocuments(tmp_path), FakeAdmin()
    archiver = TopicArchiver(store, FakeAdmins(admin), 60)  # type: ignore[arg-type]
    archiver.watch([spec("orders", 0)])
    admin.failing = "describe topic 'orders' on k:9092: no answer within 30s"
    with caplog.at_level(logging.INFO, logger="mirror_v3.topics"):
        await archiver.capture()
        await archiver.capture()
        admin.failing = None
        await archiver.capture()
    messages = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert messages == [
        ("WARNING", "topic metadata not archived, retrying"),
        ("INFO", "topic metadata archived"),
        ("INFO", "topic metadata archived again"),
    ]
    assert len(await history(store, "orders")) == 1
