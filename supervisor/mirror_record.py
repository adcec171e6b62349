"""One mirror's life in a running process, in one place: what it mirrors, the actor that runs it now, its task's
cancel scope, and how it fares (started, failed and why, when its restart is due).

The supervisor keeps one `MirrorRecord` per mirror (by `MirrorSpec.key`) and replaces only the actor when it
restarts one; /readyz and /mirrors read the same records (`telemetry.http.MirrorView`), so there is nothing
to keep in step by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import anyio

from config.estate import MirrorSpec
from sinks.tables.positions import CommittedLog


class MirrorActorLike(Protocol):
    """What the supervisor and the readiness read of a mirror's actor (`supervisor.actor.MirrorActor`)."""

    metrics_labels: dict[str, str]
    started: anyio.Event
    committed: CommittedLog  # the blobs it committed lately, for an archive's table

    async def run(self) -> None: ...

    def cancel_jobs(self) -> None: ...

    @property
    def position(self) -> int: ...

    @property
    def lag(self) -> int: ...

    @property
    def held_since(self) -> float | None: ...

    def pending_age(self) -> float: ...


@dataclass(eq=False)
class MirrorRecord:
    spec: MirrorSpec
    actor: MirrorActorLike  # the one running now: a restart replaces it, the record stays
    scope: anyio.CancelScope | None = None  # its task's, once launched; cancelled: stopped on purpose
    failure: str | None = None  # why it failed, while it is failed (restarting, or stopped for good)
    restart_at: float | None = None  # Unix time its restart is due (failed, restarting)
    held_by: Callable[[], str | None] = lambda: None  # what its flush waits on that is not its own (the scheduler)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def source_cluster(self) -> str:
        return self.spec.cluster

    @property
    def started(self) -> bool:
        """The current actor has started (its position is known) and has not failed."""
        return self.failure is None and self.actor.started.is_set()

    @property
    def running(self) -> bool:
        """Launched, not stopped on purpose, not failed: what the `mirror_v3_mirrors` gauge counts."""
        return self.scope is not None and not self.scope.cancel_called and self.failure is None

    def lag(self) -> float | None:
        return float(self.actor.lag)

    def held_since(self) -> float | None:
        return self.actor.held_since

    def pending_age(self) -> float | None:
        return round(self.actor.pending_age(), 3)

    def held(self) -> str | None:
        return self.held_by()

    def fail(self, why: str, restart_at: float | None) -> None:
        self.failure, self.restart_at = why, restart_at

    def replace(self, actor: MirrorActorLike) -> None:
        """A new actor runs the mirror (a restart): not failed, not started yet."""
        self.actor, self.failure, self.restart_at = actor, None, None
