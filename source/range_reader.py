"""Consume an exact offset range of one partition inside a Spark task, with librdkafka.

This takes over what Spark's Kafka source used to guarantee (SPEC §3):
- the range ends where the consumer's *position* reaches its end, never on seeing offset end-1: that
  offset may be a transaction marker or an aborted record, which a read_committed consumer never sees;
- offsets the range still needs but the broker has deleted are an error (`auto.offset.reset: error`),
  never a silent jump; offsets skipped inside a fetch that started where we asked are holes
  (compaction, markers, aborted records) and are legal;
- records come out in strictly increasing offset order inside [read_from, end), or the read fails.

Records are handed on as plain message lists; `RecordColumns` turns them into Arrow in one pass.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from core.errors import MirrorV3Error, SourceUnavailableError
from kafka_clients.oauth_tokens import librdkafka_config

# A task reads one partition from one position to the end of its range. librdkafka keeps its queue full
# ahead of the consumer, so whatever the queue holds when the range ends was fetched and parsed for
# nothing: the queue is kept small against a task's range (spark.bytes-per-task, 64 MiB by default).
# Measured on one core with 1 KiB records: a 125 000-record range cost 10-19 us of CPU per record with a
# 256 MiB queue and 7-9 with 64 MiB; a 62 500-record range 9-19 with 64 MiB and 7.8-8.2 with 16 MiB (8 MiB:
# 8.2-8.7). A small queue refills often, so the fetcher must not back off for librdkafka's default second
# when it finds the queue full (fetch.queue.backoff.ms): with that default it ran at half the rate.
CONSUMER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    # Offsets below the log start are data loss, reported, never skipped by a reset.
    "auto.offset.reset": "error",
    "fetch.max.bytes": 8 * 1024 * 1024,
    "max.partition.fetch.bytes": 4 * 1024 * 1024,
    "receive.message.max.bytes": 65 * 1024 * 1024,  # a batch larger than the fetch size still arrives whole
    "queued.min.messages": 20_000,
    "queued.max.messages.kbytes": 16_384,
    "fetch.queue.backoff.ms": 5,
    # A task reads the small ranges of many partitions one after the other with one consumer, and librdkafka
    # keeps one fetch in flight per broker: the next partition's first fetch waits for the one in flight, which
    # the broker holds this long when it has nothing for it. Measured, one job of 64 partitions x 30 records
    # on 2 cores: 3.3 s of wall time with 100 ms, 0.55 s with 10 ms (the same CPU). A range is readable when it
    # is asked for, so a short wait costs no empty fetches except while a broker does not answer.
    "fetch.wait.max.ms": 10,
}
CONSUME_BATCH = 10_000
# Records of the small ranges a task reads together are kept until each is read: at most about this many bytes
# (estimated from the bytes per offset its mirror has seen) at a time.
PREFETCH_BYTES = 16 * 1024 * 1024
# librdkafka's batch consume returns when it has the messages asked for or when this wait ends. A range
# whose tail holds no records (transaction markers, aborted records) never fills its batch, so the wait is
# what such a range pays at its end: short, because a flush of a few records must not cost half a second.
CONSUME_WAIT_S = 0.05
# Once a read of a cluster stalled in a task, the task's later reads of that cluster give up after this long
# without progress (instead of their own stall timeout each): a task holding many small ranges of a cluster that
# stopped answering pays one stall timeout, then a moment per prefetch, before its other clusters' ranges are read.
# A partition whose leader still answers progresses within milliseconds (fetch.wait.max.ms is 10).
STALLED_CLUSTER_PATIENCE_S = 0.5
# librdkafka error codes (confluent_kafka.KafkaError) this reader acts on.
_PARTITION_EOF = -191
# Every broker of the cluster refuses or drops its connection (killed, stopped, restarting): nothing will come
# until one is back, so a read that may be given up is given up at once instead of after its stall timeout.
# librdkafka reports it to the client's error_cb (served inside consume), never as a message.
_ALL_BROKERS_DOWN = -187
_AUTO_OFFSET_RESET = -140
_OFFSET_OUT_OF_RANGE = 1
# Errors another fetch will not cure: authentication, TLS, authorization, a partition that is not there.
_PERMANENT_ERRORS = {-169, -181, -188, -190, 3, 29}


@dataclass(frozen=True)
class SourcePartition:
    """Where a task reads from. `client_properties` are librdkafka settings (security, credentials):
    they travel to the executors inside the job's closure and are never put in a message. A read that receives
    nothing (no record, no move of its position) for `stall_timeout_s` is given up (`ReadStalledError`), so the
    task goes on with its other writes and its mirror asks again."""

    bootstrap_servers: str
    topic: str
    partition: int
    isolation_level: str
    group_id: str
    stall_timeout_s: float
    client_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    # A range read as it streams into its write (a backlog's, not prefetched) whose write cannot be given up midway
    # without leaving records behind (Kafka preserve mode) gets this longer stall timeout (None: the same).
    stream_stall_timeout_s: float | None = None

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def uses_task_consumers(self) -> bool:
        return True  # the task's consumer for its cluster, shared with the task's other reads

    def open(self, consumers: SharedConsumers) -> LivePartition:
        """This partition as a task reads it (`workers.range_job.RecordsAt`)."""
        return LivePartition(self, consumers)

    def announce(self, consumers: SharedConsumers, read_from: int, end: int, estimated_bytes: int) -> None:
        """Tell the task's consumers this range will be read (so small ranges are fetched together)."""
        consumers.announce(self, read_from, end, estimated_bytes)


