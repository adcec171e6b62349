"""Group offset sync against in-memory clusters: which groups move, to which offsets (capped by the mirror's
position, translated in renumber mode), and which are left alone (members on the destination, already ahead)."""

from __future__ import annotations

from typing import Any, Literal

from prometheus_client import CollectorRegistry

from config.model import GroupSyncConfig, KafkaDestination, SourceConfig
from supervisor.group_sync import GroupSync
from supervisor.process_service import MirroredPartition
from telemetry.metrics import MetricFamilies

SOURCE = SourceConfig(bootstrap_servers="a:9092")


class FakeAdmin:
    def __init__(self, offsets: dict[str, dict[tuple[str, int], int]], members: frozenset[str] = frozenset()):
        self.offsets, self.members = offsets, members
        self.commits: list[tuple[str, dict[tuple[str, int], int]]] = []

    async def groups(self) -> list[str]:
        return sorted(self.offsets)

    async def group_has_members(self, group: str) -> bool:
        return group in self.members

    async def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return dict(self.offsets.get(group, {}))

    async def commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.commits.append((group, offsets))
        self.offsets.setdefault(group, {}).update(offsets)


def group_sync(
    mode: Literal["preserve", "renumber"], source: FakeAdmin, destination: FakeAdmin, **settings: Any
) -> tuple[GroupSync, Any]:
    config = KafkaDestination(bootstrap_servers="b:9092", offsets=mode, sync_groups=GroupSyncConfig(**settings))
    registry = CollectorRegistry()
    sync = GroupSync(config, MetricFamilies(registry))
    sync._admin = destination  # type: ignore[assignment]
    sync._sources.admins[("a:9092", "clusters.a")] = source  # type: ignore[assignment]
    return sync, registry


def mirrored(partition: int, position: int) -> MirroredPartition:
    return MirroredPartition("a", SOURCE, "clusters.a", "orders", partition, "orders-copy", position)


async def test_preserve_moves_selected_groups_capped_by_the_position_and_never_back() -> None:
    source = FakeAdmin(
        {
            "app": {("orders", 0): 40, ("orders", 1): 90, ("other", 0): 5},
            "busy": {("orders", 0): 10},
            "ahead": {("orders", 0): 30},
            "skipped-by-regex": {("orders", 0): 1},
        }
    )
    destination = FakeAdmin({"ahead": {("orders-copy", 0): 35}}, members=frozenset({"busy"}))
    sync, registry = group_sync("preserve", source, destination, groups=[".*"], groups_exclude=["skipped-.*"])
    done = await sync.sync_once([mirrored(0, 50), mirrored(1, 60)])
    # app: partition 0 at its commit, partition 1 capped at the mirror's position; `other` is not mirrored.
    assert destination.commits == [("app", {("orders-copy", 0): 40, ("orders-copy", 1): 60})]
    result = done["a"]
    assert (result.groups, result.synced, result.skipped, result.offsets) == (3, 1, 1, 2)
    assert registry.get_sample_value("mirror_v3_group_sync_offsets_total", {"source_cluster": "a"}) == 2
    assert registry.get_sample_value("mirror_v3_group_sync_skipped_groups", {"source_cluster": "a"}) == 1
    await sync.sync_once([mirrored(0, 50), mirrored(1, 60)])
    assert len(destination.commits) == 1  # nothing changed: nothing written again


async def test_renumber_writes_the_translated_offset() -> None:
    source = FakeAdmin({"app": {("orders", 0): 40}})
    destination = FakeAdmin({})
    sync, _ = group_sync("renumber", source, destination, groups=["app"])
    asked: list[tuple[str, int, int]] = []

    async def translate(topic: str, partition: int, source_offset: int) -> int:
        asked.append((topic, partition, source_offset))
        return source_offset + 1000

    sync._translate = translate  # type: ignore[method-assign]
    await sync.sync_once([mirrored(0, 30)])
    assert asked == [("orders-copy", 0, 30)]  # capped first, then translated
    assert destination.commits == [("app", {("orders-copy", 0): 1030})]
