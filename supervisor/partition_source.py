"""What an actor reads from: offsets of its partition and exact ranges of its records."""

from __future__ import annotations

import threading
import uuid
from typing import Protocol

import anyio.to_thread
import pyarrow as pa

from config.kafka_clients import jvm_properties
from config.model import MirrorConfig, SparkConfig
from supervisor.source import SourceCluster, SourceOffsets
from workers.range_reader import RangeRequest, cancel_read, read_range
from workers.spark_session import current_spark, get_spark


class ReadCancelled(RuntimeError):
    """The read was abandoned because the mirror is draining."""


class PartitionSource(Protocol):
    async def check(self) -> None:
        """Fail with a SourceError if the cluster, topic or partition is not there."""
        ...

    async def offsets(self) -> SourceOffsets: ...

    async def read(self, start: int, end: int, tasks: int) -> pa.Table:
        """Every record with offset in [start, end), in the Kafka-source layout, sorted by offset,
        read by `tasks` parallel tasks."""
        ...

    def cancel_reads(self) -> None:
        """Abort the read in flight, if any (its `read` then raises)."""
        ...


class SparkPartitionSource:
    """Offsets from aiokafka; records from Spark's Kafka batch source, off the event loop."""

    def __init__(self, mirror: MirrorConfig, cluster: SourceCluster, spark: SparkConfig, field: str) -> None:
        """`field` is the mirror's config path; raises ClientSettingsError if its TLS files are unusable."""
        self._mirror = mirror
        self._kafka_options = {
            f"kafka.{name}": value
            for name, value in jvm_properties(mirror.source.security, f"{field}.source.security").items()
        }
        self._cluster = cluster
        self._spark_config = spark
        self._group_id = mirror.source.group_id or f"mirror-v3.{mirror.name}"
        self._inflight: str | None = None
        self._cancelled = False
        self._lock = threading.Lock()

    async def check(self) -> None:
        await self._cluster.check_partition(self._mirror.topic, self._mirror.partition)

    async def offsets(self) -> SourceOffsets:
        return await self._cluster.offsets(
            self._mirror.topic, self._mirror.partition, self._mirror.source.isolation_level
        )

    async def read(self, start: int, end: int, tasks: int) -> pa.Table:
        job_group = f"mirror-v3.{self._mirror.name}.{uuid.uuid4().hex[:12]}"
        request = RangeRequest(
            bootstrap_servers=self._mirror.source.bootstrap_servers,
            topic=self._mirror.topic,
            partition=self._mirror.partition,
            start=start,
            end=end,
            isolation_level=self._mirror.source.isolation_level,
            group_id=self._group_id,
            min_partitions=tasks,
            job_group=job_group,
            kafka_options=self._kafka_options,
        )
        with self._lock:
            self._inflight = job_group
        try:
            return await anyio.to_thread.run_sync(self._read_blocking, request)
        finally:
            with self._lock:
                self._inflight = None

    def _read_blocking(self, request: RangeRequest) -> pa.Table:
        spark = get_spark(self._spark_config)  # may wait for the session to start
        if self._cancelled:
            raise ReadCancelled(f"read of {request.topic}-{request.partition} cancelled before it started")
        return read_range(spark, request)

    def cancel_reads(self) -> None:
        """Stop the read in flight and refuse new ones. Called from the event loop: never waits."""
        self._cancelled = True
        with self._lock:
            job_group = self._inflight
        spark = current_spark()
        if job_group is not None and spark is not None:
            cancel_read(spark, job_group)
