"""Whether the schema registries a `run` depends on answer, seen by the operator as a source cluster's outages are.

The registries are asked inside Spark tasks (a Kafka destination rewrites IDs there) and at a blob commit (an
archive keeps the schemas), where an unanswered request is retried until the destination's retry deadline; the
driver does not see those retries while they happen. So the supervisor asks each registry itself, one light
request (`GET /config`) every `PROBE_INTERVAL_S`, whatever the mirrors are doing: a registry is *down* from the first
probe that went unanswered (refused, timed out, 5xx) until one is answered again. An answer that refuses the
request (401, 404) is an answer: the registry is up, and the tasks report what they were refused.

An operator sees a WARN `schema registry unreachable` at the start of an outage, an INFO `schema registry reachable
again` with how long it lasted, the gauge `mirror_v3_schema_registry_up` and `/readyz` degraded meanwhile (the
listeners). The records wait in their flush meanwhile, as docs/kafka-destination.md says; none goes out with an ID
not yet known.

Cost: one small HTTP request per registry per interval (in a worker thread); a registry is only watched when an
entry with `schemas` uses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from core.reachability import Reachability
from kafka_clients.schema_registry import RegistryAccess, RegistryClient, RegistryUnavailableError, registry_for
from supervisor.process_service import ProcessService, RunningProcess

log = logging.getLogger("mirror_v3.schemas")

PROBE_INTERVAL_S = 5.0


class RegistryReachability(Reachability):
    """Whether one registry answers, from the outcomes of its probes."""

    def __init__(self, registry: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(registry, "schema registry", "registry", log, clock)

    def failed(self, exc: RegistryUnavailableError) -> None:
        self.down(f"{exc.request}: {exc.reason}")


class RegistryWatch(ProcessService):
    name = "schema registry watch"

    """Probes every registry the process depends on (a process service: `supervisor.process_service`)."""

    def __init__(
        self,
        registries: list[RegistryAccess],
        interval_s: float = PROBE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        client: Callable[[RegistryAccess], RegistryClient] = registry_for,
    ) -> None:
        self._access = {access.url: access for access in registries}
        self._interval_s = interval_s
        self._client = client
        self.reachability = {url: RegistryReachability(url, clock) for url in self._access}

    async def probe(self) -> None:
        """Ask every registry once, all at the same time."""
        async with anyio.create_task_group() as probes:
            for url in self._access:
                probes.start_soon(self._probe, url)

    async def _probe(self, url: str) -> None:
        client = self._client(self._access[url])
        try:
            await anyio.to_thread.run_sync(client.ping, abandon_on_cancel=True)
        except RegistryUnavailableError as exc:
            self.reachability[url].failed(exc)
            return
        self.reachability[url].answered()

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        await self.run_forever(process.stop_requested)

    async def run_forever(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            await self.probe()
            with anyio.move_on_after(self._interval_s):
                await stop.wait()
