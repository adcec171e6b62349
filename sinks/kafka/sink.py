"""The Kafka destination: one partition of another cluster, in `preserve` or `renumber` mode.

The records are produced by the Spark tasks (the task half, `sinks.kafka.produce`), never by the driver. This
sink, the driver half, finds where the destination ends on open, hands each job its target (`target`) and records each
range a task reports as produced, in offset order.

preserve: destination offset == source offset. The partition's end offset *is* the position. A task's
  idempotent producer appends the range, and every delivered offset must be its source offset. A range
  with a hole (compaction, transaction markers) cannot be reproduced and stops the mirror. On open, a
  non-empty partition must end with the source's own record at the same offset, so foreign data is
  never continued.

renumber: records get the destination's next offsets and carry header `mirror-v3.source-offset`.
  Each range is one transaction of a producer whose `transactional.id` is fixed per destination
  partition. The transaction also commits the next source offset for consumer group
  `<prefix>.<dest-name>` on the destination cluster. The position is that committed offset, or the
  last record's header + 1 if that is further (the group's offsets expire after
  `offsets.retention.minutes` of inactivity, and are applied a moment after the records). On open the
  sink takes the partition over (commits a random id of this process as the offset of group
  `<prefix>.<dest-name>.owner`), then fences every older producer: a task of an older process that is
  still running finds another owner and stops, so a newer process fences an older one.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

import anyio
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError, ProducerFenced

from core.kafka_records import parse_source_offset
from core.logs import log_event
from kafka_clients.clients import KafkaClients, KafkaRecord, PartitionReads, new_producer
from kafka_clients.diagnosis import diagnose_bootstrap
from sinks.base import Committed, DestinationError, FencedError, Inspection
from sinks.kafka.produce import KafkaProduceTarget, ProducedRange
from sinks.retry import RetryPolicy, TransientDestinationError
from sinks.schemas.rewrite import SchemaRewrite, rewriter_for

log = logging.getLogger("mirror_v3.sinks.kafka")
T = TypeVar("T")

# How far back from the end the renumber position search looks at first (offsets).
_TAIL_WINDOW = 1_000


class SourceLookup(Protocol):
    """Read access to the mirror's source partition, for the preserve-mode alignment check."""

    async def log_start(self) -> int: ...

    async def record_at(self, offset: int) -> KafkaRecord | None: ...


def partition_name(topic: str, partition: int) -> str:
    """How messages name a destination partition."""
    return f"destination {topic}-{partition}"


def refuse_preserve_into_empty(destination: str, source: str, source_start: int) -> None:
    """offsets: preserve into an empty partition: its first record goes to offset 0, so the source must begin
    there."""
    if source_start != 0:
        raise DestinationError(
            f"{destination} is empty (end offset 0) but source {source} begins at offset {source_start}: offsets: "
            f"preserve cannot put source offset {source_start} at destination offset 0; use offsets: renumber"
        )


@dataclass(frozen=True)
class KafkaSinkSettings:
    bootstrap_servers: str
    client: dict[str, Any]  # aiokafka security settings (kafka_clients.settings.aiokafka_settings)
    offsets: Literal["preserve", "renumber"]
    compression: str | None
    max_batch_bytes: int
    request_timeout_ms: int
    transaction_id_prefix: str
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    client_properties: dict[str, str] = field(default_factory=dict, repr=False)  # librdkafka, for the tasks


async def first_mapped(reads: PartitionReads, lower: int, end: int) -> tuple[int, int] | None:
    """renumber: (destination offset, source offset) of the first committed record in destination offsets
    [lower, end) that carries a source offset; None when none does. Reads forward in growing windows (a range of
    transaction markers and aborted records is skipped in a few reads; a record of its own is usually the first).
    `reads`: the partition, read committed."""
    window = 16
    while lower < end:
        upper = min(end, lower + window)
        for record in await reads.records(lower, upper):
            found = parse_source_offset(record.headers)
            if found is not None:
                return record.offset, found
        lower, window = upper, min(window * 4, _TAIL_WINDOW)
    return None


