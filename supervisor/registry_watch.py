"""Whether the schema registries a `run` depends on answer, seen by the operator as a source cluster's outages are.

The registries are asked inside Spark tasks (a Kafka destination rewrites IDs there) and at a blob commit (an
archive keeps the schemas), where an unanswered request is retried until the destination's retry deadline; the
driver does not see those retries while they happen. So the supervisor asks each registry itself, one light
request (`GET /config`) every `PROBE_INTERVAL_S`, whatever the mirrors are doing: a registry is *down* from the first
probe that went unanswered (refused, timed out, 5xx) until one is answered again. An answer that refuses the
request (401, 404) is an answer: the registry is up, and the tasks report what they were refused.

An operator sees a WARN `schema registry unreachable` at the start of an outage, an INFO `schema registry reachable
again` with how long it lasted, the gauge `mirror_v3_schema_registry_up` and `/readyz` degraded meanwhile (the
listeners). The records wait in their flush meanwhile, as the README says; none goes out with an ID not yet known.

Cost: one small HTTP request per registry per interval (in a worker thread); a registry is only watched when an
entry with `schemas` uses it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

from core.logs import log_event
from kafka_clients.schema_registry import RegistryAccess, RegistryClient, RegistryUnavailableError, registry_for

log = logging.getLogger("mirror_v3.schemas")

PROBE_INTERVAL_S = 5.0


@dataclass(frozen=True)
class RegistryOutage:
    """A spell of a registry not answering: since when (monotonic) and the first failure's words."""

    registry: str  # its URL
    since: float
    cause: str


class RegistryReachability:
    """Whether one registry answers, from the outcomes of its probes. No I/O; the clock is injectable."""

    def __init__(self, registry: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self._clock = clock
        self.outage: RegistryOutage | None = None
        self._listeners: list[Callable[[RegistryOutage | None], None]] = []

    def listen(self, listener: Callable[[RegistryOutage | None], None]) -> None:
        """Call `listener` at every transition with the outage (None: back); at once with the current state."""
        self._listeners.append(listener)
        listener(self.outage)

    def answered(self) -> None:
        if self.outage is None:
            return
        down_s = self._clock() - self.outage.since
        self.outage = None
        log_event(log, logging.INFO, "schema registry reachable again", registry=self.registry, down_s=round(down_s, 1))
        self._changed()

    def failed(self, exc: RegistryUnavailableError) -> None:
        if self.outage is not None:
            return
        self.outage = RegistryOutage(self.registry, self._clock(), f"{exc.request}: {exc.reason}")
        log_event(log, logging.WARNING, "schema registry unreachable", registry=self.registry, error=self.outage.cause)
        self._changed()

    def _changed(self) -> None:
        for listener in self._listeners:
            listener(self.outage)


class RegistryWatch:
    """Probes every registry the process depends on (`supervisor.app` starts `run_forever` beside the mirrors)."""

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

    async def run_forever(self, stop: anyio.Event) -> None:
        while not stop.is_set():
            await self.probe()
            with anyio.move_on_after(self._interval_s):
                await stop.wait()
