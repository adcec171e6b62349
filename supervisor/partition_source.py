"""What an actor reads from: offsets of its partition, and Spark jobs over exact ranges of it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import Protocol

import anyio.to_thread

from config.estate import MirrorSpec
from config.model import SparkConfig
from kafka_clients.settings import librdkafka_properties
from sinks.produce_target import KafkaProduceTarget, ProducedRange
from sinks.staging import BlobStaging, StagedBlob
from source.offsets import SourceCluster, SourceOffsets
from source.range_reader import SourcePartition
from source.spark_session import current_spark, get_spark
from supervisor.flush_planner import PlannedTask
from workers.range_job import RangeJob, cancel_job, run_produce_job, run_staging_job
from workers.range_task import BlobLimits, TaskRange


class JobCancelled(Exception):
    """The job was abandoned because the mirror's drain ran out of time."""


class PartitionSource(Protocol):
    async def check(self) -> None:
        """Fail with a SourceError if the cluster, topic or partition is not there."""
        ...

    async def offsets(self) -> SourceOffsets: ...

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is at or after `timestamp_ms`; None when there is none."""
        ...

    async def parallelism(self) -> int:
        """How many tasks the data plane runs at once (waits for it to start)."""
        ...

    async def run(
        self, tasks: Sequence[PlannedTask], limits: BlobLimits, target: BlobStaging | KafkaProduceTarget
    ) -> list[StagedBlob | ProducedRange]:
        """Run one job over consecutive tasks: staged blobs (or the one range a Kafka task produced)
        covering exactly [tasks[0].first, tasks[-1].end), in offset order."""
        ...

    def cancel(self) -> None:
        """Abort the job in flight, if any (its `run` then raises), and refuse new ones."""
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
        # A read that makes no progress waits out an outage as long as the offset queries do.
        stall_timeout_s=max(mirror.source.request_timeout_ms, mirror.source.outage_deadline_ms) / 1000,
        client_properties=librdkafka_properties(
            mirror.source.security, f"{mirror.source_field}.security", mirror.source.client_properties
        ),
    )


class SparkPartitionSource:
    """Offsets from aiokafka; records read (and blobs written) by Spark tasks, off the event loop."""

    def __init__(self, mirror: MirrorSpec, cluster: SourceCluster, spark: SparkConfig) -> None:
        """Raises ConfigReferenceError if the source's TLS files are unusable."""
        self._mirror = mirror
        self._partition = source_partition(mirror)
        self._cluster = cluster
        self._spark_config = spark
        self._inflight: str | None = None
        self._cancelled = False
        self._lock = threading.Lock()
        self._parallelism: int | None = None

    async def check(self) -> None:
        await self._cluster.check_partition(self._mirror.topic, self._mirror.partition)

    async def offsets(self) -> SourceOffsets:
        return await self._cluster.offsets(
            self._mirror.topic, self._mirror.partition, self._mirror.source.isolation_level
        )

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        return await self._cluster.offset_for_time(self._mirror.topic, self._mirror.partition, timestamp_ms)

    async def parallelism(self) -> int:
        if self._parallelism is None:
            spark = await anyio.to_thread.run_sync(get_spark, self._spark_config, abandon_on_cancel=True)
            self._parallelism = max(1, int(spark.sparkContext.defaultParallelism))
        return self._parallelism

    async def run(
        self, tasks: Sequence[PlannedTask], limits: BlobLimits, target: BlobStaging | KafkaProduceTarget
    ) -> list[StagedBlob | ProducedRange]:
        ranges = tuple(TaskRange(t.first, t.read_from, t.end) for t in tasks)
        if isinstance(target, KafkaProduceTarget):
            # A partition's records must reach the destination in order: one task produces the whole job.
            ranges = (TaskRange(ranges[0].first, ranges[0].read_from, ranges[-1].end),)
        job = RangeJob(
            source=self._partition,
            tasks=ranges,
            limits=limits,
            target=target,
            job_group=f"mirror-v3.{self._mirror.name}.{uuid.uuid4().hex[:12]}",
            pool=f"mirror-v3.{self._mirror.name}",
        )
        with self._lock:
            self._inflight = job.job_group
        try:
            # Abandoned on cancel: the thread finishes (or fails) on its own once `cancel` has
            # interrupted the Spark job; the actor does not wait for it.
            return await anyio.to_thread.run_sync(self._run_blocking, job, abandon_on_cancel=True)
        finally:
            with self._lock:
                self._inflight = None

    def _run_blocking(self, job: RangeJob) -> list[StagedBlob | ProducedRange]:
        spark = get_spark(self._spark_config)  # may wait for the session to start
        if self._cancelled:
            raise JobCancelled(f"job over {self._partition.name} cancelled before it started")
        if isinstance(job.target, KafkaProduceTarget):
            return list(run_produce_job(spark, job))
        return [blob for blobs in run_staging_job(spark, job) for blob in blobs]

    def cancel(self) -> None:
        """Called from the event loop: never waits."""
        self._cancelled = True
        with self._lock:
            job_group = self._inflight
        spark = current_spark()
        if job_group is not None and spark is not None:
            cancel_job(spark, job_group)
