"""`source.commit-source-offsets`: each mirror's durable position, committed to a consumer group on its source
cluster, so that the consumer-group lag tools of an estate (Burrow, kafka_exporter, kafka-lag-exporter,
Redpanda Console) see mirror-v3 like any other consumer.

Informational only: a restart still takes its position from the destination, never from these offsets, so
a commit that is late, lost or refused changes nothing that is mirrored. That is why commits are
coalesced (one request per group and second, however many mirrors flush) and why a failure is a WARN,
counted and retried with the next positions, never an error of a mirror.

The commit is an AlterConsumerGroupOffsets, which the broker accepts only for a group without members:
a group some application consumes with is refused (and named in the WARN).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Protocol

import anyio
from anyio.abc import TaskStatus

from config.model import SourceConfig
from core.logs import log_event
from kafka_clients.admin import AdminRequestError
from supervisor.process_service import ProcessService, RunningProcess
from telemetry.metrics import MetricFamilies

log = logging.getLogger("mirror_v3.source_commits")
COALESCE_SECONDS = 1.0
DRAINED_COMMIT_S = 5.0  # the drain's last commits wait for the source this long at most
RETRY_SECONDS = 30.0  # after a failed commit: a group that has members stays refused until they leave


@dataclass(frozen=True)
class CommitGroup:
    """A group on one source cluster: `cluster` is its name in the config (with `group`, the identity), `source`
    and `field` reach it."""

    cluster: str
    group: str
    source: SourceConfig = dataclasses.field(compare=False)
    field: str = dataclasses.field(compare=False)


class GroupCommits(Protocol):
    async def commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None: ...


class ClusterAdmins(Protocol):
    """`kafka_clients.admin.SourceAdmins`: the admin client of a source cluster."""

    def get(self, source: SourceConfig, field: str) -> GroupCommits: ...


class SourceOffsetCommitter(ProcessService):
    name = "source offset commits"

    def __init__(self, admins: ClusterAdmins, families: MetricFamilies) -> None:
        self._admins = admins
        self._families = families
        self._pending: dict[CommitGroup, dict[tuple[str, int], int]] = {}
        self._wake = anyio.Event()
        self._failing: set[CommitGroup] = set()  # groups whose last commit failed (WARN once per failing spell)

    def durable(self, group: CommitGroup, topic: str, partition: int, position: int) -> None:
        """A mirror's destination holds everything below `position` now (called after each commit)."""
        self._pending.setdefault(group, {})[(topic, partition)] = position
        self._wake.set()

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await self.run_forever()

    async def drained(self) -> None:
        """The positions of the drain's last commits, if the source answers within DRAINED_COMMIT_S."""
        with anyio.move_on_after(DRAINED_COMMIT_S):
            await self.commit_pending()

    async def run_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = anyio.Event()
            await anyio.sleep(COALESCE_SECONDS)  # let the mirrors that flush about now share the request
            if not await self.commit_pending():
                await anyio.sleep(RETRY_SECONDS)
                self._wake.set()

    async def commit_pending(self) -> bool:
        """One commit per group of the positions noted since the last; a failed group's positions are kept for
        the next round unless newer ones arrived meanwhile. False when a group failed."""
        pending, self._pending = self._pending, {}
        ok = True
        for group, offsets in pending.items():
            try:
                await self._admins.get(group.source, group.field).commit_group_offsets(group.group, offsets)
            except AdminRequestError as exc:
                ok = False
                self._families.source_commit_failures.labels(source_cluster=group.cluster).inc()
                newer = self._pending.setdefault(group, {})
                for key, position in offsets.items():
                    newer.setdefault(key, position)
                if group not in self._failing:
                    self._failing.add(group)
                    log_event(
                        log,
                        logging.WARNING,
                        "committing the mirrors' positions to the source group failed, retrying with the next ones",
                        source_cluster=group.cluster,
                        group=group.group,
                        error=exc.reason,
                        note="informational only: the destination still decides where mirrors continue",
                    )
                continue
            self._families.source_commits.labels(source_cluster=group.cluster).inc(len(offsets))
            if group in self._failing:
                self._failing.discard(group)
                back = {"source_cluster": group.cluster, "group": group.group}
                log_event(log, logging.INFO, "source group commits work again", **back)
        return ok