class SourceRangeError(MirrorV3Error):
    """The range could not be read exactly: `source` (topic-partition) at `offset`, and what went wrong."""

    def __init__(self, source: str, offset: int, problem: str) -> None:
        self.source, self.offset, self.problem = source, offset, problem
        super().__init__(f"{source}: {problem}")


class ReadStalledError(SourceRangeError, SourceUnavailableError):
    """The read of `source` got nothing for `stalled_s` seconds at `offset` (reading up to `end`): the broker
    does not answer (killed, stopped, cut off, slow) or the partition has no leader; or, sooner, librdkafka said
    every broker of the cluster is down. It is given up so that a
    shared job's other partitions are not held, and is unavailability, not a verdict: the mirror asks again with
    backoff, within its source.outage-deadline-ms. `last_error` is librdkafka's last word on the partition;
    `streamed`: the range was read as it streamed into its write, which may have written records below `offset`
    (else it was read whole before anything was written); `brokers_down`: given up because the client said every
    broker of the cluster is down (the cluster's outage starts now), not because the wait ran out."""

    def __init__(
        self,
        source: str,
        offset: int,
        end: int,
        stalled_s: float,
        last_error: str,
        streamed: bool = False,
        brokers_down: bool = False,
    ) -> None:
        self.end, self.stalled_s, self.last_error, self.streamed = end, stalled_s, last_error, streamed
        self.brokers_down = brokers_down
        why = last_error or "the broker sent nothing (did it stop answering, or the partition shrink?)"
        super().__init__(
            source, offset, f"no progress for {stalled_s:g}s at offset {offset} while reading up to {end - 1}: {why}"
        )


class OffsetsDeletedError(SourceRangeError):
    """Offsets the range needs are below the partition's log start offset."""

    def __init__(self, source: str, position: int, log_start: int | None) -> None:
        self.position, self.log_start = position, log_start
        where = "" if log_start is None else f" (log start offset is now {log_start})"
        super().__init__(source, position, f"offset {position} was deleted before it was read{where}")


def consume_range(source: SourcePartition, read_from: int, end: int, consumer: Any = None) -> Iterator[list[Any]]:
    """Yield the records of [read_from, end) as lists of librdkafka messages, in offset order.

    `consumer` replaces the real one in tests (anything with assign/consume/position/
    get_watermark_offsets/close)."""
    if read_from >= end:
        return
    if consumer is None:
        consumer = _new_consumer(source)
    try:
        yield from _consume(consumer, source, read_from, end)
    finally:
        consumer.close()


