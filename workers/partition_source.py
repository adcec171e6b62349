"""What an actor reads from: offsets of its partition, and Spark jobs over exact ranges of it (through the
process's flush scheduler, which runs the small flushes of many partitions as one job)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol, TypeVar, cast

import anyio.to_thread

from config.estate import MirrorSpec
from config.model import SparkConfig
from core.errors import SourceUnavailableError
from kafka_clients.settings import cluster_access
from sinks.write_target import BlobLimits, TaskRange, WriteTarget, Written
from source.offsets import BATCH_PATIENCE_SECONDS, OffsetWatch, PolledOffsets, SourceCluster, SourceOffsets
from source.outages import ClusterReachability
from source.range_reader import SourcePartition
from telemetry.metrics import MetricFamilies
from workers.flush_planner import PlannedTask
from workers.flush_scheduler import GATHER_S, FlushScheduler, SchedulerLimits
from workers.range_job import JobCancelled, JobSpec, Outcome, WriteItem, cancel_job, run_write_job
from workers.spark_session import SparkLaunch, current_spark, get_spark

W = TypeVar("W", bound=Written)
# How long after a request timed out the estate poll has seen an outage at the latest: its patience with a round,
# then a probe that fails at once when no broker accepts a connection (source.offsets).
OUTAGE_SEEN_WITHIN_S = BATCH_PATIENCE_SECONDS + 2.0


class PartitionSource(Protocol):
    async def check(self) -> None:
        """Fail with a SourceError if the cluster, topic or partition is not there."""
        ...

    async def offsets(self) -> SourceOffsets:
        """Asked now (a start, a drain, a check after a deletion)."""
        ...

    def watch(self, changed: Callable[[], None]) -> Callable[[], None]:
        """Have the cluster's estate poll call `changed` when this partition's offsets move (or a poll fails to
        answer them); returns what ends the watch."""
        ...

    async def polled(self) -> PolledOffsets:
        """The newest offsets the poll saw, and its sightings since the last call (asked now when it has none)."""
        ...

    def wake_at(self, end: int | None) -> None:
        """Call the watch's `changed` only once the readable end reaches `end`, or for a change that matters
        whatever the end (the log start, a shrink, a transaction hold); None: at every change."""
        ...

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is at or after `timestamp_ms`; None when there is none."""
        ...

    @property
    def reachability(self) -> ClusterReachability:
        """Whether the source cluster answers (shared by every mirror of it)."""
        ...

    async def parallelism(self) -> int:
        """How many tasks the data plane runs at once (waits for it to start)."""
        ...

    async def run(
        self,
        tasks: Sequence[PlannedTask],
        limits: BlobLimits,
        target: WriteTarget[W],
        bytes_per_offset: float | None = None,
    ) -> list[W]:
        """Write consecutive tasks' ranges with the target: what was written, covering exactly
        [tasks[0].first, tasks[-1].end), in offset order (an ordered target's tasks are written as one range).
        `bytes_per_offset` (as learned so far) estimates the work. Raises the first failed write's typed error;
        SourceUnavailableError without reading while the source cluster is known to be down."""
        ...

    def cancel(self) -> None:
        """Abort the work in flight or queued, if any (its `run` then raises), and refuse new work."""
        ...


def source_partition(mirror: MirrorSpec, group_id: str | None = None) -> SourcePartition:
    """What a Spark task needs to read the mirror's partition. Raises ConfigReferenceError if the source's TLS
    files are unusable."""
    return SourcePartition(
        bootstrap_servers=mirror.source.bootstrap_servers,
        topic=mirror.topic,
        partition=mirror.partition,
        isolation_level=mirror.source.isolation_level,
        group_id=group_id or mirror.source.group_id or f"mirror-v3.{mirror.name}",
        # A read that gets nothing for a few seconds is given up, so that a broker which dies under a shared job
        # holds the job's other partitions that long at most; the actor asks again (OutageRider).
        stall_timeout_s=mirror.source.read_stall_timeout_ms / 1000,
        client_properties=cluster_access(mirror.source, mirror.source_field).librdkafka(),
    )


def outage_stall_timeout_s(mirror: MirrorSpec) -> float:
    """A stall timeout that waits out an outage as long as the offset queries do, for a streamed read whose write
    cannot be given up midway (`WriteTarget.abandons_cleanly`): past the outage deadline by more than the driver
    needs to see an outage (a request timeout, then a metadata probe), so a read stalled by a down cluster fails
    as the outage it is (named, on time, by the actor), and this limit is left for a read that cannot progress
    while the cluster answers."""
    source = mirror.source
    return (max(source.request_timeout_ms, source.outage_deadline_ms) + source.request_timeout_ms) / 1000 + (
        OUTAGE_SEEN_WITHIN_S
    )


