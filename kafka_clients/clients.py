"""The aiokafka clients of the process: how they are built, the one use of aiokafka's private API (full
metadata), and short-lived clients of one cluster for metadata, watermarks, a few records and group offsets."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import anyio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, KafkaTimeoutError

C = TypeVar("C")


def new_consumer(
    bootstrap_servers: str,
    settings: dict[str, Any],
    request_timeout_ms: int,
    isolation: str,
    client_id: str,
    group_id: str | None = None,
    **options: Any,
) -> AIOKafkaConsumer:
    """A consumer that never commits on its own: mirror-v3 reads positions from the destination, and commits to a
    group only where it says so. `settings` are the cluster's security settings (kafka_clients.settings)."""
    return AIOKafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        enable_auto_commit=False,
        isolation_level=isolation,
        request_timeout_ms=request_timeout_ms,
        client_id=client_id,
        **options,
        **settings,
    )


def new_producer(
    bootstrap_servers: str,
    settings: dict[str, Any],
    request_timeout_ms: int,
    client_id: str,
    transactional_id: str | None,
    compression: str | None,
    max_batch_bytes: int,
) -> AIOKafkaProducer:
    """An idempotent producer that waits for every in-sync replica (transactional when `transactional_id` is
    given), sending at once: mirror-v3 produces only small administrative records from the driver."""
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap_servers,
        client_id=client_id,
        acks="all",
        enable_idempotence=True,
        transactional_id=transactional_id,
        compression_type=compression,
        max_batch_size=max_batch_bytes,
        max_request_size=max_batch_bytes + 64 * 1024,
        linger_ms=0,
        request_timeout_ms=request_timeout_ms,
        **settings,
    )


async def fetch_all_metadata(consumer: AIOKafkaConsumer) -> Any:
    """Every topic of the cluster with its partitions (aiokafka's ClusterMetadata), in one request.

    The one use of aiokafka's private API: `consumer.topics()` fetches the same response and keeps only the
    topic names, and the admin client's answer would be decoded into a second form."""
    return await consumer._client.fetch_all_metadata()


@contextlib.asynccontextmanager
async def _started(
    client: C, start: Callable[[], Awaitable[Any]], stop: Callable[[], Awaitable[Any]]
) -> AsyncIterator[C]:
    try:
        await start()
        yield client
    finally:
        # Shielded: a client left half-stopped by a cancellation would hold its connections and tasks.
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await stop()


@dataclass(frozen=True)
class KafkaRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int
    create_time: bool  # False when the broker stamped LogAppendTime

    def same_content(self, other: KafkaRecord) -> bool:
        """Byte-for-byte equal; timestamps only compared when both are the producer's CreateTime."""
        if (self.key, self.value, self.headers) != (other.key, other.value, other.headers):
            return False
        return not (self.create_time and other.create_time) or self.timestamp_ms == other.timestamp_ms


class PartitionReads(Protocol):
    """Reads of one partition at one isolation level (`KafkaClients.one_partition`)."""

    async def watermarks(self) -> tuple[int, int]:
        """(log start offset, end offset): the end is the high watermark for read_uncommitted and the last stable
        offset for read_committed."""
        ...

    async def records(self, first: int, end: int) -> list[KafkaRecord]:
        """Every record with offset in [first, end) visible at the isolation level (end <= the partition's end)."""
        ...


class _ConsumerReads:
    """PartitionReads over one consumer, assigned the partition at its first read of records."""

    def __init__(self, consumer: AIOKafkaConsumer, tp: TopicPartition, timeout_ms: int) -> None:
        self._consumer, self._tp, self._timeout_ms = consumer, tp, timeout_ms
        self._assigned = False

    async def watermarks(self) -> tuple[int, int]:
        start = await self._consumer.beginning_offsets([self._tp])
        end = await self._consumer.end_offsets([self._tp])
        return start[self._tp], end[self._tp]

    async def records(self, first: int, end: int) -> list[KafkaRecord]:
        out: list[KafkaRecord] = []
        if end <= first:
            return out
        consumer, tp = self._consumer, self._tp
        if not self._assigned:
            consumer.assign([tp])
            self._assigned = True
        deadline = time.monotonic() + self._timeout_ms / 1000
        consumer.seek(tp, first)
        while (position := await consumer.position(tp)) < end:
            if time.monotonic() > deadline:
                raise KafkaTimeoutError(f"reading {tp.topic}-{tp.partition} offsets {first}..{end - 1}")
            # No more records than the range can hold: a fetch brings whole batches (a restore's hold thousands of
            # records), and aiokafka makes a record object of each one it returns, then fetches the partition again
            # in the background once none is left. What stays buffered is dropped by the next seek, unmade.
            fetched = await consumer.getmany(tp, timeout_ms=500, max_records=end - position)
            for message in fetched.get(tp, []):
                if message.offset < first:
                    continue  # (aiokafka drops what it fetched before a seek: a guard, should a version not)
                if message.offset >= end:
                    return out
                out.append(
                    KafkaRecord(
                        offset=message.offset,
                        key=message.key,
                        value=message.value,
                        headers=tuple(message.headers or ()),
                        timestamp_ms=message.timestamp,
                        create_time=message.timestamp_type == 0,
                    )
                )
        return out