class SharedConsumers:
    """The consumers of one Spark task, one per source cluster and its settings, reused by every partition the
    task reads (a task may read many small ranges: connecting once per partition would cost more than the read).

    Ranges announced before they are read (`announce`, in the order they will be read) are fetched together: when
    the first of them is read, it and the next announced ranges of its cluster, up to PREFETCH_BYTES estimated,
    are read at once (one fetch request carries every partition instead of one round trip each) and kept until
    each is read. A larger range is read as it streams.

    A read that gets nothing for its source's stall timeout is given up (`ReadStalledError`); once one has, the
    task's later reads of that cluster give up after STALLED_CLUSTER_PATIENCE_S without progress, so a cluster that
    stopped answering holds a task for one stall timeout, not one per range. Once the cluster's client says every
    broker is down (`client_error`: librdkafka's error_cb), its reads in this task are given up at once.

    A consumer only ever reads by explicit assignment and commits nothing, so the group id it was made with
    (the first partition's) plays no part in what any partition reads. `consumer_factory` and `clock` replace
    the real ones in tests."""

    def __init__(
        self,
        consumer_factory: Callable[[SourcePartition], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = consumer_factory
        self._clock = clock
        self._consumers: dict[tuple[object, ...], Any] = {}
        self._announced: list[tuple[SourcePartition, int, int, int]] = []  # (source, read_from, end, bytes)
        self._prefetched: Prefetched = {}
        self._stalled: set[tuple[object, ...]] = set()  # clusters a read of this task stalled on
        self._down: dict[tuple[object, ...], str] = {}  # clusters whose client said every broker is down: why

    @staticmethod
    def _cluster(source: SourcePartition) -> tuple[object, ...]:
        return (source.bootstrap_servers, source.isolation_level, tuple(sorted(source.client_properties.items())))

    def consumer_for(self, source: SourcePartition) -> Any:
        key = self._cluster(source)
        consumer = self._consumers.get(key)
        if consumer is None:
            if self._factory is not None:
                consumer = self._factory(source)
            else:
                consumer = _new_consumer(source, partial(self.client_error, source))
            self._consumers[key] = consumer
        return consumer

    def client_error(self, source: SourcePartition, error: Any) -> None:
        """A client-level error of the consumer of the source's cluster (librdkafka's error_cb, served inside consume):
        every broker down gives up this task's reads of the cluster; the others librdkafka retries by itself."""
        if error.code() == _ALL_BROKERS_DOWN:
            key = self._cluster(source)
            self._down[key] = error.str()
            self._stalled.add(key)

    def _patience(self, source: SourcePartition, streamed: bool = False) -> tuple[float, Callable[[], str | None]]:
        """How long a read of the source's cluster may go without progress (its stall timeout, at most
        STALLED_CLUSTER_PATIENCE_S once a read of its cluster stalled here), and what says every broker of it is
        down. A streamed read with a stall timeout of its own belongs to a write that cannot be given up midway: it
        waits that long, whatever the client says."""
        if streamed and source.stream_stall_timeout_s is not None:
            return source.stream_stall_timeout_s, lambda: None
        key = self._cluster(source)
        seconds = source.stall_timeout_s
        if key in self._stalled:
            seconds = min(seconds, STALLED_CLUSTER_PATIENCE_S)
        return seconds, lambda: self._down.get(key)

    def announce(self, source: SourcePartition, read_from: int, end: int, estimated_bytes: int) -> None:
        """A range this task will read (ranges are read in the order announced)."""
        if read_from < end:
            self._announced.append((source, read_from, end, estimated_bytes))

    def read(self, source: SourcePartition, read_from: int, end: int) -> Iterator[list[Any]]:
        """`consume_range` with the task's consumer for the source's cluster (kept open for the next range)."""
        if read_from >= end:
            return
        key = (source.topic, source.partition, read_from, end)
        if key not in self._prefetched:
            self._prefetch(source, read_from, end)
        if key in self._prefetched:
            found = self._prefetched.pop(key)
            if isinstance(found, Exception):
                raise found
            if found:
                yield found
            return
        consumer = self.consumer_for(source)
        try:
            yield from _consume(consumer, source, read_from, end, *self._patience(source, streamed=True), self._clock)
        except BaseException as exc:
            if isinstance(exc, ReadStalledError):
                self._stalled.add(self._cluster(source))
            # A consumer in an unknown state (an error, an abandoned read) is not reused.
            self._drop(consumer)
            raise
        finally:
            # Read no further: nothing of this partition is fetched for nothing while the next range is read.
            with contextlib.suppress(Exception):
                if consumer in self._consumers.values():
                    consumer.unassign()

    def _prefetch(self, source: SourcePartition, read_from: int, end: int) -> None:
        """Read this announced range and the next announced ranges of its cluster together, if small enough."""
        position = next(
            (
                i
                for i, (s, f, e, _) in enumerate(self._announced)
                if (s.topic, s.partition, f, e) == (source.topic, source.partition, read_from, end)
            ),
            None,
        )
        if position is None:
            return
        cluster = self._cluster(source)
        chunk: list[tuple[SourcePartition, int, int]] = []
        partitions: set[tuple[str, int]] = set()
        total = 0
        for each, first, last, estimated in self._announced[position:]:
            if self._cluster(each) != cluster or (each.topic, each.partition) in partitions:
                continue
            if total + estimated > PREFETCH_BYTES:
                break
            chunk.append((each, first, last))
            partitions.add((each.topic, each.partition))
            total += estimated
        if not chunk:
            return  # larger than a prefetch: read as it streams
        taken = {(s.topic, s.partition, f, e) for s, f, e in chunk}
        self._announced = [a for a in self._announced if (a[0].topic, a[0].partition, a[1], a[2]) not in taken]
        consumer = self.consumer_for(source)
        try:
            found = _consume_many(consumer, chunk, *self._patience(source), self._clock)
        except BaseException:
            self._drop(consumer)
            raise
        self._prefetched.update(found)
        if any(isinstance(outcome, ReadStalledError) for outcome in found.values()):
            self._stalled.add(cluster)
        with contextlib.suppress(Exception):
            consumer.unassign()

    def _drop(self, consumer: Any) -> None:
        for key in [key for key, held in self._consumers.items() if held is consumer]:
            del self._consumers[key]
        with contextlib.suppress(Exception):
            consumer.close()

    def close(self) -> None:
        consumers = list(self._consumers.values())
        self._consumers.clear()
        self._prefetched.clear()
        for consumer in consumers:
            with contextlib.suppress(Exception):
                consumer.close()


@dataclass(frozen=True)
class LivePartition:
    """A source partition as a task's `RecordSource` (`sinks.write_target`), read with the task's consumers."""

    source: SourcePartition
    consumers: SharedConsumers

    @property
    def topic(self) -> str:
        return self.source.topic

    @property
    def partition(self) -> int:
        return self.source.partition

    @property
    def name(self) -> str:
        return self.source.name

    def read(self, read_from: int, end: int) -> Iterator[list[Any]]:
        return self.consumers.read(self.source, read_from, end)


def _new_consumer(source: SourcePartition, on_error: Callable[[Any], None] | None = None) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **CONSUMER_SETTINGS,
            **({} if on_error is None else {"error_cb": on_error}),
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": source.group_id,
            "isolation.level": source.isolation_level,
            **librdkafka_config(source.client_properties),
        }
    )


