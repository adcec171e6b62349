"""The Kafka destination's task half: copy an exact offset range into a destination partition, inside a Spark task.

The driver's sink (`sinks.kafka.sink.KafkaSink`) decides the target per job and records each reported range as
committed; the target is a small frozen value that travels to the executors inside the job's closure.

The task reads the range from the reader it is given (a live source partition, or archived blobs for `restore`)
and produces each record with librdkafka, so no
record passes through the driver or Spark's JVM. What keeps it exactly once:

preserve: before writing, the destination partition must end exactly where the range begins; every
  record is produced by an idempotent producer and its delivered offset must be its source offset. A
  hole in the range (compaction, transaction markers, aborted records, skipped lost offsets) cannot be
  reproduced: the records before it are delivered, then the task fails naming the hole. librdkafka
  retries an unreachable destination itself until `retry.deadline-ms`; its sequence numbers keep a
  resent batch from landing twice.

renumber: one transaction per range. After `init_transactions` has fenced every earlier producer of the
  partition (an older process, or an earlier attempt of this task), this process must still own the
  partition (the owner group's committed offset is its id: a newer process commits its own id there
  before it fences, so a task of an older one stops) and the group's committed position must be the
  one the driver expects; only then are the records produced, each with the `mirror-v3.source-offset`
  and `mirror-v3.source-cluster` headers, and the range's end committed as the position in the same
  transaction. A record copied from the destination cluster (its cluster header names it) is left out, so
  two-way mirrors never copy a record back. A transient failure
  aborts the transaction and runs it again from the source, until the retry deadline; a position at
  the range's end means an earlier attempt succeeded and its answer was lost.
"""

from __future__ import annotations

import contextlib
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Protocol

import numpy as np

from core.errors import MirrorV3Error
from core.kafka_records import SOURCE_OFFSET_HEADER, copied_from, source_cluster_header
from core.messages import header_bytes, message_bytes
from core.record_times import RecordTimes
from kafka_clients.oauth_tokens import librdkafka_config
from sinks.base import FencedError
from sinks.retry import RetryPolicy, TransientDestinationError, retry_transient_sync
from sinks.schemas.rewrite import SchemaRewrite, rewriter_for
from sinks.write_target import BlobLimits, RecordSource, TaskRange, Written

# librdkafka error codes (confluent_kafka.KafkaError) that mean another producer took the partition over.
_FENCED = {-144, 47, 90}  # _FENCED, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
# ... and that another attempt may not meet, beyond those librdkafka flags retriable: local timeouts, lost
# connections, no broker up, a broker handle decommissioned during an outage (a watermark query met it; the
# client is dropped, the next attempt gets a new one), a coordinator that is loading or moving.
_TRANSIENT = {-185, -187, -195, -192, -137, 7, 14, 15, 16}
_UNKNOWN_PARTITION = -190
_FATAL = -150  # librdkafka's "the client is unusable"; the cause arrives through the error callback
# Fatal producer errors that a new producer would meet again (authorization, an old broker): every other
# fatal error (a sequence desynchronised by a lost connection, an unknown producer id) dies with the
# producer instance, so renumber mode starts a new one.
_PERMANENT_FATAL = {29, 31, 35, 53}  # TOPIC_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION
_FATAL_CAUSE_WAIT_S = 1.0
_TRANSACTION_TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class KafkaProduceTarget:
    bootstrap_servers: str
    topic: str
    partition: int
    offsets: Literal["preserve", "renumber"]
    source_name: str  # "<topic>-<partition>" of the source, for messages and the position's metadata
    transactional_id: str  # renumber: fixed per destination partition, so a newer producer fences an older one
    group_id: str  # renumber: the group whose committed offset is the position
    owner_group: str  # renumber: the group whose committed offset names the process that owns the partition
    writer: int  # renumber: this process's id, committed in `owner_group` when it took the partition over
    expected: int | None  # renumber: the position the driver knows (None: the group holds none)
    compression: str | None
    max_batch_bytes: int
    request_timeout_ms: int
    retry: RetryPolicy  # transient failures: a transaction is aborted and run again until the deadline
    client_properties: Mapping[str, str] = field(default_factory=dict, repr=False)  # security, credentials
    # renumber: the source cluster's id, written on every record; records copied from `skip_cluster` (the
    # destination's id) are not written back to it. None: no such header (a restore's archive has no cluster).
    source_cluster: str | None = None
    skip_cluster: str | None = None
    schemas: SchemaRewrite | None = None  # the records' schema IDs made the destination registry's

    @property
    def name(self) -> str:
        return f"destination {self.topic}-{self.partition}"

    @property
    def ordered(self) -> bool:
        return True  # a partition's records keep their order: one task writes a whole range

    @property
    def writes_at_once(self) -> int:
        # A renumber write is a transaction of its own producer: a dozen round trips to the destination (producer
        # id, coordinator, offsets, commit) for a few milliseconds of CPU. Preserve writes share the worker's one
        # idempotent producer and wait for its deliveries, so they run one after the other.
        return TRANSACTIONS_AT_ONCE if self.offsets == "renumber" else 1

    @property
    def abandons_cleanly(self) -> bool:
        # Renumber writes a transaction, aborted when it fails; preserve's records are in the partition once sent.
        return self.offsets == "renumber"

    def write(self, records: RecordSource, task: TaskRange, limits: BlobLimits) -> list[ProducedRange]:
        return [produce_range(records, task, self)]


