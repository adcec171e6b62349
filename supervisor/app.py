"""The supervisor: one anyio task group, one actor per mirror, signals and failure collapse."""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from functools import cached_property, partial
from typing import Any

import anyio
import anyio.to_thread
from anyio.abc import TaskGroup

from config.errors import ConfigError
from config.estate import EstatePlan, MirrorSpec, Shard, compile_entries, expand
from config.model import Config
from config.runtime import RuntimeSettings
from config.secrets import ConfigReferenceError
from core.describe import describe_error
from core.errors import EXIT_OK, EXIT_SECOND_SIGNAL, MirrorV3Error, SourceError, exit_code_for
from core.logs import log_event, quiet_aiokafka_leaks
from core.reachability import Outage
from kafka_clients.admin import SourceAdmins
from kafka_clients.schema_registry import RegistryAccess
from kafka_clients.settings import registry_access
from sinks.base import DestinationError
from sinks.destination import Destination, chain_name
from sinks.destinations import open_destination
from sinks.leases import Holder, LeaseLostError, Leases
from source.discovery import ClusterRead, plan_readable, read_clusters
from source.lookup import source_lookup, source_registry
from source.offsets import SourceCluster, SourceClusters
from supervisor.actor import ActorSettings, MirrorActor
from supervisor.cluster_ids import loop_ids
from supervisor.failures import Collapse, Restart, RestartPolicy, StopForGood, after_failure
from supervisor.group_archiver import GroupArchiver
from supervisor.group_sync import GroupSync, MirroredPartition
from supervisor.mirror_record import MirrorRecord
from supervisor.registry_watch import RegistryWatch
from supervisor.source_commits import CommitGroup, SourceOffsetCommitter
from supervisor.topic_archiver import TopicArchiver
from supervisor.topic_manager import TopicManager
from telemetry.http import HttpEndpoint, Readiness
from telemetry.metrics import MetricFamilies, MirrorMetrics
from workers.flush_planner import FlushLimits
from workers.flush_scheduler import SchedulerLimits
from workers.partition_source import SparkPartitionSource, SparkRuntime
from workers.spark_session import SparkLaunch, SparkStartError, stop_spark
from workers.spark_start import start_spark

log = logging.getLogger("mirror_v3.supervisor")
MirrorKey = tuple[str, str, int]  # (cluster, topic, partition)
RESTARTS = RestartPolicy()