def next_probe(
    lower: int, upper: int, below: tuple[int, int] | None, above: tuple[int, int] | None, source_offset: int
) -> int:
    """Where a search for `source_offset` reads next, within [lower, upper): where the records found so far say it
    lies. `below` is the last record found that maps under it and `above` the last that maps at or over it, each as
    (destination offset, source offset). Between two such records the destination offsets follow the source offsets
    at their average pace (one to one where the range has no holes, fewer where it has, a transaction's marker
    adding one), so the guess is their straight line; past the last one below, one to one. Pure, O(1)."""
    if below is None:
        guess = lower  # nothing known yet: the first record says where the partition starts
    elif above is not None and above[1] > below[1]:
        span = above[0] - below[0]
        guess = below[0] + -(-(source_offset - below[1]) * span // (above[1] - below[1]))  # rounded up
    else:
        guess = below[0] + source_offset - below[1]
    return min(max(guess, lower), upper - 1)


async def destination_offset_for(clients: KafkaClients, tp: TopicPartition, source_offset: int) -> int:
    """renumber: where a reader of the destination continues when a reader of the source would continue at
    `source_offset`: the destination offset of the first committed record whose source offset is at or above
    it, or the partition's committed end when none is (the next record written will be). Records go out in
    source order, so the source offsets only grow along the partition and a search narrows [lower, upper) with
    each read, all through one consumer. It reads where the records found so far put the answer (`next_probe`: a
    restored or mirrored range maps nearly one to one, so a few reads find it; a binary search took 18 reads in a
    partition of 250 000 records, each a fetched batch of up to a MiB), and halves the interval instead whenever
    such a guess did not: never more than about twice a binary search's reads."""
    async with clients.one_partition(tp, "read_committed") as reads:
        log_start, end = await reads.watermarks()
        lower, upper = log_start, end  # the answer's position: the first x whose first mapped record maps >= it
        below: tuple[int, int] | None = None
        above: tuple[int, int] | None = None
        halve = False
        while lower < upper:
            width = upper - lower
            middle = (lower + upper) // 2 if halve else next_probe(lower, upper, below, above, source_offset)
            found = await first_mapped(reads, middle, end)
            if found is None or found[1] >= source_offset:
                upper = middle
                above = found or above
            else:  # every position up to that record leads to it: the answer lies beyond
                lower = found[0] + 1
                below = found
            halve = not halve and upper - lower > width // 2
        found = await first_mapped(reads, lower, end)
    return end if found is None else found[0]


class KafkaSink:
    def __init__(
        self,
        settings: KafkaSinkSettings,
        topic: str,
        partition: int,
        source: SourceLookup,
        source_name: str,
        clients: KafkaClients | None = None,
        cluster_ids: tuple[str, str] | None = None,
        schemas: SchemaRewrite | None = None,
        take_lease: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._settings = settings
        self._take_lease = take_lease  # `sinks.kafka.leases`: before open() fences or appends anything
        self._schemas = schemas  # the tasks give each record its schema's ID at the destination registry
        # renumber: (source cluster id, destination cluster id), so the tasks stamp the source's on every record
        # and leave out those a mirror copied from the destination (two-way mirrors); None: neither.
        self._cluster_ids = cluster_ids
        self._tp = TopicPartition(topic, partition)
        self._source = source
        self._source_name = source_name  # "<topic>-<partition>" of the source, for messages
        self.transactional_id = f"{settings.transaction_id_prefix}.{topic}.{partition}"
        self.group_id = f"{settings.transaction_id_prefix}.{topic}"
        # `clients` replaces the destination's clients (tests give an in-memory cluster).
        self._clients = clients or KafkaClients(
            settings.bootstrap_servers, settings.client, settings.request_timeout_ms
        )
        self._producer: AIOKafkaProducer | None = None  # renumber: only while opening (fence, claim)
        self._position: int | None = None  # next source offset the destination expects
        # renumber: this process's id, committed as the offset of `owner_group` when it takes the partition over.
        self.writer = secrets.randbelow(2**62) + 1
        self.owner_group = f"{self.group_id}.owner"
        self._expected: int | None = None  # renumber: the group's committed offset, as the tasks must find it

    @property
    def description(self) -> str:
        return f"kafka://{self._settings.bootstrap_servers}/{self._tp.topic}/{self._tp.partition} ({self._mode})"

    @property
    def _mode(self) -> str:
        return self._settings.offsets

    @property
    def _name(self) -> str:
        return partition_name(self._tp.topic, self._tp.partition)

    # -- open / inspect ------------------------------------------------------------------------

    async def open(self) -> int | None:
        return await self._call(self._open)

    def claimed_range(self) -> tuple[int, int] | None:
        return None  # a transaction (or the preserve offset check) settles an interrupted write at once

    async def _open(self) -> int | None:
        await self._check_topic()
        if self._take_lease is not None:  # a live writer is left alone: neither fenced nor appended to
            await self._take_lease()
        if self._mode == "preserve":
            # An empty partition still has a position: the first record must land at offset 0.
            self._position = await self._preserve_position(verify=True)
            return self._position or None
        # Take the partition over first, then fence: a task of an older process that begins after the
        # first step finds another owner and stops; one that began before is fenced by the second.
        await self._clients.commit_offset(self.owner_group, self._tp, self.writer)
        await self._start_producer()  # fences any older writer (and aborts its open transaction)
        try:
            self._position, self._expected = await self._renumber_position()
        finally:
            await self._stop_producer()  # the tasks' producers take the transactional.id over from here
        return self._position

    async def inspect(self, deep: bool = False) -> Inspection:
        """Read-only: no producer is started, so a running mirror is never fenced by `status`. Kafka
        records no write time of its own (record timestamps are the source's), so last_write is None."""

        async def inspect() -> Inspection:
            await self._check_topic()
            if self._mode == "preserve":
                return Inspection(await self._preserve_position(verify=deep) or None)
            position, _ = await self._renumber_position()
            return Inspection(position)

        return await self._call(inspect)

    async def stamps_log_append_time(self) -> bool:
        """Whether the destination topic stamps records with the broker's time (message.timestamp.type
        LogAppendTime), so the timestamps the sink sets are replaced."""
        found = await self._call(lambda: self._clients.topic_config(self._tp.topic, "message.timestamp.type"))
        return found == "LogAppendTime"

    async def _check_topic(self) -> None:
        partitions = await self._clients.partition_count(self._tp.topic)
        where = self._settings.bootstrap_servers
        if partitions is None:
            raise DestinationError(
                f"destination topic {self._tp.topic!r} does not exist on {where}: create it with at least "
                f"{self._tp.partition + 1} partition(s), or set destination.create-topics: true"
            )
        if partitions <= self._tp.partition:
            raise DestinationError(
                f"destination topic {self._tp.topic!r} on {where} has {partitions} partition(s); "
                f"partition {self._tp.partition} is needed: add partitions to it"
            )

    async def _preserve_position(self, verify: bool) -> int:
        log_start, end = await self._clients.watermarks(self._tp, "read_uncommitted")
        if end == 0:
            refuse_preserve_into_empty(self._name, self._source_name, await self._source.log_start())
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
        if self._schemas is not None:  # the tasks gave its key and value the destination registry's IDs
            theirs = await anyio.to_thread.run_sync(rewriter_for(self._schemas).as_written, theirs)
        if not mine.same_content(theirs):
            raise DestinationError(
                f"{self._name} ends at offset {end}, but its record at offset {last} differs from source "
                f"{self._source_name} offset {last}: the destination holds other data, so offsets: preserve "
                "cannot continue it (empty the partition, or use another topic or offsets: renumber)"
            )

    async def _renumber_position(self) -> tuple[int | None, int | None]:
        """(the position, the group's committed offset): they differ when the group's offset expired or
        was applied after the records."""
        committed = await self._clients.committed_offset(self.group_id, self._tp)
        from_header = await self._last_header_position(search_all=committed is None)
        if committed is None and from_header is not None:
            log_event(
                log,
                logging.WARNING,
                "no committed position in consumer group (expired after offsets.retention.minutes?); "
                "continuing after the last mirrored record",
                destination=self.description,
                group=self.group_id,
                last_source_offset=from_header - 1,
            )
        candidates = [p for p in (committed, from_header) if p is not None]
        return (max(candidates) if candidates else None), committed

    async def _last_header_position(self, search_all: bool) -> int | None:
        """1 + the source offset in the last committed record that carries one, searching backwards
        from the end (one window, or all the way to the log start when `search_all`)."""
        async with self._clients.one_partition(self._tp, "read_committed") as reads:
            log_start, end = await reads.watermarks()
            window = _TAIL_WINDOW
            upper = end
            while upper > log_start:
                lower = max(log_start, upper - window)
                for record in reversed(await reads.records(lower, upper)):
                    offset = parse_source_offset(record.headers)
                    if offset is not None:
                        return offset + 1
                if not search_all:
                    return None
                upper, window = lower, window * 4
        return None

    async def extent(self) -> tuple[int, int]:
        """(log start, end) of the destination partition as this mode reads it: renumber reads committed
        records only, so its end is the last stable offset."""
        isolation = "read_uncommitted" if self._mode == "preserve" else "read_committed"
        return await self._call(lambda: self._clients.watermarks(self._tp, isolation))

    async def source_offset_from(self, offset: int, end: int) -> int | None:
        """renumber: the source offset carried by the first committed record in destination offsets [offset, end)
        that carries one; None when none does. Reads forward in growing windows (a range of transaction markers
        and aborted records is skipped in a few reads; a record of its own is usually the first one)."""

        async def search() -> int | None:
            async with self._clients.one_partition(self._tp, "read_committed") as reads:
                found = await first_mapped(reads, offset, end)
            return None if found is None else found[1]

        return await self._call(search)

    # -- commit ----------------------------------------------------------------------------------

    def target(self) -> KafkaProduceTarget:
        # The tasks produce the records themselves; the target carries the position this sink expects,
        # which a renumber task checks inside its transaction before writing anything.
        settings = self._settings
        return KafkaProduceTarget(
            bootstrap_servers=settings.bootstrap_servers,
            topic=self._tp.topic,
            partition=self._tp.partition,
            offsets=settings.offsets,
            source_name=self._source_name,
            transactional_id=self.transactional_id,
            group_id=self.group_id,
            owner_group=self.owner_group,
            writer=self.writer,
            expected=self._expected,
            compression=settings.compression,
            max_batch_bytes=settings.max_batch_bytes,
            request_timeout_ms=settings.request_timeout_ms,
            retry=settings.retry,
            client_properties=settings.client_properties,
            source_cluster=None if self._cluster_ids is None else self._cluster_ids[0],
            skip_cluster=None if self._cluster_ids is None else self._cluster_ids[1],
            schemas=self._schemas,
        )

    async def commit(self, item: ProducedRange) -> Committed:
        """The task's range is at the destination already (preserve: checked offset by offset; renumber:
        committed with the position). Recording it means checking that it continues where the last one
        ended."""
        if self._position is not None and item.first != self._position:
            raise DestinationError(
                f"{self._name}: a task produced source offsets {item.first}..{item.last}, but the destination "
                f"expected {self._position} next"
            )
        self._position = item.last + 1
        if self._mode == "renumber":
            self._expected = self._position
        where = f"{self._tp.topic}/{self._tp.partition}"
        if item.destination_first is None:
            landed = "no records" if item.records == 0 else "committed by an earlier attempt"
            return Committed(location=f"{where} ({landed})", bytes_written=item.record_bytes if item.records else 0)
        return Committed(
            location=f"{where}@{item.destination_first}..{item.destination_last}", bytes_written=item.record_bytes
        )

    async def discard(self, item: ProducedRange) -> None:
        return None  # a produced range is at the destination or, its transaction aborted, nowhere

    # -- producer lifecycle ----------------------------------------------------------------------

    async def _start_producer(self) -> AIOKafkaProducer:
        if self._producer is not None:
            return self._producer
        settings = self._settings
        producer = new_producer(
            settings.bootstrap_servers,
            settings.client,
            settings.request_timeout_ms,
            f"mirror-v3.{self._tp.topic}.{self._tp.partition}",
            self.transactional_id if self._mode == "renumber" else None,
            settings.compression,
            settings.max_batch_bytes,
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
            raise FencedError(self._name, self.transactional_id) from None
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
