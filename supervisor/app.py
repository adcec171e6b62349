"""The supervisor: one anyio task group, one actor per mirror, signals and failure collapse."""

from __future__ import annotations

import logging
import os
import signal
import time

import anyio
import anyio.to_thread

from config.kafka_clients import ClientSettingsError
from config.model import Config
from sinks.base import DestinationError
from sinks.factory import SinkFactory
from supervisor.actor import ActorSettings, MirrorActor
from supervisor.describe import describe_error
from supervisor.errors import EXIT_CONFIG, EXIT_ENVIRONMENT, EXIT_FAILURE, EXIT_OK, EXIT_SECOND_SIGNAL
from supervisor.flush_planner import FlushLimits
from supervisor.http import HttpEndpoint, Readiness
from supervisor.logs import log_event
from supervisor.metrics import MetricFamilies, MirrorMetrics
from supervisor.partition_source import SparkPartitionSource
from supervisor.source import SourceClusters
from workers.spark_session import SparkStartError, get_spark, stop_spark

log = logging.getLogger("mirror_v3.supervisor")


class Supervisor:
    def __init__(self, config: Config, families: MetricFamilies, early_signals: list[int] | None = None) -> None:
        self._config = config
        self._early_signals = early_signals if early_signals is not None else []
        self._families = families
        self._clusters = SourceClusters()
        self.stop_requested = anyio.Event()
        self.actors: list[MirrorActor] = []
        self._failure: tuple[int, BaseException] | None = None  # (exit code, cause)

    def _build_actors(self) -> None:
        flush, spark = self._config.destination.flush, self._config.spark
        settings = ActorSettings(
            flush=flush,
            limits=FlushLimits(
                max_offsets=flush.max_offsets,
                max_bytes=flush.max_bytes,
                max_time_s=flush.max_time_ms / 1000,
                task_offsets=spark.offsets_per_task,
                task_bytes=spark.bytes_per_task,
                job_offsets=spark.max_offsets_per_job,
                job_bytes=spark.max_bytes_per_job,
            ),
            heartbeat_secs=ActorSettings.heartbeat_from_env(),
            drain_timeout_secs=ActorSettings.drain_timeout_from_env(),
        )
        sinks = SinkFactory(self._config.destination)
        for index, mirror in enumerate(self._config.mirrors):
            metrics = MirrorMetrics.for_partition(self._families, mirror.topic, mirror.partition)
            metrics.flush_max_time.set(settings.flush.max_time_ms / 1000)
            cluster = self._clusters.get(mirror.source, f"mirrors[{index}].source")
            self.actors.append(
                MirrorActor(
                    mirror=mirror,
                    source=SparkPartitionSource(mirror, cluster, self._config.spark, f"mirrors[{index}]"),
                    sink=sinks.build(mirror, on_retry=metrics.inflight_retry.set),
                    metrics=metrics,
                    settings=settings,
                    stop_requested=self.stop_requested,
                )
            )

    async def run(self) -> int:
        try:
            self._build_actors()
        except ClientSettingsError as exc:
            self._fail(None, exc, "cannot start", exit_code=EXIT_CONFIG)
            return EXIT_CONFIG
        except DestinationError as exc:
            self._fail(None, exc, "cannot start")
            return EXIT_FAILURE
        self.http = HttpEndpoint(
            self._families.registry,
            Readiness(
                mirrors=[actor.mirror.name for actor in self.actors],
                lag_of=self._lag_of,
                max_lag=Readiness.max_lag_from_env(),
            ),
        )
        await self.http.start()
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watch_signals)
                outer.start_soon(self.http.watch_loop)
                for actor in self.actors:
                    outer.start_soon(self._mark_started, actor)
                async with anyio.create_task_group() as actors:
                    # Spark starts (seconds) while the actors check their source and destination, so a
                    # corrupt chain or an unreachable broker is reported without waiting for it.
                    actors.start_soon(self._start_spark, actors.cancel_scope)
                    for actor in self.actors:
                        actors.start_soon(self._run_actor, actor, actors.cancel_scope)
                outer.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                self.http.readiness.draining = True
                await self._clusters.close()
                await anyio.to_thread.run_sync(stop_spark)
                await self.http.stop()
        if self._failure is not None:
            return self._failure[0]
        log_event(log, logging.INFO, "all mirrors stopped", mirrors=len(self.actors))
        return EXIT_OK

    async def _mark_started(self, actor: MirrorActor) -> None:
        await actor.started.wait()
        self.http.readiness.started.add(actor.mirror.name)

    def _lag_of(self, name: str) -> float | None:
        actor = next((a for a in self.actors if a.mirror.name == name), None)
        return None if actor is None else float(actor.lag)

    async def _start_spark(self, scope: anyio.CancelScope) -> None:
        began = time.monotonic()
        try:
            await anyio.to_thread.run_sync(get_spark, self._config.spark)
        except Exception as exc:
            self._fail(None, exc, "cannot start Spark", exit_code=EXIT_ENVIRONMENT)
            scope.cancel()
            return
        log_event(
            log,
            logging.INFO,
            "spark session ready",
            master=self._config.spark.master,
            elapsed_ms=round((time.monotonic() - began) * 1000),
        )

    def _fail(
        self,
        mirror: str | None,
        exc: BaseException,
        message: str = "mirror failed",
        exit_code: int = EXIT_FAILURE,
        **fields: object,
    ) -> None:
        if self._failure is not None:
            return  # the first failure is the cause; the rest are its consequences
        self._failure = (exit_code, exc)
        if mirror is not None:
            fields = {"mirror": mirror, **fields}
        log_event(log, logging.ERROR, message, **fields, error=describe_error(exc))
        log.debug("failure detail", exc_info=exc)

    async def _run_actor(self, actor: MirrorActor, scope: anyio.CancelScope) -> None:
        try:
            await actor.run()
        except SparkStartError as exc:
            # Every mirror waits for the session: whichever reports it first, it is the runtime's failure.
            self._fail(None, exc, "cannot start Spark", exit_code=EXIT_ENVIRONMENT)
            scope.cancel()
        except Exception as exc:
            self._fail(actor.mirror.name, exc, topic=actor.mirror.topic, partition=actor.mirror.partition)
            # One failed mirror collapses the process; the orchestrator restarts it and every
            # mirror recovers its position from its destination.
            scope.cancel()

    async def _watch_signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            for received in self._early_signals:  # arrived before this receiver existed
                self._on_signal(received)
            async for received in signals:
                self._on_signal(received)

    def _on_signal(self, received: int) -> None:
        name = signal.Signals(received).name
        if not self.stop_requested.is_set():
            log_event(
                log, logging.INFO, "draining: finish the flush in flight, write what is readable, exit", signal=name
            )
            self.http.readiness.draining = True
            self.stop_requested.set()
        else:
            log_event(log, logging.ERROR, "second signal during drain, exiting now", signal=name)
            logging.shutdown()
            os._exit(EXIT_SECOND_SIGNAL)
