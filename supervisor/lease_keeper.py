"""The chains' leases of a writing process as a process service (`sinks.leases`): taken before Spark starts and
before any chain is touched, so a live writer's chains are left alone; kept renewed while the process runs; given
up when it stops. A standby waits for them instead of refusing a live writer's."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import anyio
from anyio.abc import TaskStatus

from core.logs import log_event
from sinks.leases import Leases
from supervisor.process_service import ProcessService, RunningProcess

log = logging.getLogger("mirror_v3.supervisor")


class LeaseKeeper(ProcessService):
    name = "the destination's leases"

    def __init__(self, leases: Leases, chains: Sequence[str], standby: bool) -> None:
        self._leases = leases
        self._chains = list(chains)
        self._standby = standby
        self.holding = False  # every planned chain is this process's (false: stopped while standing by)

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Ready once every planned chain is taken (or, standing by, the process was stopped first: `holding` says
        which); raises LeaseHeldError when a live writer holds one, LeaseLostError when another process takes one
        later."""
        try:
            async with anyio.create_task_group() as keeping:
                keeping.start_soon(self._leases.keep_renewed)  # from the first: a standby's wait beats too
                if self._standby:
                    log_event(log, logging.INFO, "standby: taking the destination's leases", chains=len(self._chains))
                    self.holding = await self._leases.wait_for_all(self._chains, process.stop_requested)
                else:
                    await self._leases.take_all(self._chains)
                    self.holding = True
                task_status.started()
                if not self.holding:
                    keeping.cancel_scope.cancel()
        finally:
            await self._leases.release()
