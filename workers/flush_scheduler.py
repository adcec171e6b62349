"""Group commit for Spark: the small flushes that fall due at about the same time run as one job.

A Spark job costs about 0.2 CPU-s whatever it carries, so a job per partition per flush caps a machine at a
dozen or so flushes a second, far below what an estate of hundreds of steadily written partitions needs at a
`max-time` of a second. Each actor still decides what to flush and commits its own writes in offset order; only
the submission of the Spark work is shared:

- **shared lane**: a flush of one small write (at most 8 MiB and 62 500 offsets, `SHARED_WRITE_BYTES` and
  `SHARED_WRITE_OFFSETS`, or a task if smaller; a steady partition's flush at `max-time`) waits in a queue. One
  shared job runs at a time; whatever is queued when it may start goes into the next job. It may start once the
  queued flush with the least patience has waited its share of its mirror's `max-time` (`GATHER_SHARE`), or when a
  job's worth is queued: flushes that fall due within that window share the job. A job takes queued flushes up to
  `spark.max-bytes-per-job`, packed into at most one task per core (`workers.job_packing`). Every actor gets back
  exactly its own outcome: one partition's failure (data loss, a fence, a chain conflict) is that partition's and
  never fails, delays or rolls back its neighbours.
- **own lane**: a larger flush (a backlog: one or several tasks of whole blobs) runs as its own job, at once, in
  its mirror's FAIR pool: it pays the job's cost over many records, and the pools keep one backlog from starving
  the shared lane, whose jobs have a pool of their own.

- **a cluster whose reads stalled** (its broker died or stopped answering: the task gave the read up after
  `source.read-stall-timeout-ms`, or at once when the client said every broker is down, so the job's other
  partitions got their results) is *suspect* until a read of it succeeds: its flushes join no shared job; one of
  them at a time runs as a job of its own (the probe) while the others of that cluster wait for its outcome. A
  probe that reads makes the cluster healthy and the waiters go on as usual; one that stalls leaves it suspect, its
  actor backs off, and the next waiter probes. Flushes of a cluster that turned suspect while queued for a shared
  job are handed back (`ClusterReadsStalled`) and come through the probe. And a partition whose own read stalled
  joins no shared job until a read of it succeeds, whatever its cluster's state (a leaderless partition of a cluster
  that otherwise answers). So a cluster or a partition that keeps stalling holds one core at most, never every core
  nor a shared job, and partitions never wait for each other's backoff.

Cancelling a mirror's work withdraws its queued flushes and interrupts its own-lane job; a shared job in flight
runs on for its other partitions (what it staged for a cancelled mirror is a leftover that mirror's next start
removes).
"""

from __future__ import annotations

import logging
import statistics
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from core.errors import SourceUnavailableError
from core.logs import log_event
from sinks.write_target import Written
from source.range_reader import ReadStalledError
from telemetry.http import SparkLoad
from telemetry.metrics import MetricFamilies
from workers.job_packing import pack
from workers.range_job import JobCancelled, JobSpec, Outcome, WriteItem

log = logging.getLogger("mirror_v3.scheduler")

# How long a flush in the shared lane may wait for company: this share of its mirror's max-time, at most
# GATHER_MAX_S. Flushes of an estate fall due spread over their max-time, and a job costs about 0.04 CPU-s of
# Spark's whatever it carries, on top of about 1.5 ms per blob (docs/benchmarks.md): waiting for the flushes due
# within the window makes fewer, fuller jobs. At 1 s that is 0.2 s: 256 partitions ran 2.1 jobs a second instead
# of 4.4 with 50 ms, 0.78 cores instead of 0.90, p99 produce -> durable 1.7 s instead of 1.4 s. At 10 s, 0.5 s
# (GATHER_MAX_S keeps a long max-time's records from waiting seconds more: 1 024 partitions at 10 s run 1.4 jobs a
# second with it). It is added to a flush's latency at most once, and a flush queued behind a running job,
# already older than its window when the job ends, waits no more.
GATHER_SHARE = 0.2
GATHER_MAX_S = 0.5
GATHER_S = 0.025  # a flush whose caller does not say


