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

from config.model import SourceConfig
from core.errors import MissingSourcePartitionError, SourceError, SourceUnavailableError
from kafka_clients.diagnosis import diagnose_bootstrap
from kafka_clients.settings import aiokafka_settings

# How long a shared offset request may take before its partitions are asked one by one. aiokafka retries a
# partition it has no leader for (a deleted topic, say) until the request timeout: in a shared request, that
# one partition would hold every other mirror's answer back for as long.
BATCH_PATIENCE_SECONDS = 3.0
# How long an offset query waits for others to share its request. Mirrors that sleep the same poll
# interval wake within microseconds of each other; 1 000 idle mirrors then cost a few requests per poll
# instead of 3 000.
COALESCE_SECONDS = 0.002

_PartitionOffsets = tuple[int, int, int]  # log start, last stable offset, high watermark


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
        # Offset queries waiting for the next batch, and the batches under way.
        self._pending: dict[TopicPartition, list[asyncio.Future[_PartitionOffsets]]] = {}
        self._batches: set[asyncio.Future[None]] = set()
        # The metadata fetch shared by mirrors that check their partition at about the same time.
        self._metadata_fetch: asyncio.Future[Any] | None = None
        self._metadata_at = 0.0

    async def start(self) -> None:
        async with self._start_lock:
            if self._started:
                return
            try:
                await asyncio.wait_for(self._committed.start(), self._timeout_s)
                await asyncio.wait_for(self._uncommitted.start(), self._timeout_s)
            except (TimeoutError, KafkaError, OSError) as exc:
                await self.close()
                reason, permanent = _describe(exc), False
                if isinstance(exc, KafkaConnectionError):
                    diagnosis = await diagnose_bootstrap(
                        self.bootstrap_servers, self._client_settings, self._timeout_ms
                    )
                    reason, permanent = diagnosis.reason, diagnosis.permanent
                # A credential or certificate problem stays; anything else may be a broker restarting.
                kind = SourceError if permanent else SourceUnavailableError
                raise kind(f"source cluster {self.bootstrap_servers} unreachable: {reason}") from None
            self._started = True

    async def check_partition(self, topic: str, partition: int) -> None:
        await self.start()
        try:
            metadata = await self._cluster_metadata()
        except (TimeoutError, KafkaError, OSError) as exc:
            raise SourceUnavailableError(
                f"source cluster {self.bootstrap_servers}: metadata request failed: {_describe(exc)}"
            ) from None
        if topic not in metadata.topics():
            raise MissingSourcePartitionError(topic, partition, self.bootstrap_servers, None)
        partitions = metadata.partitions_for_topic(topic) or set()
        if partition not in partitions:
            raise MissingSourcePartitionError(topic, partition, self.bootstrap_servers, tuple(sorted(partitions)))

    async def topic_partitions(self) -> dict[str, int]:
        """Every topic of the cluster (internal ones included) and its partition count."""
        await self.start()
        try:
            metadata = await self._cluster_metadata()
        except (TimeoutError, KafkaError, OSError) as exc:
            raise SourceUnavailableError(
                f"source cluster {self.bootstrap_servers}: metadata request failed: {_describe(exc)}"
            ) from None
        return {
            topic: len(metadata.partitions_for_topic(topic) or ())
            for topic in metadata.topics(exclude_internal_topics=False)
        }

    async def _cluster_metadata(self) -> Any:
        """The cluster's topics and partitions. Mirrors starting together share one fetch: each full
        metadata response describes every partition of the cluster, so 1 000 mirrors fetching their
        own would decode it 1 000 times on the event loop and delay every start."""
        now = asyncio.get_running_loop().time()
        fetch = self._metadata_fetch
        stale = fetch is None or (
            fetch.done() and (fetch.cancelled() or fetch.exception() is not None or now - self._metadata_at > 1.0)
        )
        if stale:
            self._metadata_at = now
            # consumer.topics() discards the partition lists it fetched; ask the client directly.
            fetch = asyncio.ensure_future(
                asyncio.wait_for(self._committed._client.fetch_all_metadata(), self._timeout_s)
            )
            self._metadata_fetch = fetch
        assert fetch is not None
        # Shielded: one mirror giving up must not cancel the fetch the others wait for.
        return await asyncio.shield(fetch)

    async def offsets(self, topic: str, partition: int, isolation_level: str) -> SourceOffsets:
        """Where the partition starts and ends. Queries that arrive within COALESCE_SECONDS of each other
        (the mirrors of one process poll in step) travel together: one request per kind for all of them."""
        await self.start()
        tp = TopicPartition(topic, partition)
        answer: asyncio.Future[_PartitionOffsets] = asyncio.get_running_loop().create_future()
        if not self._pending:  # the first query of a new batch starts it
            batch = asyncio.ensure_future(self._answer_pending())
            self._batches.add(batch)
            batch.add_done_callback(self._batches.discard)
        self._pending.setdefault(tp, []).append(answer)
        start, stable, high = await answer
        end = stable if isolation_level == "read_committed" else high
        return SourceOffsets(log_start=start, end=end, high_watermark=high)

    async def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after `timestamp_ms` (ListOffsets by time)."""
        await self.start()
        tp = TopicPartition(topic, partition)
        try:
            found = await asyncio.wait_for(self._committed.offsets_for_times({tp: timestamp_ms}), self._timeout_s)
        except (TimeoutError, KafkaError, OSError) as exc:
            raise SourceError(
                f"source {topic}-{partition} on {self.bootstrap_servers}: offset query by time failed: {_describe(exc)}"
            ) from None
        answer = found.get(tp)
        return None if answer is None else int(answer.offset)

    async def _answer_pending(self) -> None:
        pending: dict[TopicPartition, list[asyncio.Future[_PartitionOffsets]]] | None = None
        try:
            await asyncio.sleep(COALESCE_SECONDS)
            pending, self._pending = self._pending, {}
            await self._answer(pending)
        except BaseException as exc:  # cancelled by close(), or a bug: no mirror may wait forever
            if pending is None:
                pending, self._pending = self._pending, {}
            failure = SourceError(f"source {self.bootstrap_servers}: offset query failed: {exc!r}")
            self._settle(pending, dict.fromkeys(pending, failure))
            if not isinstance(exc, Exception):
                raise

    async def _answer(self, pending: dict[TopicPartition, list[asyncio.Future[_PartitionOffsets]]]) -> None:
        """One request for all; if it fails or takes too long, one per partition, each answered as it
        arrives, so an error names its partition and a partition that hangs holds back only its mirror."""
        if len(pending) == 1:
            (tp,) = pending
            await self._answer_one(tp, pending[tp])
            return
        try:
            answers = await asyncio.wait_for(self._list_offsets(list(pending)), BATCH_PATIENCE_SECONDS)
        except (SourceError, TimeoutError):
            await asyncio.gather(*(self._answer_one(tp, waiters) for tp, waiters in pending.items()))
            return
        self._settle(pending, dict(answers))

    async def _answer_one(self, tp: TopicPartition, waiters: list[asyncio.Future[_PartitionOffsets]]) -> None:
        outcome: _PartitionOffsets | BaseException
        try:
            outcome = (await self._list_offsets([tp]))[tp]
        except SourceError as exc:
            outcome = exc
        self._settle({tp: waiters}, {tp: outcome})

    @staticmethod
    def _settle(
        pending: dict[TopicPartition, list[asyncio.Future[_PartitionOffsets]]],
        answers: dict[TopicPartition, _PartitionOffsets | BaseException],
    ) -> None:
        for tp, waiters in pending.items():
            outcome = answers[tp]
            for waiter in waiters:
                if waiter.done():  # its mirror stopped waiting (drain)
                    continue
                if isinstance(outcome, BaseException):
                    waiter.set_exception(outcome)
                else:
                    waiter.set_result(outcome)

    async def _list_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, _PartitionOffsets]:
        requests = asyncio.gather(
            self._committed.beginning_offsets(tps),
            self._committed.end_offsets(tps),
            self._uncommitted.end_offsets(tps),
        )
        # A gather cancelled by the timeout (or by close) ends with a CancelledError that wait_for never reads;
        # read it here, or asyncio logs "exception was never retrieved" as an ERROR line.
        requests.add_done_callback(_retrieve)
        try:
            start, stable, high = await asyncio.wait_for(requests, self._timeout_s)
        except (TimeoutError, KafkaError, OSError) as exc:
            where = f"{tps[0].topic}-{tps[0].partition}" if len(tps) == 1 else f"{len(tps)} partitions"
            raise SourceUnavailableError(
                f"source {where} on {self.bootstrap_servers}: offset query failed: {_describe(exc)}"
            ) from None
        return {tp: (start[tp], stable[tp], high[tp]) for tp in tps}

    async def close(self) -> None:
        batches = list(self._batches)
        for batch in batches:
            batch.cancel()
        # Wait for them before the consumers stop: a request cut off by the stop would end its gather with
        # an exception no one retrieves (asyncio logs that as an ERROR of its own).
        await asyncio.gather(*batches, return_exceptions=True)
        if self._metadata_fetch is not None and not self._metadata_fetch.done():
            self._metadata_fetch.cancel()
        # A batch cancelled before it ran never answers its queries: fail them here.
        pending, self._pending = self._pending, {}
        failure = SourceError(f"source {self.bootstrap_servers}: offset query failed: the client was closed")
        self._settle(pending, dict.fromkeys(pending, failure))
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

        Raises kafka_clients.settings.ClientSettingsError when its TLS files cannot be loaded.
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


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, KafkaConnectionError):
        return "no bootstrap server answered"
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]