class _RangeRead:
    """The rules of one exact range read, whatever else the consumer reads at the same time: records strictly
    increasing inside [read_from, end), the end reached by the consumer's position, deleted offsets and
    permanent errors fatal, no progress for `patience_s` (the source's stall timeout unless given) a
    ReadStalledError."""

    def __init__(
        self,
        source: SourcePartition,
        read_from: int,
        end: int,
        patience_s: float | None = None,
        brokers_down: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        streamed: bool = False,
    ) -> None:
        self.source, self.read_from, self.end, self.streamed = source, read_from, end, streamed
        self.patience_s = source.stall_timeout_s if patience_s is None else patience_s
        self._brokers_down = brokers_down  # why every broker of the cluster is down, as its client said (None: not)
        self._clock = clock
        self.last = read_from - 1
        self.last_error = ""
        self.progressed_at = clock()

    def failed(self, consumer: Any, error: Any) -> None:
        """An error event of this partition: raises what ends the read; a transient one is remembered."""
        code = error.code()
        source, last = self.source, self.last
        if code in (_AUTO_OFFSET_RESET, _OFFSET_OUT_OF_RANGE):
            raise OffsetsDeletedError(source.name, max(last + 1, self.read_from), _log_start(consumer, source))
        if error.fatal() or code in _PERMANENT_ERRORS:
            raise SourceRangeError(source.name, last + 1, f"reading from offset {last + 1} failed: {error.str()}")
        # librdkafka retries transient broker errors itself; the stall timeout bounds them.
        self.last_error = error.str()

    def accepted(self, messages: list[Any], consumer: Any) -> list[Any]:
        """`accepts` over one consume call's messages, the range's records among them in order; an error other than a
        partition's end goes to `failed`. Once per record in the Python worker: the rule inlined, kept in locals."""
        records: list[Any] = []
        append, last, end = records.append, self.last, self.end
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() != _PARTITION_EOF:
                    self.last = last
                    self.failed(consumer, error)
                continue
            offset = message.offset()
            if offset >= end:
                continue
            if offset <= last:
                raise self._not_increasing(offset, last)
            last = offset
            append(message)
        self.last = last
        return records

    def accepts(self, message: Any) -> bool:
        """Whether a record belongs to the range (raises when offsets do not increase)."""
        offset = message.offset()
        if offset >= self.end:
            return False
        if offset <= self.last:
            raise self._not_increasing(offset, self.last)
        self.last = offset
        return True

    def _not_increasing(self, offset: int, last: int) -> SourceRangeError:
        return SourceRangeError(self.source.name, offset, f"offset {offset} came after {last}: offsets must increase")

    def progressed(self) -> None:
        self.progressed_at = self._clock()

    def done_at(self, position: int) -> bool:
        """Whether the consumer's position ends the range (raises ReadStalledError when it has not moved for too
        long). The position moves past markers and aborted records too: it, not the last record, ends the range."""
        if position >= self.end or self.last >= self.end - 1:
            return True
        now = self._clock()
        if position > self.last + 1:
            self.progressed_at = now
            self.last = position - 1
        if (down := self._brokers_down()) is not None:
            waited = round(now - self.progressed_at, 3)
            raise ReadStalledError(self.source.name, self.last + 1, self.end, waited, down, self.streamed, True)
        if now - self.progressed_at > self.patience_s:
            raise ReadStalledError(
                self.source.name, self.last + 1, self.end, self.patience_s, self.last_error, self.streamed
            )
        return False

    @property
    def remaining(self) -> int:
        return max(1, self.end - self.last - 1)


