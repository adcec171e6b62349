"""`create-topics` on a Kafka destination: the destination topics of the running mirrors made and kept like their
sources (`supervisor.topic_plan` decides, `kafka_clients.admin` acts).

`prepare` runs before mirrors start (at start, and for mirrors discovery adds), so a mirror never meets a
missing topic or partition the source has; `sync_forever` repeats it every `sync-topic-configs-interval-ms`
for configs (and partitions a source gained). A failed admin request is a WARN and is tried again at the next
round: the mirrors of a topic that could not be made fail on their own, naming it.

Which partition counts were in step is remembered in memory only: it decides whether a source's new
partitions are added without `add-partitions`, never what a mirror writes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import anyio
from anyio.abc import TaskStatus

from config.estate import MirrorSpec
from config.model import KafkaDestination
from core.describe import describe_error
from core.logs import log_event
from kafka_clients.admin import AdminRequestError, SourceAdmins, destination_admin
from supervisor.process_service import ProcessService, RunningProcess
from supervisor.topic_plan import TopicActions, plan_topic

log = logging.getLogger("mirror_v3.topics")
CONCURRENT_TOPICS = 8  # admin requests in flight at once: an estate of thousands of topics starts in seconds


class TopicManager(ProcessService):
    name = "destination topics"

    def __init__(self, destination: KafkaDestination) -> None:
        self._settings = destination
        self._timeout_s = destination.request_timeout_ms / 1000
        self._destination = destination_admin(destination)
        self._sources = SourceAdmins(self._timeout_s)
        self._managed: dict[str, MirrorSpec] = {}  # destination topic → a mirror of it (its source topic)
        self._in_step_at: dict[str, int] = {}  # destination topic → its partition count when it matched the source
        self._reported: dict[str, tuple[str, ...]] = {}  # problems already logged, so each is said once

    async def prepare(self, mirrors: Iterable[MirrorSpec]) -> None:
        """The destination topics of `mirrors` created, grown and configured as their sources, where needed."""
        new: dict[str, MirrorSpec] = {}
        for spec in mirrors:
            new.setdefault(spec.destination_name, spec)
            self._managed.setdefault(spec.destination_name, spec)
        await self._sync_all(new)

    async def _sync_all(self, topics: dict[str, MirrorSpec]) -> None:
        limiter = anyio.CapacityLimiter(CONCURRENT_TOPICS)

        async def sync(topic: str, spec: MirrorSpec) -> None:
            async with limiter:
                await self._sync(topic, spec)

        async with anyio.create_task_group() as group:
            for topic, spec in sorted(topics.items()):
                group.start_soon(sync, topic, spec)

    async def mirrors_added(self, mirrors: Sequence[MirrorSpec]) -> None:
        await self.prepare(mirrors)

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await self.sync_forever(process.stop_requested)

    async def sync_forever(self, stop: anyio.Event) -> None:
        interval = self._settings.sync_topic_configs_interval_ms / 1000
        if interval <= 0:
            return
        while True:
            with anyio.move_on_after(interval):
                await stop.wait()
            if stop.is_set():
                return
            await self._sync_all(dict(self._managed))

    async def _sync(self, topic: str, spec: MirrorSpec) -> None:
        try:
            source = await self._sources.get(spec.source, spec.source_field).describe(spec.topic)
            if source is None:  # the source topic is gone: discovery stops its mirrors
                return
            destination = await self._destination.describe(topic)
            actions = plan_topic(
                topic,
                source,
                destination,
                tuple(self._settings.topic_configs),
                in_step_at=self._in_step_at.get(topic),
                add_partitions=self._settings.add_partitions,
                sync_configs=True,
            )
            await self._apply(topic, spec, actions)
        except Exception as exc:  # a helper of the mirrors: it never takes them down; tried again next round
            error = str(exc) if isinstance(exc, AdminRequestError) else describe_error(exc)
            log_event(log, logging.WARNING, "destination topic not managed, retrying", topic=topic, error=error)
            return
        now = destination.partitions if destination is not None else source.partitions
        now = actions.partitions_to or now
        if now >= source.partitions:
            self._in_step_at[topic] = source.partitions
        self._report(topic, actions.problems)

    async def _apply(self, topic: str, spec: MirrorSpec, actions: TopicActions) -> None:
        if actions.create is not None:
            await self._destination.create(topic, actions.create, self._settings.replication_factor)
            log_event(
                log,
                logging.INFO,
                "destination topic created",
                topic=topic,
                source=f"{spec.cluster}/{spec.topic}",
                partitions=actions.create.partitions,
                replication_factor=self._settings.replication_factor,
                configs=_listed(actions.create.configs),
            )
        if actions.partitions_to is not None:
            await self._destination.add_partitions(topic, actions.partitions_to)
            log_event(log, logging.INFO, "destination partitions added", topic=topic, partitions=actions.partitions_to)
        if actions.set_configs or actions.delete_configs:
            await self._destination.alter(topic, actions.set_configs, actions.delete_configs)
            log_event(
                log,
                logging.INFO,
                "destination topic configs synced",
                topic=topic,
                set=_listed(actions.set_configs),
                removed=",".join(actions.delete_configs),
            )

    def _report(self, topic: str, problems: tuple[str, ...]) -> None:
        if problems and problems != self._reported.get(topic):
            for problem in problems:
                log_event(
                    log, logging.WARNING, "destination topic differs from its source", topic=topic, problem=problem
                )
        self._reported[topic] = problems


def _listed(configs: dict[str, str]) -> str:
    return ",".join(f"{name}={value}" for name, value in sorted(configs.items()))
