"""The supervisor of a process's mirrors: one `MirrorRecord` per mirror, each run by its actor in a task of one task
group, and what happens to them over time:

- a failed actor collapses the process, stops its mirror for good, or is replaced by a new one after its backoff
  (`supervisor.failures.after_failure` decides; the mirror's position comes from the destination again);
- discovery, every interval, adds the mirrors of new matching topics and partitions and stops those whose topic is
  gone; a mirror stopped on purpose leaves no series, readiness entry or actor behind.

It builds nothing itself: the actors, the clusters' read and the hooks of the process services come in
`MirrorLinks`, and time from its clock, so its tests run on a fake one (tests/test_mirrors.py).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup

from config.errors import ConfigError
from config.estate import Entry, EstatePlan, MirrorSpec, Shard, expand
from config.secrets import ConfigReferenceError
from core.clock import SYSTEM_CLOCK, Clock
from core.describe import describe_error
from core.errors import SourceError
from core.logs import log_event
from sinks.base import DestinationError
from source.discovery import ClusterRead
from supervisor.failures import Collapse, FirstFailure, Restart, RestartPolicy, StopForGood, after_failure
from supervisor.mirror_record import MirrorActorLike, MirrorRecord
from supervisor.process_service import MirroredPartition
from telemetry.metrics import MetricFamilies

log = logging.getLogger("mirror_v3.supervisor")
MirrorKey = tuple[str, str, int]  # (cluster, topic, partition)


@dataclass(frozen=True)
class MirrorLinks:
    """What the supervisor asks of the rest of the process: the run process gives the real ones, tests fakes."""

    # A mirror's actor (its first, or a replacement); ConfigReferenceError or DestinationError when it cannot be built.
    make_actor: Callable[[MirrorSpec], MirrorActorLike]
    # Discovery's read of the selecting entries' clusters.
    read_clusters: Callable[[], Awaitable[ClusterRead]]
    # Whether a mirror's topic still exists at its source (None: the cluster cannot tell now).
    topic_exists: Callable[[MirrorSpec], Awaitable[bool | None]]
    # New mirrors are about to start (discovery): the process services make what they need first (their topics).
    mirrors_added: Callable[[Sequence[MirrorSpec]], Awaitable[None]]
    # What a mirror's flushes wait on that is not its own (the flush scheduler's shared jobs).
    held_by: Callable[[str], str | None] = lambda name: None
    clock: Clock = SYSTEM_CLOCK


@dataclass(frozen=True)
class SupervisorSettings:
    on_mirror_failure: str = "restart"  # or "exit"
    discovery_interval_s: float = 60.0
    restarts: RestartPolicy = field(default_factory=RestartPolicy)
    # Failures that are the runtime's, not the mirror's (Spark did not start: every mirror waits for the session),
    # with the words that report them: whichever mirror raises one first, the process ends.
    runtime_failures: tuple[tuple[type[Exception], str], ...] = ()


class Supervisor:
    def __init__(
        self,
        entries: tuple[Entry, ...],
        shard: Shard | None,
        families: MetricFamilies,
        failure: FirstFailure,
        stop_requested: anyio.Event,
        links: MirrorLinks,
        settings: SupervisorSettings = SupervisorSettings(),
    ) -> None:
        self._entries = entries
        self._shard = shard
        self._families = families
        self._failure = failure  # the process's: its first failure is the exit code
        self._stop = stop_requested
        self._links = links
        self._settings = settings
        self._clock = links.clock
        self._discovers = any(entry.single is None for entry in entries)
        self.mirrors: dict[MirrorKey, MirrorRecord] = {}  # one record per mirror: its actor, scope and fate
        self._selected: set[MirrorKey] = set()  # this shard's partitions that the last plan selected
        self._missing_logged: set[tuple[str, str]] = set()
        self._discovery_failing: set[str] = set()  # clusters the last discovery could not read
        self._group: TaskGroup | None = None

    def _record(self, spec: MirrorSpec) -> MirrorRecord:
        """A mirror's record with its first actor."""
        return MirrorRecord(spec, self._links.make_actor(spec), held_by=lambda: self._links.held_by(spec.name))

    def add(self, plan: EstatePlan) -> None:
        """The mirrors of the first plan (raises what building an actor raises: nothing has started)."""
        for spec in plan.mirrors:
            self.mirrors[spec.key] = self._record(spec)
        self.planned(plan)

    async def run(self, everyone: anyio.CancelScope) -> None:
        """Run every mirror, and discovery, until each has stopped (drained, or the process collapses:
        `everyone` is the process's scope)."""
        async with anyio.create_task_group() as actors:
            self._group = actors
            for record in self.mirrors.values():
                self._launch(record, everyone)
            self._update_gauges()
            if self._discovers:
                actors.start_soon(self._discover, everyone)

    def _launch(self, record: MirrorRecord, everyone: anyio.CancelScope) -> None:
        assert self._group is not None
        record.scope = anyio.CancelScope()
        self._group.start_soon(self._run_mirror, record, everyone)

    def planned(self, plan: EstatePlan) -> None:
        """Remember what the plan selected, say what it could not find, update the estate's gauges."""
        self._selected = set(plan.by_key())
        for missing in plan.missing:
            if (missing.cluster, missing.topic) not in self._missing_logged:
                self._missing_logged.add((missing.cluster, missing.topic))
                log_event(
                    log,
                    logging.WARNING,
                    "selected topic does not exist (yet); discovery picks it up once it does",
                    source_cluster=missing.cluster,
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

    def discovery_failed(self, errors: dict[str, SourceError]) -> None:
        """Count each cluster discovery could not read; a WARN at the first failure of a spell only (the cluster's
        reachability says when it is back)."""
        for cluster, error in errors.items():
            self._families.discovery_errors.labels(source_cluster=cluster).inc()
            if cluster not in self._discovery_failing:
                log_event(log, logging.WARNING, "discovery failed, retrying", source_cluster=cluster, error=str(error))
        self._discovery_failing = set(errors)

    async def _discover(self, everyone: anyio.CancelScope) -> None:
        """Every discovery interval: start mirrors for new matching topics and partitions, stop those whose
        topic is gone. A cluster that cannot be read is reported and tried again next time."""
        while not await self._clock.wait_for(self._stop, self._settings.discovery_interval_s):
            read = await self._links.read_clusters()
            self.discovery_failed(read.errors)
            try:
                plan = expand(self._entries, read.topics, self._shard)
            except ConfigError as exc:  # a new topic would write a destination another already writes
                self._failure.record(None, exc, "invalid config")
                everyone.cancel()
                return
            if self._stop.is_set():
                return
            added = [spec for key, spec in plan.by_key().items() if key not in self.mirrors]
            if added:  # their topics and partitions exist before they start
                await self._links.mirrors_added(added)
            self._apply(plan, read, everyone)

    def _apply(self, plan: EstatePlan, read: ClusterRead, everyone: anyio.CancelScope) -> None:
        for key, spec in plan.by_key().items():
            if key not in self.mirrors:
                try:
                    record = self._record(spec)
                except (ConfigReferenceError, DestinationError) as exc:
                    log_event(log, logging.ERROR, "cannot start discovered mirror", mirror=spec.name, error=str(exc))
                    continue
                self.mirrors[key] = record
                log_event(
                    log,
                    logging.INFO,
                    "discovered",
                    mirror=spec.name,
                    source_cluster=spec.cluster,
                    topic=spec.topic,
                    partition=spec.partition,
                    destination=spec.destination_name,
                )
                self._launch(record, everyone)
        for key, record in list(self.mirrors.items()):
            cluster, topic, _ = key
            gone = cluster in read.topics and topic not in read.topics[cluster]
            if gone and not record.spec.single:
                self._remove(record, "source topic was deleted")
        self.planned(plan)

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
            source_cluster=spec.cluster,
            topic=spec.topic,
            partition=spec.partition,
        )

    def mirrored(self) -> list[MirroredPartition]:
        """The running mirrors and how far their destinations are, for the group offset sync and archive."""
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
                r.actor.committed,
            )
            for r in running
        ]

    async def _run_mirror(self, record: MirrorRecord, everyone: anyio.CancelScope) -> None:
        """Run the record's actor; when it fails, what `after_failure` says: collapse the process, stop the mirror
        for good, or restart it with a new actor after the backoff."""
        spec, restarts, rng = record.spec, 0, random.Random()
        while True:
            own, actor, began = record.scope, record.actor, self._clock.monotonic()
            assert own is not None, "launched records have a scope"
            try:
                with own:
                    await actor.run()
            except Exception as exc:
                runtime = [words for kind, words in self._settings.runtime_failures if isinstance(exc, kind)]
                if runtime:
                    self._failure.record(None, exc, runtime[0])
                    everyone.cancel()
                    return
                if own.cancel_called:  # stopped on purpose (its topic is gone): what it raised on the way out
                    self._forget(record)
                    return
                if not spec.single and await self._links.topic_exists(spec) is False:
                    self._remove(record, "source topic was deleted")
                    self._forget(record)
                    return
                decision = after_failure(
                    exc,
                    on_mirror_failure=self._settings.on_mirror_failure,
                    stopping=self._stop.is_set(),
                    restarts_before=restarts,
                    ran_for_s=self._clock.monotonic() - began,
                    policy=self._settings.restarts,
                    rng=rng,
                )
                if isinstance(decision, Collapse):
                    self._failure.record(
                        spec.name, exc, source_cluster=spec.cluster, topic=spec.topic, partition=spec.partition
                    )
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
        ids = {"mirror": spec.name, "source_cluster": spec.cluster, "topic": spec.topic, "partition": spec.partition}
        if isinstance(decision, StopForGood):
            record.fail(reason, restart_at=None)
            self._families.mark_failed(labels, True)
            self._update_gauges()
            log_event(log, logging.ERROR, "mirror stopped for good: not retried", **ids, error=reason)
            return False
        record.fail(reason, restart_at=self._clock.wall() + decision.delay_s)
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
        await self._clock.wait_for(self._stop, decision.delay_s)
        record.restart_at = None  # failed (for now) until the replacement exists
        if self._stop.is_set() or self.mirrors.get(spec.key) is not record or record.actor is not failed:
            return False  # stopping, or the mirror was dropped meanwhile (its topic is gone)
        self._families.count_restart(labels)
        try:
            replacement = self._links.make_actor(spec)
        except (ConfigReferenceError, DestinationError) as build_error:
            log_event(log, logging.ERROR, "mirror cannot restart", **ids, error=describe_error(build_error))
            return False
        record.replace(replacement)
        record.scope = anyio.CancelScope()
        self._families.mark_failed(labels, False)
        self._update_gauges()
        return True

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