def _consume(
    consumer: Any,
    source: SourcePartition,
    read_from: int,
    end: int,
    patience_s: float | None = None,
    brokers_down: Callable[[], str | None] = lambda: None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[list[Any]]:
    from confluent_kafka import TopicPartition

    consumer.assign([TopicPartition(source.topic, source.partition, read_from)])
    read = _RangeRead(source, read_from, end, patience_s, brokers_down, clock, streamed=True)
    here = [TopicPartition(source.topic, source.partition)]
    while True:
        # Never ask for more than the range still holds: a batch that can fill returns at once.
        messages = consumer.consume(num_messages=min(CONSUME_BATCH, read.remaining), timeout=CONSUME_WAIT_S)
        records = read.accepted(messages, consumer)
        if records:
            read.progressed()
            yield records
        if read.done_at(consumer.position(here)[0].offset):
            return


Prefetched = dict[tuple[str, int, int, int], list[Any] | Exception]  # (topic, partition, read_from, end) → records


def _consume_many(
    consumer: Any,
    ranges: list[tuple[SourcePartition, int, int]],
    patience_s: float | None = None,
    brokers_down: Callable[[], str | None] = lambda: None,
    clock: Callable[[], float] = time.monotonic,
) -> Prefetched:
    """Read the ranges of several partitions of one cluster at once (one fetch request carries them all), keeping
    each range's records, or the error that ended its read: one partition's failure is its own."""
    from confluent_kafka import TopicPartition

    reads = {
        (s.topic, s.partition): _RangeRead(s, read_from, end, patience_s, brokers_down, clock)
        for s, read_from, end in ranges
        if read_from < end
    }
    found: Prefetched = {(s.topic, s.partition, read_from, end): [] for s, read_from, end in ranges}

    def settle(key: tuple[str, int], outcome: Exception | None = None) -> None:
        read = reads.pop(key)
        entry = (read.source.topic, read.source.partition, read.read_from, read.end)
        if outcome is not None:
            found[entry] = outcome
        with contextlib.suppress(Exception):
            consumer.pause([TopicPartition(*key)])  # fetch no further for it

    assigned = [TopicPartition(s.topic, s.partition, read_from) for s, read_from, end in ranges if read_from < end]
    consumer.assign(assigned)
    try:
        while reads:
            wanted = min(CONSUME_BATCH, sum(read.remaining for read in reads.values()))
            progressed: set[tuple[str, int]] = set()
            for message in consumer.consume(num_messages=wanted, timeout=CONSUME_WAIT_S):
                key = (message.topic(), message.partition())
                error = message.error()
                if error is not None:
                    if error.code() == _PARTITION_EOF:
                        continue
                    targets = [key] if key in reads else list(reads) if key[0] is None else []
                    for each in targets:
                        try:
                            reads[each].failed(consumer, error)
                        except SourceRangeError as exc:
                            settle(each, exc)
                    continue
                read = reads.get(key)
                if read is None:
                    continue  # a partition whose range ended already
                try:
                    if read.accepts(message):
                        found[(key[0], key[1], read.read_from, read.end)].append(message)  # type: ignore[union-attr]
                        progressed.add(key)
                except SourceRangeError as exc:
                    settle(key, exc)
            for key in progressed & reads.keys():
                reads[key].progressed()
            if not reads:
                break
            positions = consumer.position([TopicPartition(*key) for key in reads])
            for tp in positions:
                key = (tp.topic, tp.partition)
                try:
                    if reads[key].done_at(tp.offset):
                        settle(key)
                except SourceRangeError as exc:
                    settle(key, exc)
    finally:
        # librdkafka keeps a partition paused through unassign and assign: a later read of it (a renumber
        # transaction run again reads its range again) must find it fetching.
        with contextlib.suppress(Exception):
            consumer.resume(assigned)
    return found


def _log_start(consumer: Any, source: SourcePartition) -> int | None:
    from confluent_kafka import TopicPartition

    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(source.topic, source.partition), timeout=5.0)
        return int(low)
    except Exception:  # the error above is the point; the number is a courtesy
        return None
