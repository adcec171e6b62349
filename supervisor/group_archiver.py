"""Consumer-group positions into the blob archive (`sinks.archive.group_positions`, `destination.archive-groups`).

Every `interval-ms`, per source cluster of the running mirrors: the selected groups (one ListGroups), each one's
committed offsets (one OffsetFetch per group), kept for the partitions this process archives, next to how far the
archive is durable on each of them. A document is added when a position changed since the archive's newest (read
from the archive once per process, then remembered). A failed round is one WARN per cluster and spell, tried again
at the next interval; it never stops a mirror.

Cost at idle: one ListGroups and one OffsetFetch per selected group per source cluster and interval; a write only
when a group committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio
from anyio.abc import TaskStatus

from config.model import ArchiveGroupsConfig
from core.errors import MirrorV3Error, first_line
from core.logs import SpellLog, log_event
from kafka_clients.admin import SourceAdmins
from sinks.archive import group_positions
from sinks.archive.documents import ArchiveDocuments, moment_text
from sinks.archive.group_positions import ArchivedPositions, Offsets
from supervisor.process_service import MirroredPartition, ProcessService, RunningProcess

log = logging.getLogger("mirror_v3.groups")


class GroupArchiver(ProcessService):
    name = "group positions archive"

    def __init__(
        self,
        store: ArchiveDocuments,
        admins: SourceAdmins,
        settings: ArchiveGroupsConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._admins = admins
        self._settings = settings
        self._clock = clock
        self._archived: dict[str, ArchivedPositions | None] = {}  # cluster → its newest document (read once)
        self._spells = SpellLog(log, "group positions not archived, retrying", "group positions archived again")

    async def close(self) -> None:
        await self._store.close()

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        try:
            await self.run_forever(process.mirrored, process.stop_requested)
        finally:
            with anyio.CancelScope(shield=True):
                await self.close()

    async def run_forever(self, mirrored: Callable[[], Sequence[MirroredPartition]], stop: anyio.Event) -> None:
        """A round every interval, the first as soon as mirrors run (they start in seconds), and a last one when
        the process is asked to stop (a drain), so the newest positions are in the archive it leaves behind."""
        interval = self._settings.interval_ms / 1000
        while True:
            running = mirrored()
            if running:
                await self.capture(running)
            with anyio.move_on_after(interval if running else min(1.0, interval)):
                await stop.wait()
            if stop.is_set():
                await self.capture(mirrored())
                return

    async def capture(self, mirrored: Sequence[MirroredPartition]) -> None:
        """One round over the source clusters of `mirrored` (the running mirrors and their archive positions)."""
        by_cluster: dict[str, list[MirroredPartition]] = {}
        for partition in mirrored:
            by_cluster.setdefault(partition.cluster, []).append(partition)
        for cluster, partitions in sorted(by_cluster.items()):
            try:
                await self._capture_cluster(cluster, partitions)
            except MirrorV3Error as exc:
                self._spells.failed(cluster, error=first_line(exc), retry_in_s=self._settings.interval_ms / 1000)
                continue
            self._spells.worked(cluster)

    async def _capture_cluster(self, cluster: str, partitions: list[MirroredPartition]) -> None:
        first = partitions[0]
        admin = self._admins.get(first.source, first.source_field)
        archived_as = {(p.topic, p.partition): p.destination_topic for p in partitions}
        archived: Offsets = {}
        for p in partitions:
            archived.setdefault(p.destination_topic, {})[str(p.partition)] = p.position
        groups: dict[str, Offsets] = {}
        for group in [g for g in await admin.groups() if self._settings.selects(g)]:
            kept: Offsets = {}
            for (topic, partition), offset in sorted((await admin.group_offsets(group)).items()):
                name = archived_as.get((topic, partition))
                if name is not None:
                    kept.setdefault(name, {})[str(partition)] = offset
            if kept:
                groups[group] = kept
        now_ms = int(self._clock() * 1000)
        seen = ArchivedPositions(cluster, moment_text(now_ms), now_ms, groups, archived)
        if cluster not in self._archived:
            self._archived[cluster] = await group_positions.newest(self._store, cluster)
        known = self._archived[cluster]
        if known is not None and seen.same_positions(known):
            return
        await group_positions.add(self._store, seen)
        self._archived[cluster] = seen
        log_event(
            log,
            logging.INFO,
            "group positions archived",
            source_cluster=cluster,
            groups=len(groups),
            partitions=sum(len(offsets) for kept in groups.values() for offsets in kept.values()),
        )