def gather_window(max_time_s: float) -> float:
    """How long a shared flush of a mirror with this max-time may wait for others to join its job, in seconds."""
    return min(GATHER_MAX_S, GATHER_SHARE * max_time_s)


# A write joins a shared job when it is at most this big (estimated record bytes, offsets), or a task if that is
# smaller. A shared task runs its writes one after the other (a Kafka transaction's few at a time, each range read
# whole first), so a write there holds its neighbours' flushes for its own time, which grows with its records
# whatever a task's size: a default task's worth (64 MiB, 2-5 s on these machines) would cost them their max-time.
# And a backlog is slower so: 8 partitions' backlogs of 500 000 records of 100 B (one task's offsets each)
# renumbered in shared jobs took 23.1-23.5 s, two writes at a time per task, each read whole into the worker's
# memory first; as jobs of their own 17.5-20.6 s (docs/benchmarks.md). A write this big (about 0.3 CPU-s of
# records) still carries several times a job's cost (~0.04 CPU-s).
SHARED_WRITE_BYTES = 8 * 1024 * 1024
SHARED_WRITE_OFFSETS = 62_500
SHARED_POOL = "mirror-v3.shared"
# A shared job of small flushes takes well under a second; a flush held in one longer than this waits on its
# neighbours' work (a read of a broker that stopped answering, until source.read-stall-timeout-ms): its mirror's
# state says so (`held`).
HELD_AFTER_S = 1.0
LOAD_WINDOW_S = 60.0  # what `load` summarises (status, /mirrors)

# Runs one job in a worker thread: the items, their packs (one per Spark task), and how the job is named.
JobRunner = Callable[[Sequence[WriteItem], Sequence[Sequence[int]], JobSpec], list[Outcome[list[Written]]]]