@dataclass(frozen=True, kw_only=True)
class ProducedRange(Written):
    """Source offsets [first, last] are at the destination, durably (renumber: committed with the position).
    `retries` counts transactions the task aborted and ran again; `skipped` (renumber) the records copied from the
    destination cluster, left out because they came from there."""

    destination_first: int | None = None  # offsets the records got at the destination (None: no records)
    destination_last: int | None = None


class DestinationMovedError(MirrorV3Error):
    """The destination is not where the driver left it: another writer, or a partition changed by hand."""

    def __init__(self, destination: str, expected: object, found: object, what: str) -> None:
        self.destination, self.expected, self.found = destination, expected, found
        super().__init__(
            f"{destination}: {what} is {found}, expected {expected}: another producer writes to this partition"
        )


class ProducerFencedError(FencedError):
    """A newer mirror-v3 process writes this destination partition (found by a Spark task)."""


class DestinationTaskError(MirrorV3Error):
    """The destination refused the task's writes for good (authorization, a record too large, ...)."""

    def __init__(self, destination: str, problem: str) -> None:
        self.destination, self.problem = destination, problem
        super().__init__(f"{destination}: {problem}")


class UndeliveredRecordError(DestinationTaskError):
    """The destination did not take the record of `source_offset` (librdkafka's `reason`)."""

    def __init__(self, destination: str, source_offset: int, reason: str) -> None:
        super().__init__(destination, f"source offset {source_offset} was not delivered: {reason}")
        self.source_offset, self.reason = source_offset, reason


class PreserveHoleError(MirrorV3Error):
    """A range with a hole cannot keep its offsets at the destination."""

    def __init__(self, partition: str, first: int, last: int) -> None:
        self.partition, self.first, self.last = partition, first, last
        super().__init__(
            f"source {partition} offsets {first}..{last} hold no records (compaction, transaction markers or aborted "
            "transactions): offsets: preserve cannot reproduce a hole; use offsets: renumber"
        )


class ProduceClients(Protocol):
    """The librdkafka clients a task uses; tests give in-memory ones."""

    def producer(self, on_error: Callable[[Any], None] | None = None) -> Any:
        """`on_error` gets librdkafka's client-level errors (the fatal one behind a `_FATAL` exception)."""
        ...

    def group_consumer(self, group_id: str) -> Any:
        """A consumer of the destination cluster in `group_id` (for committed offsets; never subscribes)."""
        ...

    def release(self, client: Any, broken: bool = False) -> None:
        """Done with a producer or consumer for now: a client kept for the next write stays open; a `broken` one
        (its write failed: it may hold undelivered records or be unusable) is dropped and never handed out again."""
        ...


# Renumber transactions one task runs at the same time (each its own producer and transactional.id). Measured at
# 64 partitions x 1 s on two cores: one after the other, a task did about 14 writes a second (70 ms each, almost
# all of it waiting), too few for 64 partitions a second.
TRANSACTIONS_AT_ONCE = 8


