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

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from core.errors import MirrorV3Error
from core.records import HEADER_TYPE, KAFKA_SCHEMA
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
    "fetch.wait.max.ms": 100,
}
CONSUME_BATCH = 10_000
# librdkafka's batch consume returns when it has the messages asked for or when this wait ends. A range
# whose tail holds no records (transaction markers, aborted records) never fills its batch, so the wait is
# what such a range pays at its end: short, because a flush of a few records must not cost half a second.
CONSUME_WAIT_S = 0.05
# librdkafka error codes (confluent_kafka.KafkaError) this reader acts on.
_PARTITION_EOF = -191
_AUTO_OFFSET_RESET = -140
_OFFSET_OUT_OF_RANGE = 1
# Errors another fetch will not cure: authentication, TLS, authorization, a partition that is not there.
_PERMANENT_ERRORS = {-169, -181, -188, -190, 3, 29}


@dataclass(frozen=True)
class SourcePartition:
    """Where a task reads from. `client_properties` are librdkafka settings (security, credentials):
    they travel to the executors inside the job's closure and are never put in a message."""

    bootstrap_servers: str
    topic: str
    partition: int
    isolation_level: str
    group_id: str
    stall_timeout_s: float
    client_properties: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


class SourceRangeError(MirrorV3Error):
    """The range could not be read exactly: `source` (topic-partition) at `offset`, and what went wrong."""

    def __init__(self, source: str, offset: int, problem: str) -> None:
        self.source, self.offset, self.problem = source, offset, problem
        super().__init__(f"{source}: {problem}")


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


def _new_consumer(source: SourcePartition) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            **CONSUMER_SETTINGS,
            "bootstrap.servers": source.bootstrap_servers,
            "group.id": source.group_id,
            "isolation.level": source.isolation_level,
            **librdkafka_config(source.client_properties),
        }
    )


def _consume(consumer: Any, source: SourcePartition, read_from: int, end: int) -> Iterator[list[Any]]:
    from confluent_kafka import TopicPartition

    partition = TopicPartition(source.topic, source.partition, read_from)
    consumer.assign([partition])
    last = read_from - 1
    last_error = ""
    progressed_at = time.monotonic()
    while True:
        # Never ask for more than the range still holds: a batch that can fill returns at once.
        messages = consumer.consume(num_messages=max(1, min(CONSUME_BATCH, end - last - 1)), timeout=CONSUME_WAIT_S)
        records = []
        for message in messages:
            error = message.error()
            if error is not None:
                code = error.code()
                if code == _PARTITION_EOF:
                    continue
                if code in (_AUTO_OFFSET_RESET, _OFFSET_OUT_OF_RANGE):
                    raise OffsetsDeletedError(source.name, max(last + 1, read_from), _log_start(consumer, source))
                if error.fatal() or code in _PERMANENT_ERRORS:
                    raise SourceRangeError(
                        source.name, last + 1, f"reading from offset {last + 1} failed: {error.str()}"
                    )
                # librdkafka retries transient broker errors itself; the stall timeout bounds them.
                last_error = error.str()
                continue
            offset = message.offset()
            if offset >= end:
                continue
            if offset <= last:
                raise SourceRangeError(source.name, offset, f"offset {offset} came after {last}: offsets must increase")
            last = offset
            records.append(message)
        if records:
            progressed_at = time.monotonic()
            yield records
        # The position moves past markers and aborted records too: it, not the last record, ends the range.
        position = consumer.position([TopicPartition(source.topic, source.partition)])[0].offset
        if position >= end or last >= end - 1:
            return
        if position > last + 1:
            progressed_at = time.monotonic()
            last = position - 1
        if time.monotonic() - progressed_at > source.stall_timeout_s:
            raise SourceRangeError(
                source.name,
                last + 1,
                f"no progress for {source.stall_timeout_s:g}s at offset {last + 1} while reading up to {end - 1}: "
                f"{last_error or 'the broker sent nothing (did the partition shrink?)'}",
            )


def _log_start(consumer: Any, source: SourcePartition) -> int | None:
    from confluent_kafka import TopicPartition

    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(source.topic, source.partition), timeout=5.0)
        return int(low)
    except Exception:  # the error above is the point; the number is a courtesy
        return None


def message_bytes(message: Any) -> int:
    """Record bytes counted against flush.max-bytes: key, value and header keys and values."""
    key, value, headers = message.key(), message.value(), message.headers()
    size = (0 if key is None else len(key)) + (0 if value is None else len(value))
    if headers:
        for name, data in headers:
            size += len(name.encode()) + (0 if data is None else len(data))
    return size


class RecordColumns:
    """Arrow columns of KAFKA_SCHEMA built in one pass over librdkafka messages.

    One Python loop fills flat lists; headers become a list array over flat key/value arrays instead
    of pyarrow's nested-object conversion (measured in the data-plane spike: 2.7 against 4.5 CPU-s per
    million 1 KiB records).
    """

    def __init__(self, topic: str, partition: int) -> None:
        self._topic = topic
        self._partition = partition
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.header_keys: list[str] = []
        self.header_values: list[bytes | None] = []
        self.header_ends: list[int] = [0]
        self.header_nulls: list[int] = []
        self.byte_count = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: Any, size: int) -> None:
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        timestamp_type, timestamp = message.timestamp()
        # librdkafka: 0 none, 1 create time, 2 log-append time; Kafka's (and Spark's) ids are one lower.
        self.timestamp_types.append(timestamp_type - 1)
        self.timestamps.append(timestamp)
        headers = message.headers()
        if headers is None:
            # Spark's Kafka source gives null, not an empty list, for a record without headers.
            self.header_nulls.append(len(self.offsets) - 1)
        else:
            for name, data in headers:
                self.header_keys.append(name)
                self.header_values.append(data)
        self.header_ends.append(len(self.header_keys))
        self.byte_count += size

    def take(self) -> pa.RecordBatch:
        """The rows added so far as one record batch; the builder starts empty again."""
        count = len(self.offsets)
        entries = pa.StructArray.from_arrays(
            [pa.array(self.header_keys, pa.string()), pa.array(self.header_values, pa.binary())],
            fields=list(HEADER_TYPE),
        )
        mask = None
        if self.header_nulls:
            nulls = np.zeros(count, dtype=bool)
            nulls[self.header_nulls] = True
            mask = pa.array(nulls)
        headers = pa.ListArray.from_arrays(
            pa.array(self.header_ends, pa.int32()), entries, type=pa.list_(HEADER_TYPE), mask=mask
        )
        timestamps = pa.array(np.asarray(self.timestamps, dtype=np.int64) * 1000, pa.int64())
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(count, np.int32)), pa.array([self._topic], pa.string())
                ).cast(pa.string()),
                pa.array(np.full(count, self._partition, np.int32)),
                pa.array(self.offsets, pa.int64()),
                timestamps.cast(pa.timestamp("us", tz="UTC")),
                pa.array(np.asarray(self.timestamp_types, dtype=np.int32)),
                headers,
            ],
            schema=KAFKA_SCHEMA,
        )
        self._reset()
        return batch