@contextlib.asynccontextmanager
async def _one_consumer(clients: KafkaClients, tp: TopicPartition, isolation: str) -> AsyncIterator[PartitionReads]:
    async with clients.consumer(isolation) as consumer:
        yield _ConsumerReads(consumer, tp, clients.timeout_ms)


class KafkaClients:
    """Short-lived clients of one Kafka cluster: metadata, watermarks, reading a few records.

    Used on open, after a failure and by `status`, never per record, so each call connects afresh
    instead of sharing a consumer whose assignment concurrent callers would fight over.
    """

    def __init__(self, bootstrap_servers: str, settings: dict[str, Any], request_timeout_ms: int) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._settings = settings
        self.timeout_ms = request_timeout_ms

    def consumer(
        self, isolation: str, group_id: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[AIOKafkaConsumer]:
        consumer = new_consumer(
            self.bootstrap_servers, self._settings, self.timeout_ms, isolation, "mirror-v3-reader", group_id
        )
        return _started(consumer, consumer.start, consumer.stop)

    def admin(self) -> contextlib.AbstractAsyncContextManager[AIOKafkaAdminClient]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers,
            request_timeout_ms=self.timeout_ms,
            client_id="mirror-v3-admin",
            **self._settings,
        )
        return _started(admin, admin.start, admin.close)

    async def partition_count(self, topic: str) -> int | None:
        """Partitions of `topic`, or None if it does not exist."""
        async with self.consumer("read_uncommitted") as consumer:
            metadata = await fetch_all_metadata(consumer)
        if topic not in metadata.topics():
            return None
        return len(metadata.partitions_for_topic(topic) or ())

    async def topic_config(self, topic: str, name: str) -> str | None:
        """The value of one config of `topic` (its own or the broker's default), or None if the broker sent none."""
        async with self.admin() as admin:
            responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic, {name: None})])
        for response in responses:
            for error_code, error_message, _, _, entries in response.resources:
                if error_code:
                    raise KafkaError(f"describe configs of {topic}: error {error_code} {error_message or ''}")
                for entry in entries:
                    if entry[0] == name:
                        return None if entry[1] is None else str(entry[1])
        return None

    def one_partition(
        self, tp: TopicPartition, isolation: str
    ) -> contextlib.AbstractAsyncContextManager[PartitionReads]:
        """One consumer for several reads of one partition (a binary search makes ~log2(n) of them): started once,
        not once per read (each start is a bootstrap connection and a metadata round trip)."""
        return _one_consumer(self, tp, isolation)

    async def watermarks(self, tp: TopicPartition, isolation: str) -> tuple[int, int]:
        """(log start offset, end offset): the end is the high watermark for read_uncommitted and the
        last stable offset for read_committed."""
        async with self.one_partition(tp, isolation) as reads:
            return await reads.watermarks()

    async def records(self, tp: TopicPartition, first: int, end: int, isolation: str) -> list[KafkaRecord]:
        """Every record with offset in [first, end) visible at `isolation` (end <= the partition's end)."""
        if end <= first:
            return []
        async with self.one_partition(tp, isolation) as reads:
            return await reads.records(first, end)

    async def record_at(self, tp: TopicPartition, offset: int, isolation: str) -> KafkaRecord | None:
        found = await self.records(tp, offset, offset + 1, isolation)
        return found[0] if found else None

    async def commit_offset(self, group: str, tp: TopicPartition, offset: int) -> None:
        """Commit `offset` for `tp` in `group`, as a consumer that never joins the group."""
        # Shielded, and bounded instead: aiokafka shields its own commit task, so a commit cancelled from
        # outside would go on against a consumer being stopped and die with an exception nobody retrieves
        # (asyncio logs it as an ERROR line of its own).
        with anyio.CancelScope(shield=True), anyio.fail_after(self.timeout_ms / 1000):
            async with self.consumer("read_uncommitted", group_id=group) as consumer:
                consumer.assign([tp])
                await consumer.commit({tp: offset})

    async def committed_offset(self, group: str, tp: TopicPartition) -> int | None:
        deadline = time.monotonic() + self.timeout_ms / 1000
        async with self.admin() as admin:
            while True:
                try:
                    offsets = await admin.list_consumer_group_offsets(group, partitions=[tp])
                    break
                except KafkaError as exc:
                    # A new cluster creates __consumer_offsets on the first group lookup, and a
                    # coordinator may be loading or moving: these pass within moments.
                    if not getattr(exc, "retriable", False) or time.monotonic() > deadline:
                        raise
                    await anyio.sleep(0.2)
        found = offsets.get(tp)
        return None if found is None or found.offset < 0 else int(found.offset)