class ClusterReadsStalled(SourceUnavailableError):
    """A flush queued for a shared job was handed back unread: a read of its source `cluster` stalled meanwhile, so
    it goes through the cluster's probe when its actor asks again."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        super().__init__(f"source cluster {cluster}: its reads stalled; not read, asked again through a probe")


@dataclass(frozen=True)
class SchedulerLimits:
    task_bytes: int  # a write estimated above this (or above task_offsets) runs in its own job
    task_offsets: int
    job_bytes: int  # a shared job takes queued writes up to about this many estimated bytes


@dataclass(frozen=True)
class _Started:
    """A job as `load` counts it."""

    at: float  # monotonic
    lane: str
    partitions: int
    waits: tuple[float, ...]  # per flush: from falling due to the job's start


@dataclass(frozen=True)
class _InFlight:
    """A flush in a running job, as `held` and `job_seconds` see it."""

    since: float  # monotonic: when its job started
    lane: str
    flushes: int  # in its job
    clusters: tuple[str, ...]  # the source clusters its job reads


@dataclass
class _Queued:
    owner: str
    cluster: str
    item: WriteItem
    weight: int  # estimated record bytes
    due_at: float
    may_wait_s: float  # for company, from due_at on
    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: Outcome[list[Written]] | None = None
    failure: BaseException | None = None  # the whole job failed (Spark gone, cancelled, Spark never started)


class FlushScheduler:
    def __init__(
        self,
        run_job: JobRunner,
        cancel_job: Callable[[str], None],
        parallelism: Callable[[], Awaitable[int]],
        limits: SchedulerLimits,
        metrics: MetricFamilies | None = None,
    ) -> None:
        self._run_job = run_job
        self._cancel_job = cancel_job
        self._parallelism = parallelism
        self._limits = limits
        self._metrics = metrics
        self._queue: list[_Queued] = []
        self._queued = anyio.Event()
        self._own_jobs: dict[str, set[str]] = {}  # owner → job groups of its own-lane jobs in flight
        # Source clusters whose reads stalled, until one reads again: each with the event its current probe's end sets.
        self._suspect: dict[str, anyio.Event] = {}
        self._probing: set[str] = set()
        self._stalled_owners: set[str] = set()  # mirrors whose own last read stalled: no shared job until one reads
        self._in_flight: dict[str, _InFlight] = {}  # owner → its flush's job, while it runs
        self._started: deque[_Started] = deque()  # the jobs of the last LOAD_WINDOW_S

    def joins_shared_job(self, items: Sequence[WriteItem], weight: int) -> bool:
        """Whether a flush of these writes goes into a shared job: one write of at most SHARED_WRITE_BYTES and
        SHARED_WRITE_OFFSETS, and of a task."""
        limits = self._limits
        return (
            len(items) == 1
            and weight <= min(limits.task_bytes, SHARED_WRITE_BYTES)
            and items[0].task.offset_count <= min(limits.task_offsets, SHARED_WRITE_OFFSETS)
        )

    async def submit(
        self,
        owner: str,
        items: Sequence[WriteItem],
        weights: Sequence[int],
        may_wait_s: float = GATHER_S,
        cluster: str = "",
    ) -> list[list[Written]]:
        """Run the writes of one flush of mirror `owner`, which reads source cluster `cluster`; per write, what it
        wrote. Raises the first failed write's error (by order), or the job's. A flush in the shared lane may wait
        up to `may_wait_s` for others to join its job (`gather_window`); a flush of a suspect cluster waits for its
        probe, or is it."""
        due_at = time.monotonic()
        while cluster in self._suspect:
            if cluster not in self._probing:
                return await self._probe(owner, cluster, items, due_at)
            await self._suspect[cluster].wait()
        if owner in self._stalled_owners or not self.joins_shared_job(items, sum(weights)):
            return await self._own(owner, cluster, items, due_at)
        return [await self._shared(owner, cluster, items[0], weights[0], due_at, may_wait_s)]

    async def _probe(self, owner: str, cluster: str, items: Sequence[WriteItem], due_at: float) -> list[list[Written]]:
        """The flush that finds out whether a suspect cluster reads again, as a job of its own."""
        self._probing.add(cluster)
        try:
            written = await self._own(owner, cluster, items, due_at)
            self._healthy(cluster)
            return written
        finally:
            self._probing.discard(cluster)
            ended = self._suspect.get(cluster)
            if ended is not None:  # still suspect: the next waiter probes (with a new event for its own waiters)
                self._suspect[cluster] = anyio.Event()
                ended.set()

    def _healthy(self, cluster: str) -> None:
        ended = self._suspect.pop(cluster, None)
        if ended is not None:
            ended.set()

    def _note_stalls(
        self, owner_clusters: Sequence[tuple[str, str]], outcomes: Sequence[Outcome[list[Written]]]
    ) -> None:
        """A read that stalled makes its mirror one that joins no shared job, and its cluster suspect unless that
        mirror had stalled already (one partition that keeps stalling, alone, must not hold its cluster's others at
        the probe); a mirror whose writes all succeeded read again."""
        stalled = {
            pair
            for pair, outcome in zip(owner_clusters, outcomes, strict=True)
            if isinstance(outcome.error, ReadStalledError)
        }
        for owner, cluster in stalled:
            if owner not in self._stalled_owners and cluster not in self._suspect:
                self._suspect[cluster] = anyio.Event()
            self._stalled_owners.add(owner)
        for owner, _ in set(owner_clusters) - stalled:
            self._stalled_owners.discard(owner)

    def job_seconds(self, owner: str, now: float | None = None) -> float:
        """How long the mirror's flush in flight has been in its running job (0: none)."""
        flight = self._in_flight.get(owner)
        return 0.0 if flight is None else max(0.0, (time.monotonic() if now is None else now) - flight.since)

    def held(self, owner: str, now: float | None = None) -> str | None:
        """Why the mirror waits on other partitions' work: its flush has been in a shared job longer than
        HELD_AFTER_S (None: it does not)."""
        flight = self._in_flight.get(owner)
        if flight is None or flight.lane != "shared":
            return None
        seconds = self.job_seconds(owner, now)
        if seconds <= HELD_AFTER_S:
            return None
        return (
            f"its flush has waited {seconds:.1f}s for a shared Spark job of {flight.flushes} flushes still reading "
            f"(source clusters {', '.join(flight.clusters)}; a read that gets nothing is given up after its "
            "source.read-stall-timeout-ms)"
        )

    async def _shared(
        self, owner: str, cluster: str, item: WriteItem, weight: int, due_at: float, may_wait_s: float
    ) -> list[Written]:
        queued = _Queued(owner, cluster, item, weight, due_at, may_wait_s)
        self._queue.append(queued)
        self._queued.set()
        try:
            await queued.done.wait()
        finally:
            if not queued.done.is_set() and queued in self._queue:
                self._queue.remove(queued)  # cancelled while waiting: the next job need not write it
        if queued.failure is not None:
            raise queued.failure
        assert queued.outcome is not None
        return queued.outcome.get()

    async def _own(self, owner: str, cluster: str, items: Sequence[WriteItem], due_at: float) -> list[list[Written]]:
        spec = JobSpec(
            job_group=f"mirror-v3.{owner}.{uuid.uuid4().hex[:12]}",
            pool=f"mirror-v3.{owner}",
            description=f"{owner} [{items[0].task.first}, {items[-1].task.end})",
        )
        packs = [[index] for index in range(len(items))]  # a backlog's tasks were sized by its planner
        self._observe_job("own", 1, [due_at])  # one partition, however many tasks
        groups = self._own_jobs.setdefault(owner, set())
        groups.add(spec.job_group)
        self._in_flight[owner] = _InFlight(time.monotonic(), "own", 1, (cluster,))
        try:
            # Abandoned on cancel: the thread finishes (or fails) on its own once `cancel` has interrupted the
            # Spark job; the actor does not wait for it.
            outcomes = await anyio.to_thread.run_sync(self._run_job, items, packs, spec, abandon_on_cancel=True)
            self._note_stalls([(owner, cluster)] * len(items), outcomes)
        finally:
            self._in_flight.pop(owner, None)
            groups.discard(spec.job_group)
            if not groups:
                self._own_jobs.pop(owner, None)
        return [outcome.get() for outcome in outcomes]

    def cancel(self, owner: str) -> None:
        """Withdraw the mirror's queued flushes and interrupt its own-lane jobs (called from the event loop: never
        waits). Its flush in a shared job in flight runs on with the others."""
        for queued in [q for q in self._queue if q.owner == owner]:
            self._queue.remove(queued)
            queued.failure = JobCancelled(f"flush of {owner}")
            queued.done.set()
        for job_group in list(self._own_jobs.get(owner, ())):
            self._cancel_job(job_group)

    async def run(self) -> None:
        """Run shared jobs until cancelled, one at a time, each with what is queued when it may start."""
        slots: int | None = None
        while True:
            await self._queued.wait()
            self._queued = anyio.Event()
            if not self._queue:
                continue
            await self._gather()
            batch = self._take()
            if not batch:
                continue
            if self._queue:
                self._queued.set()  # more than one job's worth: the next one starts right after this one
            try:
                if slots is None:
                    slots = await self._parallelism()  # waits for the Spark session
            except Exception as exc:
                self._fail(batch, exc)
                continue
            await self._run_shared(batch, slots)

    async def _gather(self) -> None:
        """Wait until the queued flush with the least patience left has waited its window, or a job's worth is
        queued (a flush queued meanwhile may have less patience: the wait is worked out again when one comes).
        Cost: a pass over the queue per flush queued meanwhile."""
        while self._queue:
            start_at = min(queued.due_at + queued.may_wait_s for queued in self._queue)
            left_s = start_at - time.monotonic()
            if left_s <= 0 or sum(queued.weight for queued in self._queue) >= self._limits.job_bytes:
                return
            with anyio.move_on_after(left_s):
                await self._queued.wait()
            self._queued = anyio.Event()

    def _take(self) -> list[_Queued]:
        """The oldest queued writes up to the shared job's byte bound (at least one). Those of a cluster that turned
        suspect since they were queued are handed back unread (`ClusterReadsStalled`)."""
        for queued in [q for q in self._queue if q.cluster in self._suspect]:
            self._queue.remove(queued)
            queued.failure = ClusterReadsStalled(queued.cluster)
            queued.done.set()
        taken: list[_Queued] = []
        total = 0
        for queued in self._queue:
            if taken and total + queued.weight > self._limits.job_bytes:
                break
            taken.append(queued)
            total += queued.weight
        del self._queue[: len(taken)]
        return taken

    async def _run_shared(self, batch: list[_Queued], slots: int) -> None:
        items = [queued.item for queued in batch]
        packs = pack([queued.weight for queued in batch], slots)
        spec = JobSpec(
            job_group=f"mirror-v3.shared.{uuid.uuid4().hex[:12]}",
            pool=SHARED_POOL,
            description=f"{len(batch)} flushes of {len({q.owner for q in batch})} mirrors",
        )
        self._observe_job("shared", len(batch), [queued.due_at for queued in batch])
        flight = _InFlight(time.monotonic(), "shared", len(batch), tuple(sorted({q.cluster for q in batch})))
        for queued in batch:
            self._in_flight[queued.owner] = flight
        try:
            outcomes = await anyio.to_thread.run_sync(self._run_job, items, packs, spec, abandon_on_cancel=True)
        except Exception as exc:
            log_event(log, logging.DEBUG, "shared job failed", job=spec.description, error=str(exc))
            self._fail(batch, exc)
            return
        finally:
            for queued in batch:
                if self._in_flight.get(queued.owner) is flight:
                    del self._in_flight[queued.owner]
        self._note_stalls([(queued.owner, queued.cluster) for queued in batch], outcomes)
        for queued, outcome in zip(batch, outcomes, strict=True):
            queued.outcome = outcome
            queued.done.set()

    @staticmethod
    def _fail(batch: list[_Queued], exc: Exception) -> None:
        """The job as a whole failed (Spark gone or never started, the job cancelled): every flush in it did."""
        for queued in batch:
            queued.failure = exc
            queued.done.set()

    def load(self, now: float | None = None) -> SparkLoad:
        """Jobs per second, flushes per job and the wait for a job over the last LOAD_WINDOW_S (or since the first
        job, if sooner)."""
        now = time.monotonic() if now is None else now
        self._forget_before(now - LOAD_WINDOW_S)
        jobs = list(self._started)
        window = max(1.0, min(LOAD_WINDOW_S, now - jobs[0].at)) if jobs else LOAD_WINDOW_S
        waits = sorted(wait for job in jobs for wait in job.waits)
        return SparkLoad(
            window_seconds=round(window, 1),
            jobs_per_second=round(len(jobs) / window, 2),
            shared_jobs_per_second=round(sum(1 for job in jobs if job.lane == "shared") / window, 2),
            partitions_per_job=round(sum(job.partitions for job in jobs) / len(jobs), 1) if jobs else 0.0,
            flush_wait_p50_seconds=round(statistics.median(waits), 3) if waits else None,
            flush_wait_max_seconds=round(waits[-1], 3) if waits else None,
        )

    def _forget_before(self, moment: float) -> None:
        while self._started and self._started[0].at < moment:
            self._started.popleft()

    def _observe_job(self, lane: str, partitions: int, due_at: Sequence[float]) -> None:
        now = time.monotonic()
        waits = tuple(max(0.0, now - due) for due in due_at)
        self._started.append(_Started(now, lane, partitions, waits))
        self._forget_before(now - LOAD_WINDOW_S)
        if self._metrics is None:
            return
        self._metrics.spark_jobs.labels(lane=lane).inc()
        self._metrics.job_partitions.labels(lane=lane).observe(partitions)
        histogram = self._metrics.flush_wait.labels(lane=lane)
        for wait in waits:
            histogram.observe(wait)
