"""Process services as the run process runs them (`supervisor.serving`): ready through anyio's readiness protocol,
and a failure, before ready or after, also from a service's own task group, the process's one failure."""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import TaskStatus

from sinks.leases import Holder, LeaseLostError
from supervisor.failures import FirstFailure
from supervisor.process_service import ProcessService, RunningProcess
from supervisor.serving import serve_service

PROCESS = RunningProcess(anyio.Event(), list)


class Failing(ProcessService):
    name = "failing service"

    def __init__(self, exc: BaseException, after_ready: bool, in_a_group: bool) -> None:
        self.exc, self.after_ready, self.in_a_group = exc, after_ready, in_a_group
        self.closed = False

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        if self.after_ready:
            task_status.started()
        try:
            if self.in_a_group:
                async with anyio.create_task_group() as own:
                    own.start_soon(anyio.sleep_forever)
                    raise self.exc
            raise self.exc
        finally:
            self.closed = True


@pytest.mark.parametrize("after_ready", [False, True])
@pytest.mark.parametrize("in_a_group", [False, True])
async def test_a_failing_service_is_the_processs_failure_and_ends_it(after_ready: bool, in_a_group: bool) -> None:
    failure = FirstFailure()
    exc = LeaseLostError("orders/0", "/archive/orders/0/.chain.lease", Holder.of_this_process())
    service = Failing(exc, after_ready, in_a_group)
    async with anyio.create_task_group() as process:
        await process.start(serve_service, service, PROCESS, failure, process.cancel_scope)
        await anyio.sleep_forever()  # cancelled by the failure
    assert failure.cause is exc and service.closed


async def test_a_bug_in_a_service_is_not_taken_for_a_failure_of_the_mirrors() -> None:
    failure = FirstFailure()
    with pytest.raises(BaseExceptionGroup) as raised:
        async with anyio.create_task_group() as process:
            await process.start(
                serve_service, Failing(KeyError("bug"), True, False), PROCESS, failure, process.cancel_scope
            )
    assert isinstance(raised.value.exceptions[0], KeyError) and failure.cause is None
