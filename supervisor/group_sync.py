"""Consumer-group offset sync (`destination.sync-groups`): the committed offsets of source groups, for the
partitions this process mirrors, written to the same groups on the destination so that consumers can move there
and continue exactly where they were.

Per group and mirrored partition, every interval:
- the source offset is the group's committed offset, but never beyond the mirror's position (the next source
  offset the destination durably holds): a consumer moved there must not skip a record still on its way;
- preserve mode writes it unchanged (offsets are the same on both sides); renumber mode writes the destination
  offset of the first record whose `mirror-v3.source-offset` is at or above it
  (`sinks.kafka.sink.destination_offset_for`, a search guided by the records it finds), or the partition's end
  when every record below it is there;
- a group with members on the destination is left alone (its consumers own its offsets there), and a partition
  whose destination offset is already at or beyond the target is not moved back.

With the source's producers stopped and the mirror caught up, a consumer group moved this way reads exactly the
records it had not read: none missed, none twice. A failure is a WARN and a metric, and is tried again at the
next interval.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio
from aiokafka import TopicPartition
from anyio.abc import TaskStatus

from config.model import KafkaDestination
from core.describe import describe_error
from core.logs import log_event
from kafka_clients.admin import AdminRequestError, ClusterAdmin, SourceAdmins, destination_admin
from kafka_clients.clients import KafkaClients
from kafka_clients.settings import cluster_access
from sinks.kafka.sink import destination_offset_for
from supervisor.process_service import MirroredPartition, ProcessService, RunningProcess
from telemetry.metrics import MetricFamilies

log = logging.getLogger("mirror_v3.groups")


@dataclass
class ClusterSync:
    """What one round did for one source cluster."""

    groups: int = 0  # groups with offsets of mirrored partitions
    synced: int = 0  # groups whose offsets were written
    skipped: int = 0  # groups with members on the destination
    offsets: int = 0  # (group, partition) offsets written
    failures: list[str] = field(default_factory=list)


def source_offsets(
    committed: dict[tuple[str, int], int], mirrored: dict[tuple[str, int], MirroredPartition]
) -> dict[tuple[str, int], int]:
    """The source offset to move each mirrored partition of a group to: its commit, capped by the position."""
    return {tp: min(offset, mirrored[tp].position) for tp, offset in committed.items() if tp in mirrored}


class GroupSync(ProcessService):
    name = "group offset sync"

    def __init__(self, destination: KafkaDestination, families: MetricFamilies) -> None:
        assert destination.sync_groups is not None
        self._settings = destination.sync_groups
        self._mode = destination.offsets
        self._timeout_s = destination.request_timeout_ms / 1000
        self._families = families
        self._admin = destination_admin(destination)
        self._clients = KafkaClients(
            destination.bootstrap_servers,
            cluster_access(destination, "destination").aiokafka(),
            destination.request_timeout_ms,
        )
        self._sources = SourceAdmins(self._timeout_s)

    def selects(self, group: str) -> bool:
        return self._settings.selects(group)

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await self.run_forever(process.mirrored, process.stop_requested)

    async def run_forever(self, mirrored: Callable[[], Sequence[MirroredPartition]], stop: anyio.Event) -> None:
        interval = self._settings.interval_ms / 1000
        while not stop.is_set():
            try:
                await self.sync_once(mirrored())
            except Exception as exc:  # a helper of the mirrors: it never takes them down; tried again next time
                log_event(log, logging.WARNING, "group offset sync failed, retrying", error=describe_error(exc))
            with anyio.move_on_after(interval):
                await stop.wait()

    async def sync_once(self, mirrored: Sequence[MirroredPartition]) -> dict[str, ClusterSync]:
        by_cluster: dict[str, dict[tuple[str, int], MirroredPartition]] = {}
        for part in mirrored:
            by_cluster.setdefault(part.cluster, {})[(part.topic, part.partition)] = part
        done = {}
        for cluster, partitions in sorted(by_cluster.items()):
            done[cluster] = result = await self._sync_cluster(partitions)
            self._families.group_sync_groups.labels(source_cluster=cluster).set(result.synced)
            self._families.group_sync_skipped.labels(source_cluster=cluster).set(result.skipped)
            self._families.group_sync_offsets.labels(source_cluster=cluster).inc(result.offsets)
            self._families.group_sync_failures.labels(source_cluster=cluster).inc(len(result.failures))
            self._families.group_sync_last.labels(source_cluster=cluster).set(time.time())
            for failure in result.failures:
                failing = {"source_cluster": cluster, "error": failure}
                log_event(log, logging.WARNING, "group offsets not synced, retrying", **failing)
            log_event(
                log,
                logging.INFO,
                "group offsets synced",
                source_cluster=cluster,
                groups=result.groups,
                synced=result.synced,
                skipped_active=result.skipped,
                offsets=result.offsets,
                failures=len(result.failures),
            )
        return done

    async def _sync_cluster(self, partitions: dict[tuple[str, int], MirroredPartition]) -> ClusterSync:
        result = ClusterSync()
        any_part = next(iter(partitions.values()))
        source = self._sources.get(any_part.source, any_part.source_field)
        try:
            groups = [group for group in await source.groups() if self.selects(group)]
        except AdminRequestError as exc:
            result.failures.append(str(exc))
            return result
        for group in groups:
            try:
                await self._sync_group(group, source, partitions, result)
            except AdminRequestError as exc:
                result.failures.append(str(exc))
        return result

    async def _sync_group(
        self,
        group: str,
        source: ClusterAdmin,
        partitions: dict[tuple[str, int], MirroredPartition],
        result: ClusterSync,
    ) -> None:
        wanted = source_offsets(await source.group_offsets(group), partitions)
        if not wanted:
            return
        result.groups += 1
        if await self._admin.group_has_members(group):
            result.skipped += 1
            log_event(log, logging.DEBUG, "group has members on the destination: left alone", group=group)
            return
        current = await self._admin.group_offsets(group)
        targets: dict[tuple[str, int], int] = {}
        for (topic, partition), offset in sorted(wanted.items()):
            destination_topic = partitions[(topic, partition)].destination_topic
            try:
                target = await self._translate(destination_topic, partition, offset)
            except Exception as exc:  # a read of the destination failed: this partition waits for the next round
                result.failures.append(f"group {group!r} {topic}-{partition} at {offset}: {exc}")
                continue
            if current.get((destination_topic, partition), -1) < target:
                targets[(destination_topic, partition)] = target
        if not targets:
            return
        await self._admin.commit_group_offsets(group, targets)
        result.synced += 1
        result.offsets += len(targets)
        log_event(
            log,
            logging.DEBUG,
            "group offsets written",
            group=group,
            offsets=",".join(f"{t}-{p}@{o}" for (t, p), o in sorted(targets.items())),
        )

    async def _translate(self, topic: str, partition: int, source_offset: int) -> int:
        if self._mode == "preserve":
            return source_offset
        return await destination_offset_for(self._clients, TopicPartition(topic, partition), source_offset)
