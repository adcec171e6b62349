"""The run process (`mirror-v3 run`, `python -m supervisor run`): its composition root and service host.

It builds everything from the config once: the source clusters, the destination (`sinks.destinations`), the flush
scheduler and the Spark runtime, the process services the config asks for (`supervisor.services`), the lease keeper,
the HTTP endpoint; then runs them in one anyio task group beside the `Supervisor` of the mirrors
(`supervisor.mirrors`), which it hands its factories. It owns what is the process's: signals (the first drains,
the second exits at once), readiness, and the first failure (`FirstFailure`), whose exit code the process ends with.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from functools import partial
from typing import Any

import anyio
import anyio.to_thread

from config.estate import MirrorSpec, Shard, compile_entries
from config.model import Config
from config.runtime import RuntimeSettings
from core.describe import describe_error
from core.errors import EXIT_OK, EXIT_SECOND_SIGNAL, MirrorV3Error, exit_code_for
from core.logs import log_event, quiet_aiokafka_leaks
from core.reachability import Outage
from sinks.destination import Destination, chain_name
from sinks.destinations import open_destination
from sinks.leases import Holder
from sinks.retry import retry_transient
from source.discovery import plan_readable, read_clusters
from source.lookup import source_lookup, source_registry
from source.offsets import SourceCluster, SourceClusters
from supervisor.actor import ActorSettings, MirrorActor
from supervisor.cluster_ids import loop_ids
from supervisor.failures import FirstFailure
from supervisor.lease_keeper import LeaseKeeper
from supervisor.mirrors import MirrorLinks, Supervisor, SupervisorSettings
from supervisor.process_service import RunningProcess
from supervisor.services import ProcessServices, process_services
from supervisor.serving import serve_service
from supervisor.source_commits import CommitGroup
from telemetry.http import HttpEndpoint, Readiness
from telemetry.metrics import MetricFamilies, MirrorMetrics
from workers.flush_planner import FlushLimits
from workers.flush_scheduler import SchedulerLimits, gather_window
from workers.partition_source import SparkPartitionSource, SparkRuntime
from workers.spark_session import SparkLaunch, SparkStartError, stop_spark
from workers.spark_start import start_spark

log = logging.getLogger("mirror_v3.supervisor")


class RunProcess:
    def __init__(
        self,
        config: Config,
        families: MetricFamilies,
        early_signals: list[int] | None = None,
        shard: Shard | None = None,
        runtime: RuntimeSettings | None = None,
        standby: bool = False,
        launch: SparkLaunch | None = None,
    ) -> None:
        self._config = config
        # How the Spark session starts (the CLI's: the class archive mapped, the Python workers' daemon ours).
        self._spark_launch = launch or SparkLaunch()
        self._standby = standby  # wait for the destination's leases instead of refusing a live writer's
        self._holder = Holder.of_this_process()
        self._runtime = runtime or RuntimeSettings()
        self._early_signals = early_signals if early_signals is not None else []
        self._families = families
        self._shard = shard
        self._entries = compile_entries(config)
        self._clusters = SourceClusters()
        self._destination: Destination | None = None  # opened by run()
        self._services = ProcessServices()  # built by run(), for the opened destination
        self.stop_requested = anyio.Event()
        self.spark_abandoned = False  # the process ended while Spark still started (see commands.cli._run)
        self._failure = FirstFailure()
        self._loop_ids: dict[str, tuple[str, str]] = {}  # renumber: cluster → (its id, the destination's)
        self._unreachable: dict[str, str] = {}  # source cluster's name → why it does not answer (while it does not)
        self._unreachable_seen: set[str] = set()  # clusters whose reachability is listened to
        spark = config.spark
        self._spark = SparkRuntime(spark, self._spark_launch)
        # One scheduler for every mirror of the process: the small flushes that fall due together share a job.
        self._scheduler = self._spark.scheduler(
            SchedulerLimits(
                task_bytes=spark.bytes_per_task, task_offsets=spark.offsets_per_task, job_bytes=spark.max_bytes_per_job
            ),
            families,
        )
        self.supervisor = Supervisor(
            self._entries,
            shard,
            families,
            self._failure,
            self.stop_requested,
            MirrorLinks(
                make_actor=self._actor,
                read_clusters=partial(read_clusters, self._clusters, self._entries),
                topic_exists=self._topic_exists,
                mirrors_added=self._mirrors_added,
                held_by=self._scheduler.held,
            ),
            SupervisorSettings(
                on_mirror_failure=config.on_mirror_failure,
                discovery_interval_s=config.discovery.interval_ms / 1000,
                runtime_failures=((SparkStartError, "cannot start Spark"),),
            ),
        )

    def _actor(self, spec: MirrorSpec) -> MirrorActor[Any]:
        limits = FlushLimits.of(spec.flush, self._config.spark)  # every flush decision's units, from here on
        settings = ActorSettings(
            limits=limits,
            heartbeat_secs=self._runtime.heartbeat_secs,
            drain_timeout_secs=self._runtime.drain_timeout_secs,
        )
        assert self._destination is not None, "run() opens the destination before any mirror"
        metrics = MirrorMetrics.for_mirror(
            self._families, spec.cluster, spec.topic, spec.partition, spec.destination_name
        )
        metrics.configure(limits.max_time_s, spec.source.transaction_hold_alert_ms / 1000)
        metrics.flush_job.set_function(partial(self._scheduler.job_seconds, spec.name))
        cluster = self._clusters.get(spec.cluster, spec.source, spec.source_field)
        self._listen(spec.cluster, cluster)
        on_durable = None
        commits = self._services.commits
        if commits is not None and spec.commit_group is not None:
            group = CommitGroup(spec.cluster, spec.commit_group, spec.source, spec.source_field)
            on_durable = partial(commits.durable, group, spec.topic, spec.partition)
        return MirrorActor(
            mirror=spec,
            source=SparkPartitionSource(spec, cluster, self._spark, self._scheduler, gather_window(limits.max_time_s)),
            sink=self._destination.sink(
                spec, on_retry=metrics.inflight_retry.set, cluster_ids=self._loop_ids.get(spec.cluster)
            ),
            metrics=metrics,
            settings=settings,
            stop_requested=self.stop_requested,
            on_durable=on_durable,
        )

    async def _open(self) -> LeaseKeeper | None:
        """Everything the mirrors need before they start, in order, and the first mirrors' records; the keeper of
        the chains' leases of a writing destination. Raises MirrorV3Error (a config collision, a destination it
        cannot use, a cluster id it cannot read)."""
        plan, unreadable = await plan_readable(self._clusters, self._entries, self._shard)
        if unreadable and len(unreadable) == len({e.cluster for e in self._entries}):
            raise next(iter(unreadable.values()))  # no cluster answers: nothing could run
        for entry in self._entries:  # every cluster's reachability, the unreadable ones' too
            self._listen(entry.cluster, self._clusters.get(entry.cluster, entry.source, entry.source_field))
        # Its selections start when discovery can read it; the other clusters' mirrors go on.
        self.supervisor.discovery_failed(unreadable)
        destination = open_destination(
            self._config.destination,
            holder=self._holder,
            source_lookups=source_lookup,
            source_registries=source_registry,
        )
        destination.resolve()  # a secret or TLS file it cannot read: named now, before anything starts
        archive = destination.archive
        if archive is not None:  # an archive of a newer layout is refused before anything is written to it
            await retry_transient(lambda: archive.check_format(writes=True), destination.retry, "read archive format")
        loop_guard = destination.services.loop_guard
        if loop_guard is not None:
            sources = {entry.cluster: (entry.source, entry.source_field) for entry in self._entries}
            self._loop_ids = await loop_ids(loop_guard, sources)
        self._services = process_services(self._entries, destination, self._families)
        await self._mirrors_added(plan.mirrors)  # the destination topics exist before the mirrors start
        self._destination = destination
        up = self._families.destination_up.labels(destination.health.location)
        destination.health.listen(lambda outage: up.set(0 if outage else 1))
        self.supervisor.add(plan)
        leases = destination.leases
        chains = [chain_name(spec.destination_name, spec.partition) for spec in plan.mirrors]
        return None if leases is None else LeaseKeeper(leases, chains, self._standby)

    async def run(self) -> int:
        quiet_aiokafka_leaks()
        try:
            keeper = await self._open()
        except MirrorV3Error as exc:  # e.g. two selected partitions would write one destination (config)
            self._failure.record(None, exc, exc.headline or "cannot start")
            await self._clusters.close()
            return exit_code_for(exc)
        self.http = HttpEndpoint(
            self._families.registry,
            Readiness(
                mirrors=self.supervisor.mirrors.values,
                spark_ready=False,
                max_lag=self._runtime.readiness_lag,
                spark_load=self._scheduler.load,
                unreachable=self._unreachable,
                destination=None if self._destination is None else self._destination.health,
                registries=self._services.registries_down,
                tables=self._services.tables_down,
            ),
            self._runtime.metrics_port,
        )
        await self.http.start()
        process = RunningProcess(self.stop_requested, self.supervisor.mirrored)
        try:
            async with anyio.create_task_group() as outer:
                everything = outer.cancel_scope
                outer.start_soon(self._watch_signals)
                outer.start_soon(self.http.watch_loop)
                if keeper is not None:
                    # Before Spark and before any chain is touched: a live writer's chains are left alone.
                    await outer.start(serve_service, keeper, process, self._failure, everything)
                    if self._failure.cause is not None or not keeper.holding:
                        everything.cancel()
                        return exit_code_for(self._failure.cause) if self._failure.cause is not None else EXIT_OK
                outer.start_soon(self._scheduler.run)
                outer.start_soon(self._clusters.poll_forever)  # the offsets of every partition mirrored
                for service in self._services.services:
                    await outer.start(serve_service, service, process, self._failure, everything)
                # Spark starts (seconds) while the actors check their source and destination, so a corrupt chain
                # or an unreachable broker is reported without waiting for it.
                spark_settled = anyio.Event()
                outer.start_soon(self._start_spark, everything, spark_settled)
                await self.supervisor.run(everything)
                for service in self._services.services:
                    await service.drained()
                # A drain during Spark's start waits for it (signals are still heard meanwhile: a second one exits
                # at once); a JVM left starting would outlive the process's last line.
                await spark_settled.wait()
                everything.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                self.http.readiness.draining = True
                await self._clusters.close()
                # A refusal (or a signal) while Spark still starts does not wait for it: the JVM exits with us.
                self.spark_abandoned = not await anyio.to_thread.run_sync(partial(stop_spark, wait_for_start=False))
                await self.http.stop()
        if self._failure.cause is not None:
            return exit_code_for(self._failure.cause)
        log_event(log, logging.INFO, "all mirrors stopped", mirrors=len(self.supervisor.mirrors))
        return EXIT_OK

    async def _mirrors_added(self, mirrors: Sequence[MirrorSpec]) -> None:
        for service in self._services.services:
            await service.mirrors_added(mirrors)

    async def _topic_exists(self, spec: MirrorSpec) -> bool | None:
        """Whether a selected mirror's topic is still at its source (discovery may not have run yet)."""
        try:
            with anyio.fail_after(spec.source.request_timeout_ms / 1000):
                topics = await self._clusters.get(spec.cluster, spec.source, spec.source_field).topic_partitions()
        except Exception:
            return None  # cannot tell: the failure stands
        return spec.topic in topics

    def _listen(self, name: str, cluster: SourceCluster) -> None:
        if name not in self._unreachable_seen:
            self._unreachable_seen.add(name)
            cluster.reachability.listen(partial(self._reachability_changed, name))

    def _reachability_changed(self, cluster: str, outage: Outage | None) -> None:
        """A source cluster went down or came back: its gauge, /readyz (degraded) and the mirrors' state in status."""
        self._families.source_cluster_up.labels(source_cluster=cluster).set(0 if outage is not None else 1)
        if outage is None:
            self._unreachable.pop(cluster, None)
        else:
            self._unreachable[cluster] = outage.cause

    async def _start_spark(self, everything: anyio.CancelScope, settled: anyio.Event) -> None:
        try:
            await start_spark(self._config.spark, self._spark_launch)
        except Exception as exc:
            failure = exc if isinstance(exc, SparkStartError) else SparkStartError(describe_error(exc))
            self._failure.record(None, failure, "cannot start Spark")
            everything.cancel()
            return
        finally:
            settled.set()
        self.http.readiness.spark_ready = True

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
