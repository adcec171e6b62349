"""Each archived topic's metadata into the blob archive (`sinks.archive.topic_metadata`), when its mirrors start and
again whenever it changes.

Every `topic-metadata-interval-ms` (and at once for topics whose mirrors just started) it reads every watched
source topic's layout (partition count, replication factor, topic ID, the configs set on it: two admin requests per
source cluster, whatever the number of topics) and adds a document for each topic that differs from the newest
one in the archive (read from the archive once per topic per process, then remembered). A failed round is one
WARN per cluster and spell and is tried again at the next; it never stops a mirror: the records are what must
not wait.

Cost at idle: two admin requests per source cluster per interval; a write only when something changed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from config.estate import MirrorSpec
from config.model import SourceConfig
from core.errors import MirrorV3Error, first_line
from core.logs import SpellLog, log_event
from kafka_clients.admin import SourceAdmins, TopicLayout
from sinks.archive import topic_metadata
from sinks.archive.documents import ArchiveDocuments, moment_text
from sinks.archive.topic_metadata import ArchivedTopic, newest
from supervisor.process_service import ProcessService, RunningProcess

log = logging.getLogger("mirror_v3.topics")


@dataclass(frozen=True)
class _Watched:
    cluster: str  # the source cluster's name
    source: SourceConfig
    field: str  # where its settings are written (for messages and the admin client's key)
    topic: str  # the source topic


class TopicArchiver(ProcessService):
    name = "topic metadata archive"

    def __init__(
        self,
        store: ArchiveDocuments,
        admins: SourceAdmins,
        interval_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._admins = admins
        self._interval_s = interval_s
        self._clock = clock
        self._watched: dict[str, _Watched] = {}  # destination name → the source topic archived under it
        self._archived: dict[str, ArchivedTopic] = {}  # destination name → its newest document
        self._spells = SpellLog(log, "topic metadata not archived, retrying", "topic metadata archived again")
        self._new = anyio.Event()  # topics to capture now

    def watch(self, mirrors: Iterable[MirrorSpec]) -> None:
        """Archive the topics of these mirrors from now on (the first time: at once)."""
        for spec in mirrors:
            if spec.destination_name not in self._watched:
                self._watched[spec.destination_name] = _Watched(
                    spec.cluster, spec.source, spec.source_field, spec.topic
                )
                self._new.set()

    async def mirrors_added(self, mirrors: Sequence[MirrorSpec]) -> None:
        self.watch(mirrors)

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        try:
            await self.run_forever(process.stop_requested)
        finally:
            with anyio.CancelScope(shield=True):
                await self.close()

    async def run_forever(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            self._new = anyio.Event()
            await self.capture()
            with anyio.move_on_after(self._interval_s):
                async with anyio.create_task_group() as waiting:

                    async def on(event: anyio.Event) -> None:
                        await event.wait()
                        waiting.cancel_scope.cancel()

                    waiting.start_soon(on, stop)
                    waiting.start_soon(on, self._new)

    async def close(self) -> None:
        await self._store.close()

    async def capture(self) -> None:
        """One round over every watched topic."""
        by_cluster: dict[str, dict[str, _Watched]] = {}
        for name, watched in self._watched.items():
            by_cluster.setdefault(watched.cluster, {})[name] = watched
        for cluster, names in sorted(by_cluster.items()):
            try:
                await self._capture_cluster(cluster, names)
            except MirrorV3Error as exc:
                self._spells.failed(cluster, error=first_line(exc), retry_in_s=self._interval_s)
                continue
            self._spells.worked(cluster)

    async def _capture_cluster(self, cluster: str, names: dict[str, _Watched]) -> None:
        first = next(iter(names.values()))
        admin = self._admins.get(first.source, first.field)
        layouts = await admin.layouts(sorted({watched.topic for watched in names.values()}))
        now_ms = int(self._clock() * 1000)
        for name, watched in sorted(names.items()):
            layout = layouts.get(watched.topic)
            if layout is None:
                continue  # deleted: discovery stops its mirrors; the archive keeps what it last saw
            seen = _document(cluster, watched.topic, layout, now_ms)
            known = self._archived.get(name)
            if known is None:
                known = await newest(self._store, name)
            if known is not None and seen.same_topic(known):
                self._archived[name] = known
                continue
            await topic_metadata.add(self._store, name, seen)
            self._archived[name] = seen
            log_event(
                log,
                logging.INFO,
                "topic metadata archived",
                source_cluster=cluster,
                topic=watched.topic,
                partitions=layout.partitions,
                configs=len(layout.configs),
                change="first" if known is None else _what_changed(known, seen),
                at=topic_metadata.location(self._store, name),
            )


def _document(cluster: str, topic: str, layout: TopicLayout, now_ms: int) -> ArchivedTopic:
    return ArchivedTopic(
        source_cluster=cluster,
        source_topic=topic,
        seen_at=moment_text(now_ms),
        seen_at_ms=now_ms,
        partitions=layout.partitions,
        replication_factor=layout.replication_factor,
        topic_id=layout.topic_id,
        cleanup_policy=layout.cleanup_policy,
        configs=dict(sorted(layout.configs.items())),
    )


def _what_changed(before: ArchivedTopic, after: ArchivedTopic) -> str:
    """The fields that differ, for the log line (configs by name)."""
    changed = [
        field
        for field in ("partitions", "replication_factor", "topic_id", "cleanup_policy")
        if getattr(before, field) != getattr(after, field)
    ]
    names = sorted(set(before.configs) | set(after.configs))
    changed += [name for name in names if before.configs.get(name) != after.configs.get(name)]
    return ",".join(changed) or "format"
