"""How the run process runs a process service (`supervisor.process_service`): started with anyio's readiness
protocol, and one that fails, before it is ready or after, is the process's first failure, which ends it."""

from __future__ import annotations

import anyio
from anyio.abc import TaskStatus

from core.errors import MirrorV3Error
from supervisor.failures import FirstFailure
from supervisor.process_service import ProcessService, RunningProcess


async def serve_service(
    service: ProcessService,
    process: RunningProcess,
    failure: FirstFailure,
    everything: anyio.CancelScope,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run `service`; a MirrorV3Error it ends with (also from its own tasks' exception group) is recorded as the
    process's failure and cancels `everything`; anything else (a bug) goes on up."""
    ready = _Readiness(task_status)
    try:
        await service.serve(process, task_status=ready)
    except BaseException as exc:
        cause = _mirror_error(exc)
        if cause is None:
            raise
        failure.record(None, cause, cause.headline or f"{service.name} failed")
        everything.cancel()
    finally:
        ready.started()  # the process goes on to see the failure, not a service that never said ready


def _mirror_error(exc: BaseException) -> MirrorV3Error | None:
    """The failure a service ended with, also from inside the exception group of its own tasks; None when it ended
    with anything else (a cancellation, a bug), which goes on up."""
    if isinstance(exc, MirrorV3Error):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        leaves = [leaf for leaf in _leaves(exc) if not isinstance(leaf, anyio.get_cancelled_exc_class())]
        if leaves and all(isinstance(leaf, MirrorV3Error) for leaf in leaves):
            first = leaves[0]
            assert isinstance(first, MirrorV3Error)
            return first
    return None


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return found


class _Readiness:
    """A service's task status that may be told more than once (anyio's may not): the first time counts."""

    def __init__(self, status: TaskStatus[None]) -> None:
        self._status, self._told = status, False

    def started(self, value: None = None) -> None:
        if not self._told:
            self._told = True
            self._status.started()