class _KeptClients:
    """The destination clients a Python worker keeps between writes. Spark reuses its Python workers, and a shared
    job writes many partitions one after the other: an idempotent producer and a consumer per destination cluster
    serve them all, instead of a connection (and a producer id) per partition per flush. At most `limit` are
    kept; the least recently used is closed. Transactional producers are never kept: each is one partition's
    `transactional.id`, fenced by the next process or attempt that initialises it."""

    def __init__(self, limit: int = 32) -> None:
        self._limit = limit
        self._held: OrderedDict[tuple[object, ...], Any] = OrderedDict()
        self._lock = threading.Lock()  # a task's transactions run in threads (TRANSACTIONS_AT_ONCE)

    def get(self, key: tuple[object, ...], make: Callable[[], Any]) -> Any:
        with self._lock:
            client = self._held.get(key)
            if client is None:
                client = self._held[key] = make()
                while len(self._held) > self._limit:
                    _, oldest = self._held.popitem(last=False)
                    _close(oldest)
            self._held.move_to_end(key)
            return client

    def holds(self, client: Any) -> bool:
        with self._lock:
            return any(held is client for held in self._held.values())

    def drop(self, client: Any) -> bool:
        """Forget a kept client (True if it was kept)."""
        with self._lock:
            for key, held in list(self._held.items()):
                if held is client:
                    del self._held[key]
                    return True
            return False


_KEPT = _KeptClients()


def _close(client: Any) -> None:
    """Close a consumer, or let a producer go without waiting for what it still holds (its write failed)."""
    with contextlib.suppress(Exception):
        if hasattr(client, "purge"):
            client.purge()
        else:
            client.close()


def _connect_to_a_learned_broker(producer: Any, topic: str) -> None:
    """Have a new transactional producer connected to a broker named by the cluster's metadata before its
    `init_transactions`.

    librdkafka (2.16) closes its bootstrap connection as soon as the first metadata response names the brokers. An
    `init_transactions` that starts in that window finds no broker to ask for its transaction coordinator and
    waits for its 500 ms coordinator timer, although the named broker connects a few milliseconds later: about
    one new producer in three here, so a renumber write took 250 ms on average instead of under 100. The first
    metadata request is answered on the bootstrap connection; the second only once a named broker's connection
    is up. A failure changes nothing: `init_transactions` then waits and retries on its own, as before (so each
    request waits at most a second: an unreachable destination costs two seconds more, not two timeouts)."""
    from confluent_kafka import KafkaException

    with contextlib.suppress(KafkaException):
        for _ in range(2):
            producer.list_topics(topic=topic, timeout=1.0)


@dataclass(frozen=True)
class LibrdkafkaClients:
    target: KafkaProduceTarget

    def _cluster(self) -> tuple[object, ...]:
        target = self.target
        return (target.bootstrap_servers, tuple(sorted(target.client_properties.items())))

    def producer(self, on_error: Callable[[Any], None] | None = None) -> Any:
        target = self.target
        if target.offsets == "renumber":
            producer = self._new_producer(on_error)
            _connect_to_a_learned_broker(producer, target.topic)
            return producer
        settings = (target.compression, target.max_batch_bytes, target.request_timeout_ms, target.retry.deadline_s)
        return _KEPT.get(("producer", *self._cluster(), *settings), self._new_producer)

    def group_consumer(self, group_id: str) -> Any:
        return _KEPT.get(("consumer", *self._cluster(), group_id), lambda: self._new_consumer(group_id))

    def release(self, client: Any, broken: bool = False) -> None:
        if broken:
            _KEPT.drop(client)
            _close(client)
        elif not _KEPT.holds(client):
            _close(client)  # made for this write only (a transactional producer is dropped by its owner)

    def _new_producer(self, on_error: Callable[[Any], None] | None = None) -> Any:
        from confluent_kafka import Producer

        target = self.target
        deadline_ms = max(1_000, int(target.retry.deadline_s * 1000))
        settings: dict[str, Any] = {
            "bootstrap.servers": target.bootstrap_servers,
            # An idempotent producer is kept for every partition of its cluster; a transactional one is its own.
            "client.id": f"mirror-v3.{target.topic}.{target.partition}"
            if target.offsets == "renumber"
            else "mirror-v3",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": target.max_batch_bytes,
            "message.max.bytes": target.max_batch_bytes + 64 * 1024,
            "compression.type": target.compression or "none",
            "request.timeout.ms": target.request_timeout_ms,
            # A delivery may wait this long for an unreachable destination (librdkafka retries meanwhile).
            "message.timeout.ms": deadline_ms,
            "queue.buffering.max.messages": 1_000_000,
            **librdkafka_config(target.client_properties),
        }
        if on_error is not None:
            settings["error_cb"] = on_error
        if target.offsets == "renumber":
            settings["transactional.id"] = target.transactional_id
            settings["transaction.timeout.ms"] = max(_TRANSACTION_TIMEOUT_MS, deadline_ms)
        return Producer(settings)

    def _new_consumer(self, group_id: str) -> Any:
        from confluent_kafka import Consumer

        target = self.target
        return Consumer(
            {
                "bootstrap.servers": target.bootstrap_servers,
                "group.id": group_id,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **librdkafka_config(target.client_properties),
            }
        )


