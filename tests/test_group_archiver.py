"""Consumer-group positions into the archive: the selected groups' offsets on the archived partitions, next to how
far the archive was; a document only when a position changed; a cluster that cannot be read is one WARN."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from config.model import ArchiveGroupsConfig, SourceConfig
from core.errors import MirrorV3Error
from sinks.archive.group_positions import cluster_directory, history
from sinks.filesystem.documents import FilesystemDocuments
from supervisor.group_archiver import GroupArchiver
from supervisor.process_service import MirroredPartition

SOURCE = SourceConfig(bootstrap_servers="k:9092")
SETTINGS = ArchiveGroupsConfig(groups=["billing.*", "audit"], groups_exclude=["billing-test"])


class FakeAdmin:
    def __init__(self) -> None:
        self.committed = {
            "billing": {("orders", 0): 120, ("orders", 1): 80, ("other", 0): 5},  # other: not archived here
            "billing-test": {("orders", 0): 1},  # excluded
            "audit": {("payments", 0): 9},  # nothing archived: left out
            "analytics": {("orders", 0): 100},  # not selected
        }
        self.failing: str | None = None

    async def groups(self) -> list[str]:
        if self.failing:
            raise MirrorV3Error(self.failing)
        return sorted(self.committed)

    async def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        return self.committed[group]


class FakeAdmins:
    def __init__(self, admin: FakeAdmin) -> None:
        self.admin = admin

    def get(self, source: object, field: str) -> FakeAdmin:
        return self.admin


def mirrored(position: int = 150) -> list[MirroredPartition]:
    return [
        MirroredPartition("prod", SOURCE, "clusters.prod", "orders", partition, "orders-archive", position)
        for partition in (0, 1)
    ]


async def test_positions_are_archived_when_they_change(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, admin, now = FilesystemDocuments(tmp_path), FakeAdmin(), [1_700_000_000.0]
    archiver = GroupArchiver(store, FakeAdmins(admin), SETTINGS, clock=lambda: now[0])  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="mirror_v3.groups"):
        await archiver.capture(mirrored())
        now[0] += 60
        await archiver.capture(mirrored(position=160))  # the archive moved on, no group committed: nothing new
        admin.committed["billing"][("orders", 1)] = 95
        now[0] += 60
        await archiver.capture(mirrored(position=170))
    documents = await history(store, "prod")
    assert [d.groups for d in documents] == [
        {"billing": {"orders-archive": {"0": 120, "1": 80}}},
        {"billing": {"orders-archive": {"0": 120, "1": 95}}},
    ]
    assert documents[0].archived == {"orders-archive": {"0": 150, "1": 150}} and documents[1].seen_at_ms == (
        1_700_000_120_000
    )
    assert (tmp_path / cluster_directory("prod")).is_dir()
    assert [r.getMessage() for r in caplog.records] == ["group positions archived"] * 2
    # A new process reads the newest document once, and adds nothing while no group commits.
    again = GroupArchiver(store, FakeAdmins(admin), SETTINGS)  # type: ignore[arg-type]
    await again.capture(mirrored())
    assert len(await history(store, "prod")) == 2


async def test_a_cluster_that_cannot_be_read_is_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, admin = FilesystemDocuments(tmp_path), FakeAdmin()
    archiver = GroupArchiver(store, FakeAdmins(admin), SETTINGS)  # type: ignore[arg-type]
    admin.failing = "list consumer groups on k:9092: no answer within 30s"
    with caplog.at_level(logging.INFO, logger="mirror_v3.groups"):
        await archiver.capture(mirrored())
        await archiver.capture(mirrored())
        admin.failing = None
        await archiver.capture(mirrored())
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "group positions not archived, retrying"),
        ("INFO", "group positions archived"),
        ("INFO", "group positions archived again"),
    ]


def test_a_cluster_named_by_its_bootstrap_servers_is_a_safe_directory() -> None:
    assert cluster_directory("10.0.0.1:9092,10.0.0.2:9092") == "_groups/10.0.0.1_9092_10.0.0.2_9092"


async def test_the_first_round_waits_for_running_mirrors_and_a_drain_takes_a_last_one(tmp_path: Path) -> None:
    store, admin = FilesystemDocuments(tmp_path), FakeAdmin()
    archiver = GroupArchiver(store, FakeAdmins(admin), SETTINGS)  # type: ignore[arg-type]  # interval: a minute
    calls: Iterator[list[MirroredPartition]] = iter([[]])  # no mirror has started yet at the first look

    def running() -> list[MirroredPartition]:
        return next(calls, mirrored())

    stop = anyio.Event()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(archiver.run_forever, running, stop)
        with anyio.fail_after(5):  # a second after the empty look, not a minute
            while not await history(store, "prod"):
                await anyio.sleep(0.05)
        admin.committed["billing"][("orders", 0)] = 130  # committed just before the process is stopped
        stop.set()
    assert [d.groups["billing"]["orders-archive"]["0"] for d in await history(store, "prod")] == [120, 130]