class Supervisor:
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
        self._discovers = any(entry.single is None for entry in self._entries)
        self._clusters = SourceClusters()
        self._destination: Destination | None = None  # opened by run()
        self.stop_requested = anyio.Event()
        self.spark_abandoned = False  # the process ended while Spark still started (see commands.cli._run)
        self.mirrors: dict[MirrorKey, MirrorRecord] = {}  # one record per mirror: its actor, scope and fate
        self._selected: set[MirrorKey] = set()  # this shard's partitions that the last plan selected
        self._missing_logged: set[tuple[str, str]] = set()
        self._group: TaskGroup | None = None
        self._failure: BaseException | None = None  # the first failure: the cause, and so the exit code
        self._topics: TopicManager | None = None  # create-topics, once run() has built it
        self._groups: GroupSync | None = None  # sync-groups, once run() has built it
        self._archiver: TopicArchiver | None = None  # a blob archive's topic metadata, once run() has built it
        self._positions: GroupArchiver | None = None  # a blob archive's group positions (archive-groups)
        self._registries: RegistryWatch | None = None  # the schema registries entries with `schemas` use
        self._registries_down: dict[str, str] = {}  # registry URL → why it does not answer (/readyz)
        self._commits: SourceOffsetCommitter | None = None  # commit-source-offsets, once run() has built it
        self._loop_ids: dict[str, tuple[str, str]] = {}  # renumber: cluster → (its id, the destination's)
        self._unreachable: dict[str, str] = {}  # source cluster's name → why it does not answer (while it does not)
        self._unreachable_seen: set[str] = set()  # clusters whose reachability is listened to
        self._discovery_failing: set[str] = set()  # clusters the last discovery could not read
        spark = config.spark
        self._spark = SparkRuntime(spark, self._spark_launch)
        # One scheduler for every mirror of the process: the small flushes that fall due together share a job.
        self._scheduler = self._spark.scheduler(
            SchedulerLimits(
                task_bytes=spark.bytes_per_task, task_offsets=spark.offsets_per_task, job_bytes=spark.max_bytes_per_job
            ),
            families,
        )

    def _actor(self, spec: MirrorSpec) -> MirrorActor[Any]:
        flush, spark = spec.flush, self._config.spark
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
            heartbeat_secs=self._runtime.heartbeat_secs,
            drain_timeout_secs=self._runtime.drain_timeout_secs,
        )
        assert self._destination is not None, "run() opens the destination before any mirror"
        metrics = MirrorMetrics.for_mirror(
            self._families, spec.cluster, spec.topic, spec.partition, spec.destination_name
        )
        metrics.configure(flush.max_time_ms / 1000, spec.source.transaction_hold_alert_ms / 1000)
        metrics.flush_job.set_function(partial(self._scheduler.job_seconds, spec.name))
        cluster = self._clusters.get(spec.source, spec.source_field)
        self._listen(spec.cluster, cluster)
        on_durable = None
        if self._commits is not None and spec.commit_group is not None:
            group = CommitGroup(spec.cluster, spec.commit_group, spec.source, spec.source_field)
            on_durable = partial(self._commits.durable, group, spec.topic, spec.partition)
        return MirrorActor(
            mirror=spec,
            source=SparkPartitionSource(spec, cluster, self._spark, self._scheduler),
            sink=self._destination.sink(
                spec, on_retry=metrics.inflight_retry.set, cluster_ids=self._loop_ids.get(spec.cluster)
            ),
            metrics=metrics,
            settings=settings,
            stop_requested=self.stop_requested,
            on_durable=on_durable,
        )

    def _record(self, spec: MirrorSpec) -> MirrorRecord:
        """A mirror's record with its first actor; the scheduler says what holds its flushes."""
        return MirrorRecord(spec, self._actor(spec), held_by=partial(self._scheduler.held, spec.name))

    async def run(self) -> int:
        quiet_aiokafka_leaks()
        leases: Leases | None = None
        try:
            plan, unreadable = await plan_readable(self._clusters, self._entries, self._shard)
            if unreadable and len(unreadable) == len({e.cluster for e in self._entries}):
                raise next(iter(unreadable.values()))  # no cluster answers: nothing could run
            for entry in self._entries:  # every cluster's reachability, the unreadable ones' too
                self._listen(entry.cluster, self._clusters.get(entry.source, entry.source_field))
            # Its selections start when discovery can read it; the other clusters' mirrors go on.
            self._discovery_failed(unreadable)
            destination = open_destination(
                self._config.destination,
                holder=self._holder,
                source_lookups=source_lookup,
                source_registries=source_registry,
            )
            destination.resolve()  # a secret or TLS file it cannot read: named now, before anything starts
            services = destination.services
            if services.loop_guard is not None:
                sources = {entry.cluster: (entry.source, entry.source_field) for entry in self._entries}
                self._loop_ids = await loop_ids(services.loop_guard, sources)
            if services.sync_groups is not None:
                self._groups = GroupSync(services.sync_groups, self._families)
            if any(entry.source.commit_source_offsets for entry in self._entries):
                self._commits = SourceOffsetCommitter(self._source_admins, self._families)
            if services.create_topics is not None:
                self._topics = TopicManager(services.create_topics)
                await self._topics.prepare(plan.mirrors)
            # Now, not with the first mirror: a destination's leases are kept renewed from the start even when the
            # first mirrors come from discovery later.
            self._destination = destination
            leases = destination.leases
            up = self._families.destination_up.labels(destination.health.location)
            destination.health.listen(lambda outage: up.set(0 if outage else 1))
            for spec in plan.mirrors:
                self.mirrors[spec.key] = self._record(spec)
            self._archiver = self._topic_archiver(destination)
            if self._archiver is not None:
                self._archiver.watch(plan.mirrors)
            self._positions = self._group_archiver(destination)
            self._registries = self._registry_watch(destination)
        except MirrorV3Error as exc:  # e.g. two selected partitions would write one destination (config)
            self._fail(None, exc, exc.headline or "cannot start")
        if self._failure is not None:
            await self._clusters.close()
            return exit_code_for(self._failure)
        self._planned(plan)
        self.http = HttpEndpoint(
            self._families.registry,
            Readiness(
                mirrors=self.mirrors.values,
                spark_ready=False,
                max_lag=self._runtime.readiness_lag,
                spark_load=self._scheduler.load,
                unreachable=self._unreachable,
                destination=None if self._destination is None else self._destination.health,
                registries=self._registries_down,
            ),
            self._runtime.metrics_port,
        )
        await self.http.start()
        try:
            async with anyio.create_task_group() as outer:
                outer.start_soon(self._watch_signals)
                outer.start_soon(self.http.watch_loop)
                if leases is not None:
                    outer.start_soon(self._keep_leases, leases, outer.cancel_scope)
                    # Before Spark and before any chain is touched: a live writer's chains are left alone.
                    if not await self._take_leases(leases, plan):
                        outer.cancel_scope.cancel()
                        return exit_code_for(self._failure) if self._failure is not None else EXIT_OK
                outer.start_soon(self._scheduler.run)
                outer.start_soon(self._clusters.poll_forever)  # the offsets of every partition mirrored
                if self._topics is not None:
                    outer.start_soon(self._topics.sync_forever, self.stop_requested)
                if self._archiver is not None:
                    outer.start_soon(self._archiver.run_forever, self.stop_requested)
                if self._registries is not None:
                    outer.start_soon(self._registries.run_forever, self.stop_requested)
                if self._positions is not None:
                    outer.start_soon(self._positions.run_forever, self._mirrored, self.stop_requested)
                if self._groups is not None:
                    outer.start_soon(self._groups.run_forever, self._mirrored, self.stop_requested)
                if self._commits is not None:
                    outer.start_soon(self._commits.run_forever)
                async with anyio.create_task_group() as actors:
                    self._group = actors
                    # Spark starts (seconds) while the actors check their source and destination, so a
                    # corrupt chain or an unreachable broker is reported without waiting for it.
                    actors.start_soon(self._start_spark, actors.cancel_scope)
                    for record in self.mirrors.values():
                        self._launch(record)
                    self._update_gauges()
                    if self._discovers:
                        actors.start_soon(self._discover)
                if self._commits is not None:  # the positions of the drain's last commits
                    with anyio.move_on_after(5):
                        await self._commits.commit_pending()
                outer.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                self.http.readiness.draining = True
                if leases is not None:
                    await leases.release()
                for keeper in (self._archiver, self._positions):
                    if keeper is not None:
                        await keeper.close()
                await self._clusters.close()
                # A refusal (or a signal) while Spark still starts does not wait for it: the JVM exits with us.
                self.spark_abandoned = not await anyio.to_thread.run_sync(partial(stop_spark, wait_for_start=False))
                await self.http.stop()
        if self._failure is not None:
            return exit_code_for(self._failure)
        log_event(log, logging.INFO, "all mirrors stopped", mirrors=len(self.mirrors))
        return EXIT_OK

    def _topic_archiver(self, destination: Destination) -> TopicArchiver | None:
        """A blob archive's topic metadata keeper (`supervisor.topic_archiver`), unless turned off."""
        archive, every_s = destination.archive, destination.services.topic_metadata_every_s
        if archive is None or every_s is None:
            return None
        return TopicArchiver(archive.documents(), self._source_admins, every_s)

    def _registry_watch(self, destination: Destination) -> RegistryWatch | None:
        """The schema registries the entries with `schemas` use, probed for the gauge and /readyz (None: none)."""
        found: dict[str, RegistryAccess] = {}
        for entry in self._entries:
            registry = entry.source.schema_registry
            if entry.schemas is not None and entry.schemas.on and registry is not None:
                access = registry_access(registry, f"{entry.source_field}.schema-registry")
                found.setdefault(access.url, access)
        destination_registry = destination.services.schema_registry
        if found and destination_registry is not None:
            found.setdefault(destination_registry.url, destination_registry)
        if not found:
            return None
        watch = RegistryWatch(list(found.values()))
        for url, reachability in watch.reachability.items():
            reachability.listen(partial(self._registry_changed, url))
        return watch

    def _registry_changed(self, url: str, outage: Outage | None) -> None:
        self._families.schema_registry_up.labels(url).set(0 if outage is not None else 1)
        if outage is None:
            self._registries_down.pop(url, None)
        else:
            self._registries_down[url] = outage.cause

    def _group_archiver(self, destination: Destination) -> GroupArchiver | None:
        """A blob archive's keeper of consumer-group positions (`destination.archive-groups`), if asked for."""
        archive, selection = destination.archive, destination.services.group_positions
        if archive is None or selection is None:
            return None
        return GroupArchiver(archive.documents(), self._source_admins, selection)

    @cached_property
    def _source_admins(self) -> SourceAdmins:
        """One admin client per source cluster for the process's helpers (source commits, the archivers)."""
        return SourceAdmins(max(entry.source.request_timeout_ms for entry in self._entries) / 1000)

    def _discovery_failed(self, errors: dict[str, SourceError]) -> None:
        """Count each cluster discovery could not read; a WARN at the first failure of a spell only (the cluster's
        reachability says when it is back)."""
        for cluster, error in errors.items():
            self._families.discovery_errors.labels(source_cluster=cluster).inc()
            if cluster not in self._discovery_failing:
                log_event(log, logging.WARNING, "discovery failed, retrying", cluster=cluster, error=str(error))
        self._discovery_failing = set(errors)

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

    async def _keep_leases(self, leases: Leases, everything: anyio.CancelScope) -> None:
        """Renew the leases for as long as the process runs; one lost to another process stops everything."""
        try:
            await leases.keep_renewed()
        except LeaseLostError as exc:
            self._fail(None, exc, exc.headline or "lost the destination's lease")
            everything.cancel()

    async def _take_leases(self, leases: Leases, plan: EstatePlan) -> bool:
        """Take the lease of every planned chain (a standby waits for them); False when the process must stop:
        refused (a live writer holds one; reported) or stopped while standing by."""
        chains = [chain_name(spec.destination_name, spec.partition) for spec in plan.mirrors]
        if self._standby:
            log_event(log, logging.INFO, "standby: taking the destination's leases", chains=len(chains))
            return await leases.wait_for_all(chains, self.stop_requested)
        try:
            await leases.take_all(chains)
        except MirrorV3Error as exc:
            self._fail(None, exc, exc.headline or "cannot take the destination's leases")
            return False
        return True

    def _launch(self, record: MirrorRecord) -> None:
        assert self._group is not None
        record.scope = anyio.CancelScope()
        self._group.start_soon(self._run_mirror, record, self._group.cancel_scope)

    def _planned(self, plan: EstatePlan) -> None:
        """Remember what the plan selected, say what it could not find, update the estate's gauges."""
        self._selected = set(plan.by_key())
        for missing in plan.missing:
            if (missing.cluster, missing.topic) not in self._missing_logged:
                self._missing_logged.add((missing.cluster, missing.topic))
                log_event(
                    log,
                    logging.WARNING,
                    "selected topic does not exist (yet); discovery picks it up once it does",
                    cluster=missing.cluster,
                    topic=missing.topic,
                    entry=missing.field,
                )
        self._missing_logged &= {(m.cluster, m.topic) for m in plan.missing}
        self._update_gauges()

    def _update_gauges(self) -> None:
        clusters = {entry.cluster for entry in self._entries}
        running = [key for key, record in self.mirrors.items() if record.running]
        for cluster in clusters:
            self._families.mirrors.labels(source_cluster=cluster).set(sum(1 for key in running if key[0] == cluster))
            unassigned = sum(1 for key in self._selected if key[0] == cluster and key not in running)
            self._families.unassigned.labels(source_cluster=cluster).set(unassigned)

    async def _discover(self) -> None:
        """Every discovery interval: start mirrors for new matching topics and partitions, stop those whose
        topic is gone. A cluster that cannot be read is reported and tried again next time."""
        interval = self._config.discovery.interval_ms / 1000
        while True:
            with anyio.move_on_after(interval):
                await self.stop_requested.wait()
            if self.stop_requested.is_set():
                return
            read = await read_clusters(self._clusters, self._entries)
            self._discovery_failed(read.errors)
            try:
                plan = expand(self._entries, read.topics, self._shard)
            except ConfigError as exc:  # a new topic would write a destination another already writes
                self._fail(None, exc, "invalid config")
                assert self._group is not None
                self._group.cancel_scope.cancel()
                return
            if self.stop_requested.is_set():
                return
            if self._topics is not None:  # new mirrors' topics and partitions exist before they start
                await self._topics.prepare(spec for key, spec in plan.by_key().items() if key not in self.mirrors)
            self._apply(plan, read)

    def _apply(self, plan: EstatePlan, read: ClusterRead) -> None:
        specs = plan.by_key()
        for key, spec in specs.items():
            if key not in self.mirrors:
                try:
                    record = self._record(spec)
                except (ConfigReferenceError, DestinationError) as exc:
                    log_event(log, logging.ERROR, "cannot start discovered mirror", mirror=spec.name, error=str(exc))
                    continue
                self.mirrors[key] = record
                if self._archiver is not None:
                    self._archiver.watch([spec])
                log_event(
                    log,
                    logging.INFO,
                    "discovered",
                    mirror=spec.name,
                    cluster=spec.cluster,
                    topic=spec.topic,
                    partition=spec.partition,
                    destination=spec.destination_name,
                )
                self._launch(record)
        for key, record in list(self.mirrors.items()):
            cluster, topic, _ = key
            gone = cluster in read.topics and topic not in read.topics[cluster]
            if gone and not record.spec.single:
                self._remove(record, "source topic was deleted")
        self._planned(plan)

    def _remove(self, record: MirrorRecord, reason: str) -> None:
        scope = record.scope
        if scope is None or scope.cancel_called:
            return
        scope.cancel()
        record.actor.cancel_jobs()
        spec = record.spec
        if record.failure is not None:  # stopped for good already: nothing left to end it
            self._forget(record)
        self._families.removed.labels(source_cluster=spec.cluster).inc()
        log_event(
            log,
            logging.WARNING,
            f"mirror stopped: {reason}",
            mirror=spec.name,
            cluster=spec.cluster,
            topic=spec.topic,
            partition=spec.partition,
        )

    def _mirrored(self) -> list[MirroredPartition]:
        """The running mirrors and how far their destinations are, for the group offset sync."""
        running = [r for r in self.mirrors.values() if r.started]
        return [
            MirroredPartition(
                r.spec.cluster,
                r.spec.source,
                r.spec.source_field,
                r.spec.topic,
                r.spec.partition,
                r.spec.destination_name,
                r.actor.position,
            )
            for r in running
        ]

    async def _start_spark(self, scope: anyio.CancelScope) -> None:
        try:
            await start_spark(self._config.spark, self._spark_launch)
        except Exception as exc:
            failure = exc if isinstance(exc, SparkStartError) else SparkStartError(describe_error(exc))
            self._fail(None, failure, "cannot start Spark")
            scope.cancel()
            return
        self.http.readiness.spark_ready = True

    def _fail(
        self,
        mirror: str | None,
        exc: BaseException,
        message: str = "mirror failed",
        **fields: object,
    ) -> None:
        if self._failure is not None:
            return  # the first failure is the cause; the rest are its consequences
        self._failure = exc
        if mirror is not None:
            fields = {"mirror": mirror, **fields}
        log_event(log, logging.ERROR, message, **fields, error=describe_error(exc))
        log.debug("failure detail", exc_info=exc)

    async def _run_mirror(self, record: MirrorRecord, everyone: anyio.CancelScope) -> None:
        """Run the record's actor; when it fails, what `after_failure` says: collapse the process, stop the mirror
        for good, or restart it with a new actor after the backoff."""
        spec, restarts, rng = record.spec, 0, random.Random()
        while True:
            own, actor, began = record.scope, record.actor, time.monotonic()
            assert own is not None, "launched records have a scope"
            try:
                with own:
                    await actor.run()
            except SparkStartError as exc:
                # Every mirror waits for the session: whichever reports it first, it is the runtime's failure.
                self._fail(None, exc, "cannot start Spark")
                everyone.cancel()
                return
            except Exception as exc:
                if own.cancel_called:  # stopped on purpose (its topic is gone): what it raised on the way out
                    self._forget(record)
                    return
                if not spec.single and await self._topic_deleted(spec):
                    self._remove(record, "source topic was deleted")
                    self._forget(record)
                    return
                decision = after_failure(
                    exc,
                    on_mirror_failure=self._config.on_mirror_failure,
                    stopping=self.stop_requested.is_set(),
                    restarts_before=restarts,
                    ran_for_s=time.monotonic() - began,
                    policy=RESTARTS,
                    rng=rng,
                )
                if isinstance(decision, Collapse):
                    self._fail(spec.name, exc, cluster=spec.cluster, topic=spec.topic, partition=spec.partition)
                    everyone.cancel()
                    return
                if not await self._restart(record, exc, decision):
                    return
                restarts = decision.restart if isinstance(decision, Restart) else restarts
                continue
            if own.cancel_called:
                self._forget(record)
            return

    async def _restart(self, record: MirrorRecord, exc: Exception, decision: StopForGood | Restart) -> bool:
        """Report the failure; after the backoff, a new actor in the record (False: stopped for good, or the
        process is stopping, or the mirror was dropped meanwhile)."""
        spec, failed, labels = record.spec, record.actor, record.actor.metrics_labels
        reason = describe_error(exc)
        ids = {"mirror": spec.name, "cluster": spec.cluster, "topic": spec.topic, "partition": spec.partition}
        if isinstance(decision, StopForGood):
            record.fail(reason, restart_at=None)
            self._families.mark_failed(labels, True)
            self._update_gauges()
            log_event(log, logging.ERROR, "mirror stopped for good: not retried", **ids, error=reason)
            return False
        record.fail(reason, restart_at=time.time() + decision.delay_s)
        self._families.mark_failed(labels, True)
        self._update_gauges()
        log_event(
            log,
            logging.ERROR,
            "mirror failed, restarting",
            **ids,
            error=reason,
            restart=decision.restart,
            in_s=round(decision.delay_s, 1),
        )
        with anyio.move_on_after(decision.delay_s):
            await self.stop_requested.wait()
        record.restart_at = None  # failed (for now) until the replacement exists
        if self.stop_requested.is_set() or self.mirrors.get(spec.key) is not record or record.actor is not failed:
            return False  # stopping, or the mirror was dropped meanwhile (its topic is gone)
        self._families.count_restart(labels)
        try:
            replacement = self._actor(spec)
        except (ConfigReferenceError, DestinationError) as build_error:
            log_event(log, logging.ERROR, "mirror cannot restart", **ids, error=describe_error(build_error))
            return False
        record.replace(replacement)
        record.scope = anyio.CancelScope()
        self._families.mark_failed(labels, False)
        self._update_gauges()
        return True

    async def _topic_deleted(self, spec: MirrorSpec) -> bool:
        """Whether a selected mirror failed because its topic is gone (discovery may not have run yet)."""
        try:
            with anyio.fail_after(spec.source.request_timeout_ms / 1000):
                topics = await self._clusters.get(spec.source, spec.source_field).topic_partitions()
        except Exception:
            return False  # cannot tell: the failure stands
        return spec.topic not in topics

    def _forget(self, record: MirrorRecord) -> None:
        """A stopped mirror leaves no series, readiness entry or actor behind."""
        spec = record.spec
        if self.mirrors.get(spec.key) is record:
            del self.mirrors[spec.key]
        last_of_topic = all(
            (other.spec.cluster, other.spec.topic) != (spec.cluster, spec.topic) for other in self.mirrors.values()
        )
        self._families.forget(record.actor.metrics_labels, topic_too=last_of_topic)
        self._update_gauges()

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