def produce_range(
    records: RecordSource,
    task: TaskRange,
    target: KafkaProduceTarget,
    clients: ProduceClients | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ProducedRange:
    """Produce the records of the task's range, read from `records`, into the target."""
    clients = clients or LibrdkafkaClients(target)
    if target.offsets == "preserve":
        return _preserve(records, task, target, clients)
    attempts = _RenumberAttempts(records, task, target, clients)
    try:
        return retry_transient_sync(attempts.run, target.retry, f"{target.name}: transaction", sleep=sleep)
    finally:
        attempts.close()


@dataclass
class _Written:
    """What one pass over the range produced."""

    records: int = 0
    record_bytes: int = 0
    skipped: int = 0  # renumber: copied from the destination cluster, so not written back
    unframed: int = 0  # schemas: a key or value not in the registry's wire format, copied as it was
    first_delivered: int | None = None
    last_delivered: int | None = None
    # preserve: the source offset of the next delivery report. Reports come in produce order for one
    # partition, failed ones included, and a preserve range has no holes: the k-th report is first + k.
    next_delivered: int = 0
    undelivered: list[tuple[int, str]] = field(default_factory=list)  # (source offset, librdkafka's reason)
    misplaced: tuple[int, int] | None = None  # preserve: (source offset, destination offset) of the first that moved
    timestamps: array[int] = field(default_factory=lambda: array("q"))  # of the records produced, for RecordTimes
    check_offsets: bool = False  # preserve: each delivery's offset must be its source offset

    def produced(self, task: TaskRange, retries: int = 0) -> ProducedRange:
        """What this pass wrote, as the task reports it (record timestamps measured now)."""
        times = RecordTimes.measure(np.frombuffer(self.timestamps, dtype=np.int64), round(time.time() * 1000))
        return ProducedRange(
            first=task.first,
            last=task.end - 1,
            records=self.records,
            record_bytes=self.record_bytes,
            destination_first=self.first_delivered,
            destination_last=self.last_delivered,
            retries=retries,
            skipped=self.skipped,
            unframed=self.unframed,
            times=times,
        )

    def delivered(self, error: Any, message: Any) -> None:
        """librdkafka's delivery report of the next record produced."""
        source_offset = self.next_delivered
        self.next_delivered += 1
        if error is not None:
            self.undelivered.append((source_offset, error.str()))
            return
        offset = message.offset()
        if self.check_offsets and offset != source_offset and self.misplaced is None:
            self.misplaced = (source_offset, offset)
        if self.first_delivered is None:
            self.first_delivered = offset
        self.last_delivered = offset

    def reported(self, source_offset: int, error: Any, message: Any) -> None:
        """The delivery report of the record of `source_offset`, asked for only where it is needed (renumber)."""
        if error is not None:
            self.undelivered.append((source_offset, error.str()))
            return
        offset = message.offset()
        if self.first_delivered is None:
            self.first_delivered = offset
        self.last_delivered = offset


# confluent-kafka's Producer.produce, positionally (2.16: topic, value, key, partition, callback, its alias
# on_delivery, timestamp, headers). Every Kafka case of e2e/ reads the destination back and compares each record's
# key, value, headers and timestamp with the source's (testkit/targets.py); tests/test_kafka_produce.py holds the
# real client and its fake to this order.
PRODUCE_ARGUMENTS = ("topic", "value", "key", "partition", "callback", "on_delivery", "timestamp", "headers")


def _produce_all(
    records: RecordSource,
    task: TaskRange,
    target: KafkaProduceTarget,
    producer: Any,
    written: _Written,
    *,
    preserve: bool,
) -> None:
    """Produce every record of the range in order (preserve: failing at the first hole).

    The loop runs once per record in the Python worker, the hot path of every Kafka destination and of restore: each
    of a message's fields is read once, the target's constants are hoisted, and the counters are kept in locals and
    added to `written` once per batch.

    Delivery reports: preserve checks every record's (its offset must be its source offset, and a failed one is
    named). Renumber asks for the first record's and each batch's last record's only: its transaction's commit fails
    if any record failed (librdkafka's promise, which the reports asked for still guard), and the reports are only the
    destination offsets its log line names; a report costs a Python call and a message object per record, about a
    sixth of the loop's CPU at 100 B records."""
    expected = task.first
    written.check_offsets = preserve
    on_delivery: Callable[[Any, Any], None] | None = written.delivered
    reported, asked_first = written.reported, preserve
    rewriter = None if target.schemas is None else rewriter_for(target.schemas)
    produce, poll = producer.produce, producer.poll
    topic, partition, skip_cluster = target.topic, target.partition, target.skip_cluster
    added = _cluster_headers(target)
    append_timestamp = written.timestamps.append
    for messages in records.read(task.read_from, task.end):
        count = size_total = skipped = 0
        last = messages[-1] if messages else None
        try:
            for message in messages:
                offset = message.offset()
                if preserve and offset != expected:
                    raise PreserveHoleError(records.name, expected, offset - 1)
                expected = offset + 1
                key, value, headers = message.key(), message.value(), message.headers()
                size = (0 if key is None else len(key)) + (0 if value is None else len(value))
                if headers:
                    size += header_bytes(headers)
                    if skip_cluster is not None and not preserve and copied_from(headers, skip_cluster):
                        skipped += 1  # a hole at the destination: renumber's offsets need none
                        continue
                if not preserve:
                    headers = [*(headers or ()), (SOURCE_OFFSET_HEADER, b"%d" % offset), *added]
                    on_delivery = partial(reported, offset) if message is last or not asked_first else None
                    asked_first = True
                timestamp = message.timestamp()[1]
                if rewriter is not None:
                    key, key_framed = rewriter.rewritten(key, "key")
                    value, value_framed = rewriter.rewritten(value, "value")
                    if not (key_framed and value_framed):
                        written.unframed += 1
                stamp = timestamp if timestamp > 0 else 0
                try:
                    # Positional (see PRODUCE_ARGUMENTS): the pinned client parses keywords at about 1 µs a call, a
                    # third of the loop at 100 B records.
                    produce(topic, value, key, partition, on_delivery, None, stamp, headers)
                except BufferError:  # the producer's queue is full: let deliveries drain it
                    _produce_when_room(producer, topic, value, key, partition, stamp, headers, on_delivery)
                count += 1
                size_total += size
                append_timestamp(timestamp)
        except PreserveHoleError:
            _deliver(producer, target, written)
            raise
        finally:
            written.records += count
            written.record_bytes += size_total
            written.skipped += skipped
        poll(0)
        if preserve and (
            written.undelivered or written.misplaced
        ):  # nothing more after a failed or misplaced record: it would land shifted
            _deliver(producer, target, written)  # (renumber: the failed delivery fails the commit, which aborts)
    if preserve and expected != task.end:
        _deliver(producer, target, written)
        raise PreserveHoleError(records.name, expected, task.end - 1)


def _produce_when_room(
    producer: Any,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    partition: int,
    timestamp: int,
    headers: Any,
    on_delivery: Callable[[Any, Any], None] | None,
) -> None:
    """Produce once the producer's queue has room, serving delivery reports meanwhile."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(topic, value, key, partition, on_delivery, None, timestamp, headers)
            return
        except BufferError:
            continue


def _cluster_headers(target: KafkaProduceTarget) -> tuple[tuple[str, bytes | None], ...]:
    return () if target.source_cluster is None else (source_cluster_header(target.source_cluster),)


def _deliver(producer: Any, target: KafkaProduceTarget, written: _Written) -> None:
    """Wait for every delivery report; fail if any record did not land as it should."""
    remaining = producer.flush(target.retry.deadline_s)
    if written.undelivered:  # a failed delivery first: the records after it land shifted because of it
        raise UndeliveredRecordError(target.name, *written.undelivered[0])
    if written.misplaced is not None:
        source_offset, offset = written.misplaced
        raise DestinationMovedError(target.name, source_offset, offset, f"the offset of source offset {source_offset}")
    if remaining:
        raise DestinationTaskError(
            target.name, f"{remaining} records not delivered within {target.retry.deadline_s:g}s"
        )


def _preserve(
    records: RecordSource, task: TaskRange, target: KafkaProduceTarget, clients: ProduceClients
) -> ProducedRange:
    from confluent_kafka import KafkaException, TopicPartition

    def query_end() -> int:
        consumer = clients.group_consumer(target.group_id)
        try:
            _, end = consumer.get_watermark_offsets(
                TopicPartition(target.topic, target.partition), timeout=target.request_timeout_ms / 1000, cached=False
            )
        except KafkaException as exc:
            clients.release(consumer, broken=True)
            error = exc.args[0]
            if error.code() == _UNKNOWN_PARTITION:
                # A kept consumer whose metadata an outage emptied answers at once that it knows no such partition
                # (the sink saw it on open); a new consumer asks the cluster again on the next attempt.
                raise TransientDestinationError(f"{target.name}: {error.str()}") from None
            raise _classified(target, error) from None
        clients.release(consumer)
        return int(end)

    end = retry_transient_sync(query_end, target.retry, f"{target.name}: reading the end offset")
    if end != task.first:
        raise DestinationMovedError(target.name, task.first, end, "the end offset")
    producer = clients.producer()
    written = _Written(next_delivered=task.first)
    try:
        _produce_all(records, task, target, producer, written, preserve=True)
        _deliver(producer, target, written)
    except KafkaException as exc:
        clients.release(producer, broken=True)
        # librdkafka has retried on its own until the deadline: what reaches here is final.
        raise DestinationTaskError(target.name, exc.args[0].str()) from None
    except BaseException:
        clients.release(producer, broken=True)  # it may hold records of this range: never let them land later
        raise
    clients.release(producer)
    return written.produced(task)


class _RenumberAttempts:
    """One transaction over the range per `run`; transient failures leave nothing behind and raise
    TransientDestinationError, so `retry_transient_sync` runs it again."""

    def __init__(
        self,
        records: RecordSource,
        task: TaskRange,
        target: KafkaProduceTarget,
        clients: ProduceClients,
    ) -> None:
        self._records, self._task, self._target, self._clients = records, task, target, clients
        self._producer: Any = None
        self._group: Any = None
        self._owner: Any = None
        self._fatal: Any = None  # the error that made the producer unusable, as librdkafka reported it
        self._attempts = 0

    def run(self) -> ProducedRange:
        from confluent_kafka import KafkaException, TopicPartition

        target, task = self._target, self._task
        timeout = target.request_timeout_ms / 1000
        self._attempts += 1
        try:
            if self._producer is None:
                self._producer = self._clients.producer(self._on_error)
                self._producer.init_transactions(target.retry.deadline_s)  # fences every earlier producer
            if self._group is None:
                self._group = self._clients.group_consumer(target.group_id)
                self._owner = self._clients.group_consumer(target.owner_group)
            owner = self._committed(self._owner, timeout)
            if owner != target.writer:
                raise self._fenced_by(owner)
            position = self._committed(self._group, timeout)
            if position == task.end:  # only this process writes now, and it commits only whole ranges
                return self._landed_before()
            if position != target.expected:
                raise DestinationMovedError(
                    target.name, target.expected, position, f"the position of group {target.group_id}"
                )
            producer = self._producer
            producer.begin_transaction()
            written = _Written()
            _produce_all(self._records, task, target, producer, written, preserve=False)
            producer.send_offsets_to_transaction(
                [TopicPartition(target.topic, target.partition, task.end, metadata=f"source={target.source_name}")],
                self._group.consumer_group_metadata(),
                timeout,
            )
            self._commit(producer)
            if written.undelivered:  # a failed delivery fails the commit; this only guards that promise
                raise UndeliveredRecordError(target.name, *written.undelivered[0])
            return written.produced(task, retries=self._attempts - 1)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == _FATAL:
                cause = self._fatal_cause()
                if cause is None:
                    self._raise_if_taken_over(timeout)
                error = cause or error
            classified = _classified(target, error)
            if isinstance(classified, TransientDestinationError):
                self._abandon_transaction()
            elif _replaceable(error, classified):
                # The producer is unusable, but its transaction was never committed. The next producer
                # with the same transactional.id aborts it in init_transactions (records that reached the
                # log stay invisible to read_committed readers), and the range is produced again.
                self._producer = None
                raise TransientDestinationError(f"{target.name}: producer restarted after {error.str()}") from None
            raise classified from None

    def _fenced_by(self, owner: int | None) -> ProducerFencedError:
        target = self._target
        return ProducerFencedError(target.name, target.transactional_id, owner, target.owner_group)

    def _raise_if_taken_over(self, timeout: float) -> None:
        """A fatal error whose cause librdkafka has not reported (yet): the owner group says whether another
        process took the partition over, which is what a fenced producer's fatal error means."""
        from confluent_kafka import KafkaException

        if self._owner is None:
            return
        try:
            owner = self._committed(self._owner, timeout)
        except KafkaException:
            return  # cannot tell: the fatal error stands as it is
        if owner != self._target.writer:
            raise self._fenced_by(owner) from None

    def _on_error(self, error: Any) -> None:
        if error.fatal() or error.code() in _FENCED:
            self._fatal = error

    def _fatal_cause(self) -> Any:
        """Why the producer became unusable. "Local: Fatal error" says nothing; librdkafka reports the cause
        (fenced, for one) to the error callback, which only a poll serves: a produce() that raised
        first may find it not served yet (CI once saw it take longer than one poll(0)), so polls go on
        for up to a second."""
        deadline = time.monotonic() + _FATAL_CAUSE_WAIT_S
        while self._fatal is None and self._producer is not None and time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                self._producer.poll(0.05)
        return self._fatal

    def _committed(self, consumer: Any, timeout: float) -> int | None:
        """The group's committed offset for the destination partition (its metadata is never read)."""
        from confluent_kafka import KafkaException, TopicPartition

        (found,) = consumer.committed([TopicPartition(self._target.topic, self._target.partition)], timeout)
        if found.error is not None:
            raise KafkaException(found.error)  # classified by `run`
        return None if found.offset < 0 else int(found.offset)

    def _commit(self, producer: Any) -> None:
        """commit_transaction again while it says retriable: the transaction may be committing already."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self._target.retry.deadline_s
        while True:
            try:
                producer.commit_transaction(self._target.request_timeout_ms / 1000)
                return
            except KafkaException as exc:
                error = exc.args[0]
                if not error.retriable() or time.monotonic() > deadline:
                    raise

    def _landed_before(self) -> ProducedRange:
        """An earlier attempt committed this range and its answer was lost: count what it wrote."""
        task, skip = self._task, self._target.skip_cluster
        records = record_bytes = skipped = 0
        for messages in self._records.read(task.read_from, task.end):
            for message in messages:
                if skip is not None and copied_from(message.headers(), skip):
                    skipped += 1
                else:
                    records += 1
                    record_bytes += message_bytes(message)
        return ProducedRange(
            first=task.first,
            last=task.end - 1,
            records=records,
            record_bytes=record_bytes,
            retries=self._attempts - 1,
            skipped=skipped,
        )

    def _abandon_transaction(self) -> None:
        """Leave no open transaction: abort it, or drop the producer (the next one's init aborts it)."""
        from confluent_kafka import KafkaException

        if self._producer is None:
            return
        try:
            self._producer.abort_transaction(self._target.request_timeout_ms / 1000)
        except KafkaException:
            self._producer = None

    def close(self) -> None:
        """Best effort: the range's outcome is decided already, and a fenced producer raises on anything."""
        consumers = (self._group, self._owner)
        self._group = self._owner = self._producer = None
        for consumer in consumers:
            if consumer is not None:
                with contextlib.suppress(Exception):
                    self._clients.release(consumer)


def _replaceable(error: Any, classified: Exception) -> bool:
    """A fatal error that dies with the producer instance: not a fence, not one a new producer meets again.

    A call on a producer that is fatal already (produce() above all) raises "Local: Fatal error" with the fatal flag
    unset (confluent-kafka makes that error from the code alone); the code says it is fatal all the same."""
    fatal = bool(error.fatal()) or error.code() == _FATAL
    return fatal and not isinstance(classified, ProducerFencedError) and error.code() not in _PERMANENT_FATAL


def _classified(target: KafkaProduceTarget, error: Any) -> Exception:
    """A librdkafka error as the error the task raises: transient ones are retried until the deadline."""
    if error.code() in _FENCED:
        return ProducerFencedError(target.name, target.transactional_id)
    if not error.fatal() and (error.retriable() or error.txn_requires_abort() or error.code() in _TRANSIENT):
        return TransientDestinationError(f"{target.name}: {error.str()}")
    return DestinationTaskError(target.name, error.str())
