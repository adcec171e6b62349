"""The process's HTTP endpoint: /metrics, /healthz, /readyz and /mirrors on one port (SPEC §6), for `run` and
`restore` (and the `ProcessState` that `status` reads from /mirrors).

/mirrors is each mirror's state as JSON (`ProcessState`): what `status` shows beside the offsets, and
the only place a failed mirror of a process that keeps running (`on-mirror-failure: restart`) shows
outside the logs and metrics.

It runs on the process's event loop, so an answer from /healthz is itself proof that the loop
turns; a watchdog task also measures how late the loop wakes up and reports unhealthy when it lags.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import msgspec
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from core.logs import log_event

log = logging.getLogger("mirror_v3.http")
WATCHDOG_INTERVAL_S = 0.5
UNHEALTHY_LOOP_LAG_S = 10.0


class MirrorState(msgspec.Struct, rename="kebab"):
    name: str
    # starting | running | source-unreachable (running, its source cluster down) | destination-unreachable (running,
    # its writes being retried) | held-by-job (running, its flush waits on a shared job's other reads) | restarting
    # (failed, a restart is due) | failed (stopped for good)
    state: str
    error: str | None = None  # why it failed (restarting, failed), its source is unreachable, or what holds it
    restart_at: float | None = None  # Unix time the restart is due (restarting)
    held_since: float | None = None  # Unix time since which an open source transaction holds it at the LSO
    pending_age: float | None = None  # seconds the oldest record not yet durable has waited (0: caught up)


class SparkLoad(msgspec.Struct, rename="kebab"):
    """How busy the process's Spark jobs for flushes were over the last `window-seconds`
    (workers.flush_scheduler): whether the estate fits the machine."""

    window_seconds: float
    jobs_per_second: float
    shared_jobs_per_second: float  # jobs carrying the small flushes of many partitions
    partitions_per_job: float  # flushes per job, on average
    flush_wait_p50_seconds: float | None  # from a flush falling due to its job starting (None: no flush)
    flush_wait_max_seconds: float | None


class ProcessState(msgspec.Struct):
    """The JSON body of /mirrors."""

    draining: bool
    mirrors: list[MirrorState]
    spark: SparkLoad | None = None


class MirrorView(Protocol):
    """What /readyz and /mirrors read of one mirror: `run`'s records (supervisor.mirror_record), a restore's
    partitions (`PlainMirror`)."""

    @property
    def name(self) -> str: ...
    @property
    def started(self) -> bool: ...
    @property
    def failure(self) -> str | None: ...  # why it failed, while failed
    @property
    def restart_at(self) -> float | None: ...  # Unix time its restart is due (failed, restarting)
    @property
    def source_cluster(self) -> str | None: ...  # whose reachability it depends on (None: no source cluster)
    def lag(self) -> float | None: ...
    def held_since(self) -> float | None: ...
    def pending_age(self) -> float | None: ...
    def held(self) -> str | None: ...  # what its flush waits on that is not its own work (None: nothing)


class DestinationOutageView(Protocol):
    """A spell of the destination failing writes, as /readyz words it."""

    @property
    def cause(self) -> str: ...  # the first failure's words
    @property
    def retrying(self) -> int: ...  # how many mirrors are retrying now


class DestinationView(Protocol):
    """What /readyz and /mirrors read of the destination's health (`run`'s is `sinks.destination_health`)."""

    @property
    def outage(self) -> DestinationOutageView | None: ...  # None: the destination answers
    def retrying(self, mirror: str) -> str | None: ...  # why `mirror` is retrying its writes now (None: it is not)


@dataclass
class PlainMirror:
    """A mirror that is only named and started (a restore's partition), or given fixed values (tests)."""

    name: str
    started: bool = False
    failure: str | None = None
    restart_at: float | None = None
    source_cluster: str | None = None
    lag_offsets: float | None = None
    held_since_at: float | None = None
    pending_age_s: float | None = None
    waits_on: str | None = None

    def lag(self) -> float | None:
        return self.lag_offsets

    def held_since(self) -> float | None:
        return self.held_since_at

    def pending_age(self) -> float | None:
        return self.pending_age_s

    def held(self) -> str | None:
        return self.waits_on


@dataclass
class Readiness:
    """What /readyz reports: the Spark session up, every mirror started, not draining, lag under the optional
    bound. `mirrors` lists the process's mirrors as they are now, in the order /mirrors shows them."""

    mirrors: Callable[[], Iterable[MirrorView]]
    draining: bool = False
    spark_ready: bool = True  # run starts Spark beside its mirrors: not ready before the session is up
    max_lag: float | None = None
    spark_load: Callable[[], SparkLoad | None] = lambda: None
    unreachable: dict[str, str] = field(default_factory=dict)  # source cluster → why it is unreachable (degraded)
    destination: DestinationView | None = None  # run's: whether its writes are being retried (degraded)
    registries: dict[str, str] = field(default_factory=dict)  # schema registry URL → why it is unreachable (degraded)
    tables: dict[str, str] = field(default_factory=dict)  # archive table → why it cannot be committed (degraded)

    def state(self) -> ProcessState:
        mirrors = []
        for mirror in self.mirrors():
            name = mirror.name
            if mirror.failure is not None:
                restart_at = mirror.restart_at
                state = "failed" if restart_at is None else "restarting"
                mirrors.append(MirrorState(name, state, mirror.failure, restart_at))
            elif mirror.started and (down := self._down(mirror)) is not None:
                held, age = mirror.held_since(), mirror.pending_age()
                mirrors.append(MirrorState(name, "source-unreachable", down, held_since=held, pending_age=age))
            elif mirror.started and self.destination is not None and (why := self.destination.retrying(name)):
                held, age = mirror.held_since(), mirror.pending_age()
                mirrors.append(MirrorState(name, "destination-unreachable", why, held_since=held, pending_age=age))
            elif mirror.started and (waits_on := mirror.held()) is not None:
                held, age = mirror.held_since(), mirror.pending_age()
                mirrors.append(MirrorState(name, "held-by-job", waits_on, held_since=held, pending_age=age))
            else:
                state = "running" if mirror.started else "starting"
                age = mirror.pending_age() if mirror.started else None
                mirrors.append(MirrorState(name, state, held_since=mirror.held_since(), pending_age=age))
        return ProcessState(self.draining, mirrors, self.spark_load())

    def _down(self, mirror: MirrorView) -> str | None:
        return None if mirror.source_cluster is None else self.unreachable.get(mirror.source_cluster)

    def problems(self) -> list[str]:
        if self.draining:
            return ["draining"]
        waiting = [] if self.spark_ready else ["spark: session starting"]
        # Degraded: a readiness probe takes the pod out of rotation, never restarts it (liveness is /healthz).
        waiting += [f"source cluster {name} unreachable: {why}" for name, why in sorted(self.unreachable.items())]
        waiting += [f"schema registry {url} unreachable: {why}" for url, why in sorted(self.registries.items())]
        waiting += [f"table {name} not updated: {why}" for name, why in sorted(self.tables.items())]
        outage = None if self.destination is None else self.destination.outage
        if outage is not None:
            waiting.append(f"destination unreachable: {outage.cause} (mirrors retrying: {outage.retrying})")
        mirrors = list(self.mirrors())
        waiting += [
            f"{m.name}: failed: {m.failure}" if m.failure is not None else f"{m.name}: not started"
            for m in mirrors
            if not m.started or m.failure is not None
        ]
        waiting += [f"{m.name}: held: {why}" for m in mirrors if m.started and (why := m.held()) is not None]
        if self.max_lag is not None:
            for mirror in mirrors:
                lag = mirror.lag()
                if lag is not None and lag > self.max_lag:
                    waiting.append(f"{mirror.name}: lag {lag:g} > {self.max_lag:g}")
        return waiting


class HttpEndpoint:
    def __init__(self, registry: CollectorRegistry, readiness: Readiness, port: int) -> None:
        """`port`: config.runtime's MIRROR_V3_METRICS_PORT (0: no endpoint)."""
        self._registry = registry
        self.readiness = readiness
        self._port = port
        self.loop_lag_s = 0.0
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/mirrors", self._mirrors)
        return app

    async def _metrics(self, _: web.Request) -> web.Response:
        body = await anyio.to_thread.run_sync(generate_latest, self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _: web.Request) -> web.Response:
        if self.loop_lag_s > UNHEALTHY_LOOP_LAG_S:
            return web.Response(status=503, text=f"event loop lagging {self.loop_lag_s:.1f}s\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        problems = self.readiness.problems()
        if problems:
            return web.Response(status=503, text="not ready: " + "; ".join(problems) + "\n")
        return web.Response(text="ready\n")

    async def _mirrors(self, _: web.Request) -> web.Response:
        return web.Response(body=msgspec.json.encode(self.readiness.state()), content_type="application/json")

    async def start(self) -> int | None:
        """Listen on the port (0: disabled). A bind failure is a WARN."""
        port = self._port
        if port == 0:
            log_event(log, logging.INFO, "http endpoint disabled", env="MIRROR_V3_METRICS_PORT=0")
            return None
        runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, "0.0.0.0", port).start()
        except OSError as exc:
            await runner.cleanup()
            log_event(log, logging.WARNING, "http endpoint not started", port=port, error=exc.strerror or str(exc))
            return None
        self._runner, self.port = runner, port
        log_event(log, logging.INFO, "http endpoint listening", port=port, paths="/metrics /healthz /readyz /mirrors")
        return port

    async def watch_loop(self) -> None:
        """Measure how late the event loop wakes up (a blocked loop shows as a growing lag)."""
        while True:
            before = time.monotonic()
            await anyio.sleep(WATCHDOG_INTERVAL_S)
            self.loop_lag_s = max(0.0, time.monotonic() - before - WATCHDOG_INTERVAL_S)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
