"""The Kafka destination: one partition of another cluster, in `preserve` or `renumber` mode.

preserve: destination offset == source offset. The partition's end offset *is* the position. An
  idempotent producer appends each chunk in batches, and every batch's delivered base offset must be
  the source offset of its first record. A chunk with a hole (compaction, transaction markers) cannot
  be reproduced and stops the mirror. On open, a non-empty partition must end with the source's own
  record at the same offset, so foreign data is never continued.

renumber: records get the destination's next offsets and carry header `mirror-v3.source-offset`.
  Each chunk is one transaction of a producer whose `transactional.id` is fixed per destination
  partition (a newer process fences an older one). The transaction also commits the next source
  offset for consumer group `<prefix>.<dest-name>` on the destination cluster. The position is that
  committed offset, or the last record's header + 1 if that is further (the group's offsets expire
  after `offsets.retention.minutes` of inactivity, and are applied a moment after the records).

A commit that fails half-way is resolved from the destination before anything is sent again: the
producer is replaced (which aborts or completes the open transaction) and the position re-read.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

import anyio
import anyio.to_thread
import pyarrow as pa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, ProducerFenced

from config.kafka_clients import diagnose_bootstrap
from sinks.base import Chunk, Committed, DestinationError, Inspection
from sinks.kafka_records import PreparedBatch, build_batches, first_hole, parse_source_offset
from sinks.retry import TransientDestinationError
from sinks.staging import RecordsToDriver, StagedBlob

log = logging.getLogger("mirror_v3.sinks.kafka")
T = TypeVar("T")

# How far back from the end the renumber position search looks at first (offsets).
_TAIL_WINDOW = 1_000


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


class SourceLookup(Protocol):
    """Read access to the mirror's source partition, for the preserve-mode alignment check."""

    async def log_start(self) -> int: ...

    async def record_at(self, offset: int) -> KafkaRecord | None: ...


@dataclass(frozen=True)
class KafkaSinkSettings:
    bootstrap_servers: str
    client: dict[str, Any]  # aiokafka security settings (config.kafka_clients.aiokafka_settings)
    offsets: Literal["preserve", "renumber"]
    compression: str | None
    max_batch_bytes: int
    request_timeout_ms: int
    transaction_id_prefix: str


class KafkaClients:
    """Short-lived clients of one Kafka cluster: metadata, watermarks, reading a few records.

    Used on open, after a failure and by `status`, never per record, so each call connects afresh
    instead of sharing a consumer whose assignment concurrent callers would fight over.
    """

    def __init__(self, bootstrap_servers: str, client: dict[str, Any], request_timeout_ms: int) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._client = client
        self._timeout_ms = request_timeout_ms

    @contextlib.asynccontextmanager
    async def consumer(self, isolation: str) -> AsyncIterator[AIOKafkaConsumer]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation,
            request_timeout_ms=self._timeout_ms,
            client_id="mirror-v3-reader",
            **self._client,
        )
        try:
            await consumer.start()
            yield consumer
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await consumer.stop()

    @contextlib.asynccontextmanager
    async def admin(self) -> AsyncIterator[AIOKafkaAdminClient]:
        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers,
            request_timeout_ms=self._timeout_ms,
            client_id="mirror-v3-admin",
            **self._client,
        )
        try:
            await admin.start()
            yield admin
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await admin.close()

    async def partition_count(self, topic: str) -> int | None:
        """Partitions of `topic`, or None if it does not exist."""
        async with self.consumer("read_uncommitted") as consumer:
            metadata = await consumer._client.fetch_all_metadata()
        if topic not in metadata.topics():
            return None
        return len(metadata.partitions_for_topic(topic) or ())

    async def watermarks(self, tp: TopicPartition, isolation: str) -> tuple[int, int]:
        """(log start offset, end offset): the end is the high watermark for read_uncommitted and the
        last stable offset for read_committed."""
        async with self.consumer(isolation) as consumer:
            start = await consumer.beginning_offsets([tp])
            end = await consumer.end_offsets([tp])
        return start[tp], end[tp]

    async def records(self, tp: TopicPartition, first: int, end: int, isolation: str) -> list[KafkaRecord]:
        """Every record with offset in [first, end) visible at `isolation` (end <= the partition's end)."""
        out: list[KafkaRecord] = []
        if end <= first:
            return out
        deadline = time.monotonic() + self._timeout_ms / 1000
        async with self.consumer(isolation) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, first)
            while await consumer.position(tp) < end:
                if time.monotonic() > deadline:
                    raise KafkaTimeoutError(f"reading {tp.topic}-{tp.partition} offsets {first}..{end - 1}")
                fetched = await consumer.getmany(tp, timeout_ms=500)
                for message in fetched.get(tp, []):
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

    async def record_at(self, tp: TopicPartition, offset: int, isolation: str) -> KafkaRecord | None:
        found = await self.records(tp, offset, offset + 1, isolation)
        return found[0] if found else None

    async def committed_offset(self, group: str, tp: TopicPartition) -> int | None:
        deadline = time.monotonic() + self._timeout_ms / 1000
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


