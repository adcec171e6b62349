"""Offset queries against the source cluster (aiokafka), shared by all mirrors of one cluster.

Spark reads the records; this client only answers "where does the partition start, where is its
last stable offset, where is its high watermark" so the actor can plan exact ranges.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError

from config.kafka_clients import aiokafka_settings, diagnose_bootstrap
from config.model import SourceConfig
from supervisor.errors import SourceError


@dataclass(frozen=True)
class SourceOffsets:
    log_start: int  # earliest offset the broker still has (advanced by retention / DeleteRecords)
    end: int  # exclusive end a reader may read to: last stable offset when read_committed
    high_watermark: int


class SourceCluster:
    """Two metadata-only consumers: one sees the last stable offset, the other the high watermark."""

    def __init__(
        self,
        bootstrap_servers: str,
        request_timeout_ms: int,
        client_settings: dict[str, Any] | None = None,
        client_id: str = "mirror-v3",
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._timeout_s = request_timeout_ms / 1000
        self._timeout_ms = request_timeout_ms
        self._client_settings = dict(client_settings or {})
        common: dict[str, Any] = dict(
            bootstrap_servers=bootstrap_servers,
            client_id=client_id,
            enable_auto_commit=False,
            group_id=None,
            request_timeout_ms=request_timeout_ms,
            connections_max_idle_ms=540_000,
            **(client_settings or {}),
        )
        self._committed = AIOKafkaConsumer(isolation_level="read_committed", **common)
        self._uncommitted = AIOKafkaConsumer(isolation_level="read_uncommitted", **common)
        self._started = False
        self._start_lock = asyncio.Lock()

    async def start(self) -> None:
        async with self._start_lock:
            if self._started:
                return
            try:
                await asyncio.wait_for(self._committed.start(), self._timeout_s)
                await asyncio.wait_for(self._uncommitted.start(), self._timeout_s)
            except (TimeoutError, KafkaError, OSError) as exc:
                await self.close()
                reason = _describe(exc)
                if isinstance(exc, KafkaConnectionError):
                    diagnosis = await diagnose_bootstrap(
                        self.bootstrap_servers, self._client_settings, self._timeout_ms
                    )
                    reason = diagnosis.reason
                raise SourceError(f"source cluster {self.bootstrap_servers} unreachable: {reason}") from None
            self._started = True

    async def check_partition(self, topic: str, partition: int) -> None:
        await self.start()
        try:
            # consumer.topics() discards the partition lists it fetched; ask the client directly.
            metadata = await asyncio.wait_for(self._committed._client.fetch_all_metadata(), self._timeout_s)
        except (TimeoutError, KafkaError, OSError) as exc:
            raise SourceError(
                f"source cluster {self.bootstrap_servers}: metadata request failed: {_describe(exc)}"
            ) from None
        if topic not in metadata.topics():
            raise SourceError(f"source topic {topic!r} does not exist on {self.bootstrap_servers}")
        partitions = metadata.partitions_for_topic(topic) or set()
        if partition not in partitions:
            raise SourceError(
                f"source topic {topic!r} has no partition {partition} "
                f"(partitions: {', '.join(str(p) for p in sorted(partitions))})"
            )

    async def offsets(self, topic: str, partition: int, isolation_level: str) -> SourceOffsets:
        await self.start()
        tp = TopicPartition(topic, partition)
        try:
            start, stable, high = await asyncio.wait_for(
                asyncio.gather(
                    self._committed.beginning_offsets([tp]),
                    self._committed.end_offsets([tp]),
                    self._uncommitted.end_offsets([tp]),
                ),
                self._timeout_s,
            )
        except (TimeoutError, KafkaError, OSError) as exc:
            raise SourceError(
                f"source {topic}-{partition} on {self.bootstrap_servers}: offset query failed: {_describe(exc)}"
            ) from None
        end = stable[tp] if isolation_level == "read_committed" else high[tp]
        return SourceOffsets(log_start=start[tp], end=end, high_watermark=high[tp])

    async def close(self) -> None:
        for consumer in (self._committed, self._uncommitted):
            # Closing a half-started client must not mask the real error.
            with contextlib.suppress(Exception):
                await consumer.stop()
        self._started = False


class SourceClusters:
    """One SourceCluster per distinct bootstrap list, so N mirrors of a cluster share connections."""

    def __init__(self) -> None:
        self._clusters: dict[tuple[str, int, object], SourceCluster] = {}

    def get(self, source: SourceConfig, field: str) -> SourceCluster:
        """The shared client of `source`'s cluster; `field` is its config path, for errors.

        Raises config.kafka_clients.ClientSettingsError when its TLS files cannot be loaded.
        """
        key = (source.bootstrap_servers, source.request_timeout_ms, source.security)
        if key not in self._clusters:
            self._clusters[key] = SourceCluster(
                source.bootstrap_servers,
                source.request_timeout_ms,
                aiokafka_settings(source.security, f"{field}.security"),
            )
        return self._clusters[key]

    async def close(self) -> None:
        for cluster in self._clusters.values():
            await cluster.close()
        self._clusters.clear()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, KafkaConnectionError):
        return "no bootstrap server answered"
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]