class SparkRuntime:
    """The process's Spark session as the flush scheduler uses it: its parallelism, jobs run in worker threads,
    and their cancellation."""

    def __init__(self, spark: SparkConfig, launch: SparkLaunch) -> None:
        self._config, self._launch = spark, launch
        self._parallelism: int | None = None

    async def parallelism(self) -> int:
        if self._parallelism is None:
            spark = await anyio.to_thread.run_sync(get_spark, self._config, self._launch, abandon_on_cancel=True)
            self._parallelism = max(1, int(spark.sparkContext.defaultParallelism))
        return self._parallelism

    def run_job(
        self, items: Sequence[WriteItem], packs: Sequence[Sequence[int]], spec: JobSpec
    ) -> list[Outcome[list[Written]]]:
        """Blocks: callers run it in a worker thread."""
        return run_write_job(
            get_spark(self._config, self._launch), items, packs, spec
        )  # may wait for the session to start

    @staticmethod
    def cancel_job(job_group: str) -> None:
        """Called from the event loop: never waits."""
        spark = current_spark()
        if spark is not None:
            cancel_job(spark, job_group)

    def scheduler(self, limits: SchedulerLimits, metrics: MetricFamilies | None = None) -> FlushScheduler:
        return FlushScheduler(self.run_job, self.cancel_job, self.parallelism, limits, metrics)


class SparkPartitionSource:
    """Offsets from aiokafka; records read (and written) by Spark tasks, off the event loop."""

    def __init__(
        self,
        mirror: MirrorSpec,
        cluster: SourceCluster,
        runtime: SparkRuntime,
        scheduler: FlushScheduler,
        gather_s: float = GATHER_S,
    ) -> None:
        """`gather_s`: how long its shared flushes may wait for others to join their job (`gather_window` of its
        max-time). Raises ConfigReferenceError if the source's TLS files are unusable."""
        self._gather_s = gather_s
        self._mirror = mirror
        self._partition = source_partition(mirror)
        self._cluster = cluster
        self._runtime = runtime
        self._scheduler = scheduler
        self._cancelled = False
        self._watch: OffsetWatch | None = None

    async def check(self) -> None:
        await self._cluster.check_partition(self._mirror.topic, self._mirror.partition)

    async def offsets(self) -> SourceOffsets:
        return await self._cluster.offsets(
            self._mirror.topic, self._mirror.partition, self._mirror.source.isolation_level
        )

    def watch(self, changed: Callable[[], None]) -> Callable[[], None]:
        mirror, source = self._mirror, self._mirror.source
        interval_s = source.poll_interval_ms / 1000
        self._watch = self._cluster.watch(mirror.topic, mirror.partition, source.isolation_level, interval_s, changed)
        return partial(self._cluster.unwatch, self._watch)

    async def polled(self) -> PolledOffsets:
        assert self._watch is not None, "polled() before watch()"
        return await self._cluster.polled(self._watch)

    def wake_at(self, end: int | None) -> None:
        if self._watch is not None:
            self._watch.wake_at_end = end

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        return await self._cluster.offset_for_time(self._mirror.topic, self._mirror.partition, timestamp_ms)

    @property
    def reachability(self) -> ClusterReachability:
        return self._cluster.reachability

    async def parallelism(self) -> int:
        return await self._runtime.parallelism()

    async def run(
        self,
        tasks: Sequence[PlannedTask],
        limits: BlobLimits,
        target: WriteTarget[W],
        bytes_per_offset: float | None = None,
    ) -> list[W]:
        if self._cancelled:
            raise JobCancelled(f"flush of {self._mirror.name}")
        outage = self._cluster.reachability.outage
        if outage is not None:
            # A read of a cluster that does not answer would only hold a Spark core (and a shared job's other
            # partitions) until it stalled: the actor asks again once it answers.
            raise SourceUnavailableError(f"source cluster {outage.name} unreachable: {outage.cause}; not read")
        partition = self._partition
        if not target.abandons_cleanly:
            partition = dataclasses.replace(partition, stream_stall_timeout_s=outage_stall_timeout_s(self._mirror))
        ranges = [TaskRange(t.first, t.read_from, t.end) for t in tasks]
        if target.ordered:
            # A partition's records must reach the destination in order: one task writes the whole range.
            ranges = [TaskRange(ranges[0].first, ranges[0].read_from, ranges[-1].end)]
        weights = [round(task.offset_count * (bytes_per_offset or 1.0)) for task in ranges]
        items = [
            WriteItem(partition, task, limits, target, weight) for task, weight in zip(ranges, weights, strict=True)
        ]
        cluster = self._mirror.cluster
        written = await self._scheduler.submit(self._mirror.name, items, weights, self._gather_s, cluster)
        # The writes of `target` are its own kind of Written (a staged blob, a produced range).
        return [cast(W, each) for per_item in written for each in per_item]

    def cancel(self) -> None:
        """Called from the event loop: never waits."""
        self._cancelled = True
        self._scheduler.cancel(self._mirror.name)