class KafkaSink:
    def __init__(
        self,
        settings: KafkaSinkSettings,
        topic: str,
        partition: int,
        source: SourceLookup,
        source_name: str,
        clients: KafkaClients | None = None,
    ) -> None:
        self._settings = settings
        self._tp = TopicPartition(topic, partition)
        self._source = source
        self._source_name = source_name  # "<topic>-<partition>" of the source, for messages
        # `clients` replaces the destination's clients (tests give an in-memory cluster).
        self._clients = clients or KafkaClients(
            settings.bootstrap_servers, settings.client, settings.request_timeout_ms
        )
        self._producer: AIOKafkaProducer | None = None
        self._position: int | None = None  # next source offset the destination expects
        self._uncertain = False  # a commit failed half-way: resolve from the destination first
        self.transactional_id = f"{settings.transaction_id_prefix}.{topic}.{partition}"
        self.group_id = f"{settings.transaction_id_prefix}.{topic}"

    @property
    def description(self) -> str:
        return f"kafka://{self._settings.bootstrap_servers}/{self._tp.topic}/{self._tp.partition} ({self._mode})"

    @property
    def _mode(self) -> str:
        return self._settings.offsets

    @property
    def _name(self) -> str:
        return f"destination {self._tp.topic}-{self._tp.partition}"

    # -- open / inspect ------------------------------------------------------------------------

    async def open(self) -> int | None:
        return await self._call(self._open)

    async def _open(self) -> int | None:
        await self._check_topic()
        if self._mode == "preserve":
            # An empty partition still has a position: the first record must land at offset 0.
            self._position = await self._preserve_position(verify=True)
            return self._position or None
        await self._start_producer()  # fences any older writer before the position is read
        self._position = await self._renumber_position()
        return self._position

    async def inspect(self, deep: bool = False) -> Inspection:
        """Read-only: no producer is started, so a running mirror is never fenced by `status`. Kafka
        records no write time of its own (record timestamps are the source's), so last_write is None."""

        async def inspect() -> Inspection:
            await self._check_topic()
            if self._mode == "preserve":
                return Inspection(await self._preserve_position(verify=deep) or None)
            return Inspection(await self._renumber_position())

        return await self._call(inspect)

    async def _check_topic(self) -> None:
        partitions = await self._clients.partition_count(self._tp.topic)
        where = self._settings.bootstrap_servers
        if partitions is None:
            raise DestinationError(
                f"destination topic {self._tp.topic!r} does not exist on {where}: create it with at least "
                f"{self._tp.partition + 1} partition(s) (mirror-v3 does not create topics)"
            )
        if partitions <= self._tp.partition:
            raise DestinationError(
                f"destination topic {self._tp.topic!r} on {where} has {partitions} partition(s); "
                f"partition {self._tp.partition} is needed: add partitions to it"
            )

    async def _preserve_position(self, verify: bool) -> int:
        log_start, end = await self._clients.watermarks(self._tp, "read_uncommitted")
        if end == 0:
            source_start = await self._source.log_start()
            if source_start != 0:
                raise DestinationError(
                    f"{self._name} is empty (end offset 0) but source {self._source_name} begins at offset "
                    f"{source_start}: offsets: preserve cannot put source offset {source_start} at destination "
                    "offset 0; use offsets: renumber"
                )
            return 0
        if verify:
            await self._check_alignment(end, log_start)
        return end

    async def _check_alignment(self, end: int, log_start: int) -> None:
        """The destination's last record must be the source's record at the same offset."""
        last = end - 1
        mine = await self._clients.record_at(self._tp, last, "read_uncommitted") if last >= log_start else None
        if mine is None:
            raise DestinationError(
                f"{self._name} ends at offset {end} but holds no record at offset {last} (a transaction marker, "
                f"compacted or deleted): it was not written by an offsets: preserve mirror of {self._source_name}"
            )
        theirs = await self._source.record_at(last)
        if theirs is None:
            raise DestinationError(
                f"{self._name} ends at offset {end}, but source {self._source_name} has no record at offset {last} "
                "to compare it with (compacted or a transaction marker): offsets: preserve cannot verify where to "
                "continue; use offsets: renumber"
            )
        if not mine.same_content(theirs):
            raise DestinationError(
                f"{self._name} ends at offset {end}, but its record at offset {last} differs from source "
                f"{self._source_name} offset {last}: the destination holds other data, so offsets: preserve "
                "cannot continue it (empty the partition, or use another topic or offsets: renumber)"
            )

    async def _renumber_position(self) -> int | None:
        committed = await self._clients.committed_offset(self.group_id, self._tp)
        from_header = await self._last_header_position(search_all=committed is None)
        if committed is None and from_header is not None:
            # Same structured fields as every other line (supervisor.logs formats them).
            fields = {"destination": self.description, "group": self.group_id, "last_source_offset": from_header - 1}
            log.warning(
                "no committed position in consumer group (expired after offsets.retention.minutes?); "
                "continuing after the last mirrored record",
                extra={"mirror_v3_fields": fields},
            )
        candidates = [p for p in (committed, from_header) if p is not None]
        return max(candidates) if candidates else None

    async def _last_header_position(self, search_all: bool) -> int | None:
        """1 + the source offset in the last committed record that carries one, searching backwards
        from the end (one window, or all the way to the log start when `search_all`)."""
        log_start, end = await self._clients.watermarks(self._tp, "read_committed")
        window = _TAIL_WINDOW
        upper = end
        while upper > log_start:
            lower = max(log_start, upper - window)
            records = await self._clients.records(self._tp, lower, upper, "read_committed")
            for record in reversed(records):
                offset = parse_source_offset(record.headers)
                if offset is not None:
                    return offset + 1
            if not search_all:
                return None
            upper, window = lower, window * 4
        return None

    # -- commit ----------------------------------------------------------------------------------

    def staging(self) -> RecordsToDriver:
        # The driver's producer owns the transactions, the fencing and the offset checks: the tasks
        # bring the records to it.
        return RecordsToDriver()

    async def commit(self, item: StagedBlob | Chunk) -> Committed:
        if not isinstance(item, Chunk):
            raise TypeError("the Kafka destination commits chunks of records, not staged blobs")
        chunk = item
        return await self._call(lambda: self._commit(chunk))

    async def discard(self, item: StagedBlob | Chunk) -> None:
        return None  # records in driver memory: nothing was written anywhere

    async def _commit(self, chunk: Chunk) -> Committed:
        if self._uncertain:
            resolved = await self._resolve(chunk)
            if resolved is not None:
                return resolved
        if self._position is not None and chunk.first_offset != self._position:
            raise DestinationError(
                f"{self._name}: chunk starts at source offset {chunk.first_offset}, "
                f"destination expects {self._position}"
            )
        records = chunk.records
        if self._mode == "preserve":
            hole = first_hole(records, chunk.first_offset, chunk.last_offset)
            if hole is not None:
                raise DestinationError(
                    f"source {self._source_name} offsets {hole[0]}..{hole[1]} hold no records (compaction, transaction "
                    "markers or aborted transactions): offsets: preserve cannot reproduce a hole; use offsets: renumber"
                )
        self._uncertain = True  # until this commit is known to have succeeded or to have changed nothing
        if self._mode == "preserve":
            committed = await self._send_preserve(records)
        else:
            committed = await self._send_renumber(chunk)
        self._uncertain = False
        self._position = chunk.last_offset + 1
        return committed

    async def _send_preserve(self, records: pa.Table) -> Committed:
        producer = await self._start_producer()
        batches = await self._prepare(records, producer, add_source_offset=False)
        delivered = await self._send(producer, batches)
        for batch, base_offset in zip(batches, delivered, strict=True):
            if base_offset != batch.first_source_offset:
                raise DestinationError(
                    f"{self._name}: source offsets {batch.first_source_offset}..{batch.last_source_offset} landed at "
                    f"destination offset {base_offset}: another producer writes to this partition"
                )
        return self._committed(batches, delivered)

    async def _send_renumber(self, chunk: Chunk) -> Committed:
        producer = await self._start_producer()
        batches = await self._prepare(chunk.records, producer, add_source_offset=True)
        await producer.begin_transaction()
        try:
            delivered = await self._send(producer, batches)
            await producer.send_offsets_to_transaction(
                {self._tp: (chunk.last_offset + 1, f"source={self._source_name}")}, self.group_id
            )
            await producer.commit_transaction()
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                # Best effort: a replaced producer (next attempt) aborts it anyway.
                await producer.abort_transaction()
            raise
        return self._committed(batches, delivered)

    async def _prepare(
        self, records: pa.Table, producer: AIOKafkaProducer, add_source_offset: bool
    ) -> list[PreparedBatch]:
        # Packing rows into batches is CPU work; a worker thread keeps the event loop answering.
        return await anyio.to_thread.run_sync(
            lambda: build_batches(records, producer.create_batch, add_source_offset=add_source_offset)
        )

    async def _send(self, producer: AIOKafkaProducer, batches: list[PreparedBatch]) -> list[int]:
        futures = [await producer.send_batch(b.builder, self._tp.topic, partition=self._tp.partition) for b in batches]
        return [int((await future).offset) for future in futures]

    def _committed(self, batches: list[PreparedBatch], delivered: list[int]) -> Committed:
        size = sum(batch.builder.size() for batch in batches)
        if not delivered:
            return Committed(location=f"{self._tp.topic}/{self._tp.partition} (no records)", bytes_written=0)
        last = delivered[-1] + batches[-1].record_count - 1
        return Committed(location=f"{self._tp.topic}/{self._tp.partition}@{delivered[0]}..{last}", bytes_written=size)

    async def _resolve(self, chunk: Chunk) -> Committed | None:
        """After a failed attempt: replace the producer, then ask the destination how much of `chunk`
        landed. Returns the commit if all of it did; otherwise leaves `chunk`'s remainder to send."""
        await self._stop_producer()
        if self._mode == "renumber":
            await self._start_producer()  # completes or aborts the failed transaction first
            position = await self._renumber_position()
            if position is not None and position > chunk.first_offset:
                # Transactions are atomic: any record of the chunk visible means all of it is.
                if position > chunk.last_offset + 1:
                    raise DestinationError(
                        f"{self._name}: destination position {position} is past the chunk "
                        f"{chunk.first_offset}..{chunk.last_offset} being retried: another writer?"
                    )
                return self._already_there(chunk)
            if position is not None and position < chunk.first_offset:
                raise DestinationError(
                    f"{self._name}: destination position fell back to {position} below {chunk.first_offset}"
                )
            self._uncertain = False
            return None
        _, end = await self._clients.watermarks(self._tp, "read_uncommitted")
        if not chunk.first_offset <= end <= chunk.last_offset + 1:
            raise DestinationError(
                f"{self._name} ends at offset {end}, outside the chunk {chunk.first_offset}..{chunk.last_offset} being "
                "retried: another producer writes to this partition"
            )
        if end == chunk.last_offset + 1:
            return self._already_there(chunk)
        # Resend only what is missing; `commit` continues from the destination's end.
        self._position, self._uncertain = end, False
        landed = end - chunk.first_offset
        if landed:
            fields = {"destination": self.description, "landed": landed, "resend_from": end}
            log.info("part of the retried chunk had landed", extra={"mirror_v3_fields": fields})
        return await self._commit(Chunk(end, chunk.last_offset, chunk.records.slice(landed)))

    def _already_there(self, chunk: Chunk) -> Committed:
        self._uncertain = False
        self._position = chunk.last_offset + 1
        where = f"{self._tp.topic}/{self._tp.partition}"
        return Committed(location=f"{where} (committed by the previous attempt)", bytes_written=0)

    # -- producer lifecycle ----------------------------------------------------------------------

    async def _start_producer(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        settings = self._settings
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.bootstrap_servers,
            client_id=f"mirror-v3.{self._tp.topic}.{self._tp.partition}",
            acks="all",
            enable_idempotence=True,
            transactional_id=self.transactional_id if self._mode == "renumber" else None,
            compression_type=settings.compression,
            max_batch_size=settings.max_batch_bytes,
            max_request_size=settings.max_batch_bytes + 64 * 1024,
            linger_ms=0,
            request_timeout_ms=settings.request_timeout_ms,
            **settings.client,
        )
        try:
            await producer.start()
        except BaseException:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await producer.stop()
            raise
        self._producer = producer
        return producer

    async def _stop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await producer.stop()

    async def close(self) -> None:
        await self._stop_producer()

    # -- errors ----------------------------------------------------------------------------------

    async def _call(self, operation: Callable[[], Awaitable[T]]) -> T:
        """Run a destination operation, turning client errors into the retry layer's two kinds."""
        try:
            return await operation()
        except DestinationError:
            raise
        except ProducerFenced:
            await self._stop_producer()
            raise DestinationError(
                f"{self._name}: fenced by a newer producer with transactional.id {self.transactional_id}: another "
                "process runs this mirror"
            ) from None
        except (KafkaError, OSError, TimeoutError) as exc:
            await self._stop_producer()
            detail, transient = _describe(exc), _is_transient(exc)
            if isinstance(exc, KafkaConnectionError):
                diagnosis = await diagnose_bootstrap(
                    self._settings.bootstrap_servers, self._settings.client, self._settings.request_timeout_ms
                )
                detail, transient = f"unreachable: {diagnosis.reason}", not diagnosis.permanent
            message = f"{self._name} on {self._settings.bootstrap_servers}: {detail}"
            if transient:
                raise TransientDestinationError(message) from None
            raise DestinationError(message) from None


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError, OSError, TimeoutError)):
        return True
    return isinstance(exc, KafkaError) and bool(getattr(exc, "retriable", False))


def _describe(exc: BaseException) -> str:
    if isinstance(exc, KafkaConnectionError):
        return "cannot connect"
    if isinstance(exc, (KafkaTimeoutError, TimeoutError)) and not str(exc).strip():
        return "request timed out (destination.request-timeout-ms)"
    text = str(exc).strip().splitlines()
    name = type(exc).__name__
    return f"{name}: {text[0]}" if text and text[0] and text[0] != name else name


class KafkaSourceLookup:
    """SourceLookup over the mirror's source cluster (aiokafka, at the mirror's isolation level)."""

    def __init__(self, clients: KafkaClients, topic: str, partition: int, isolation: str) -> None:
        self._clients = clients
        self._tp = TopicPartition(topic, partition)
        self._isolation = isolation

    async def log_start(self) -> int:
        start, _ = await self._clients.watermarks(self._tp, self._isolation)
        return start

    async def record_at(self, offset: int) -> KafkaRecord | None:
        return await self._clients.record_at(self._tp, offset, self._isolation)
