"""The one shape of the run process's services: the helpers it keeps beside its mirrors (the destination topics'
manager, the group offset sync, the topic and group archivers, the registry watch, the source-offset committer and
the chains' lease keeper).

Each is built for the config or not at all (`supervisor.services.process_services`), and then:
- `mirrors_added`: new mirrors are about to start (at start, and from discovery), so it makes what they need first;
- `serve`: started with anyio's readiness protocol (`TaskGroup.start`): it says `task_status.started()` once the
  process may go on, runs until it is cancelled with the process, and closes what it opened itself on the way out;
- `drained`: the mirrors have stopped; its last words (the source groups' last positions) before it is cancelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus

from config.estate import MirrorSpec
from config.model import SourceConfig
from sinks.tables.positions import CommittedLog


@dataclass(frozen=True)
class MirroredPartition:
    """A running mirror and how far its destination is."""

    cluster: str
    source: SourceConfig
    source_field: str
    topic: str
    partition: int
    destination_topic: str
    position: int  # the next source offset the destination durably holds
    committed: CommittedLog | None = None  # the blobs its actor committed lately (a blob destination's table reads)


@dataclass(frozen=True)
class RunningProcess:
    """What a service may ask of the process that runs it."""

    stop_requested: anyio.Event  # a drain began
    mirrored: Callable[[], Sequence[MirroredPartition]]  # the running mirrors, now


class ProcessService:
    """The base of every service: what it does not need to hear of, it ignores."""

    name = "process service"  # how a failure of it is reported

    async def mirrors_added(self, mirrors: Sequence[MirrorSpec]) -> None:
        return None

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        raise NotImplementedError

    async def drained(self) -> None:
        return None
