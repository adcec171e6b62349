"""Backlogs and the raw baselines: produce N fixed-size records fast; drain them with a tight confluent-kafka loop,
with kcat, into zstd Parquet in one thread (the job's floor on one core), copy them to another broker with a
confluent-kafka consume -> produce loop, and produce records already in memory as the preserve mode's producer
would (the floor of a restore)."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from core.messages import RecordColumns, message_bytes
from core.records import parquet_writer
from sinks.blob.writer import ROW_GROUP_BYTES, ROW_GROUP_ROWS
from testkit.kafka_data import RDKAFKA_LOGGER, KafkaDataError, watermarks

KEY_BYTES = 8  # b"%08x" % (i mod 2**32)
# Records walk through this buffer without overlap, so a Parquet page (or a zstd window) never sees the same bytes
# twice: the payload is as incompressible as random data, and making it costs one slice per record.
PAYLOAD_BUFFER_BYTES = 64 * 1024 * 1024
BATCH = 10_000  # records asked for per consume() call

PRODUCER: dict[str, Any] = {
    "logger": RDKAFKA_LOGGER,
    "acks": 1,
    "max.in.flight.requests.per.connection": 1,  # in order even when a batch is retried
    "compression.type": "none",  # random payloads do not compress
    "linger.ms": 50,
    "batch.size": 1_000_000,  # below the broker's message.max.bytes (1 MiB)
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
}
CONSUMER: dict[str, Any] = {
    "logger": RDKAFKA_LOGGER,
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    # Large fetches and a deep pre-fetch queue: the broker never waits for the client to ask.
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 32 * 1024 * 1024,
    "receive.message.max.bytes": 65 * 1024 * 1024,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 1_048_576,
    "fetch.wait.max.ms": 100,
}
# The copy's producer: what the preserve mode's producer gives (acks=all, idempotent), not transactional.
COPY_PRODUCER: dict[str, Any] = {**PRODUCER, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
del COPY_PRODUCER["max.in.flight.requests.per.connection"]


def _send(producer: Producer, topic: str, partition: int, value: Any, key: Any, **extra: Any) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition, **extra)
            return
        except BufferError:  # the local queue is full: serve delivery reports, then try again
            producer.poll(0.01)


def _flushed(producer: Producer, errors: list[str], what: str) -> None:
    left = producer.flush(300)
    if left or errors:
        raise KafkaDataError(f"{what}: {left} records undelivered; {'; '.join(errors[:5])}")


def produce_backlog(bootstrap: str, topic: str, ends: Mapping[int, int], value_size: int, prefix: bytes = b"") -> float:
    """Produce ends[p] records of `value_size` bytes to each partition p (each value starting with `prefix`: a schema
    registry's wire-format header); return the seconds it took."""
    payload = os.urandom(max(PAYLOAD_BUFFER_BYTES, 2 * value_size))
    wrap, position, errors = len(payload) - value_size, 0, []

    def failed(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    # Delivery reports only for failures: no Python callback per record.
    producer = Producer(
        {"bootstrap.servers": bootstrap, **PRODUCER, "delivery.report.only.error": True, "on_delivery": failed}
    )
    began = time.monotonic()
    for partition, count in ends.items():
        for i in range(count):
            body = payload[position : position + value_size - len(prefix)]
            _send(producer, topic, partition, prefix + body if prefix else body, b"%08x" % (i & 0xFFFFFFFF))
            position += value_size
            if position > wrap:
                position = 0
    _flushed(producer, errors, "produce")
    seconds = time.monotonic() - began
    for partition, count in ends.items():
        if watermarks(bootstrap, topic, partition) != (0, count):
            raise KafkaDataError(f"{topic}[{partition}] does not hold offsets 0..{count - 1}")
    return seconds


@dataclass(frozen=True)
class Records:
    """One partition's records in memory, in offset order: what a raw produce sends."""

    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int]  # ms, sent as CreateTime
    headers: list[list[tuple[str, bytes | None]]] | None  # None: no record has any


def produce_records(bootstrap: str, topic: str, records: Mapping[int, Records]) -> dict[str, float]:
    """Produce each partition's records (keys, values, timestamps, headers) to the same partition of `topic` with
    the preserve mode's producer settings (acks=all, idempotent: COPY_PRODUCER), delivery reports only for errors:
    seconds and CPU seconds (this process, librdkafka's threads included) until every record is acknowledged."""
    errors: list[str] = []

    def failed(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    producer = Producer(
        {"bootstrap.servers": bootstrap, **COPY_PRODUCER, "delivery.report.only.error": True, "on_delivery": failed}
    )
    began, cpu = time.monotonic(), time.process_time()
    for partition, batch in records.items():
        if batch.headers is None:
            for key, value, stamp in zip(batch.keys, batch.values, batch.timestamps, strict=True):
                _send(producer, topic, partition, value, key, timestamp=stamp)
        else:
            rows = zip(batch.keys, batch.values, batch.timestamps, batch.headers, strict=True)
            for key, value, stamp, headers in rows:
                _send(producer, topic, partition, value, key, timestamp=stamp, headers=headers)
    _flushed(producer, errors, "raw produce")
    return {"seconds": time.monotonic() - began, "cpu_seconds": time.process_time() - cpu}


def _drain(consumer: Consumer, topic: str, ends: Mapping[int, int], timeout: float) -> Iterator[list[Message]]:
    """Every record of `ends` from offset 0, batch by batch, until each partition's last offset was seen."""
    expected, records = sum(ends.values()), 0
    pending = {partition for partition, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout
    # An explicit start offset: OFFSET_BEGINNING costs librdkafka an offset lookup before the first fetch.
    consumer.assign([TopicPartition(topic, partition, 0) for partition in pending])
    while pending:
        batch = []
        # consume() waits its whole timeout when fewer than num_messages arrive: never ask for more than is left.
        for msg in consumer.consume(num_messages=max(1, min(BATCH, expected - records)), timeout=0.5):
            err = msg.error()
            if err is not None and err.code() != KafkaError._PARTITION_EOF:
                raise KafkaDataError(f"{topic}[{msg.partition()}]: {err.str()}")
            if err is None:
                batch.append(msg)
            partition, offset = msg.partition(), msg.offset()
            if err is None and partition is not None and offset is not None and offset >= ends[partition] - 1:
                pending.discard(partition)
        records += len(batch)
        yield batch
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}: {records} of {expected} records after {timeout} s")
    if records != expected:
        raise KafkaDataError(f"{topic}: read {records} records, expected {expected}")


def _consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}", **CONSUMER})


def consume(bootstrap: str, topic: str, ends: Mapping[int, int], timeout: float) -> dict[str, float]:
    """The raw consume loop over the backlog, touching every key and value: its seconds and CPU seconds (this
    process, librdkafka's threads included), from assign() to the last record."""
    consumer = _consumer(bootstrap)
    try:
        began, cpu = time.monotonic(), time.process_time()
        payload = 0
        for batch in _drain(consumer, topic, ends, timeout):
            for msg in batch:
                payload += len(msg.key() or b"") + len(msg.value() or b"")
        return {"seconds": time.monotonic() - began, "cpu_seconds": time.process_time() - cpu}
    finally:
        consumer.close()


def consume_to_parquet(
    bootstrap: str, topic: str, ends: Mapping[int, int], timeout: float, directory: Path
) -> dict[str, float]:
    """The floor of this job on one core: the raw consume loop, each record into Arrow columns (the tasks' one-pass
    builder) and one zstd Parquet file per partition (the blobs' encoding), in one thread. Seconds and CPU seconds
    (this process, librdkafka's threads included), from assign() to the last file closed."""
    consumer = _consumer(bootstrap)
    directory.mkdir(parents=True, exist_ok=True)
    writers: dict[int, pq.ParquetWriter] = {}
    columns: dict[int, RecordColumns] = {}
    try:
        began, cpu = time.monotonic(), time.process_time()
        for batch in _drain(consumer, topic, ends, timeout):
            for msg in batch:
                partition = msg.partition() or 0
                if partition not in columns:
                    columns[partition] = RecordColumns(topic, partition)
                    writers[partition] = parquet_writer(str(directory / f"{partition}.parquet"), "zstd", None)
                built = columns[partition]
                built.add(msg, message_bytes(msg))
                if len(built) >= ROW_GROUP_ROWS or built.byte_count >= ROW_GROUP_BYTES:
                    writers[partition].write_batch(built.take())
        for partition, built in columns.items():
            if len(built):
                writers[partition].write_batch(built.take())
            writers[partition].close()
        return {"seconds": time.monotonic() - began, "cpu_seconds": time.process_time() - cpu}
    finally:
        consumer.close()
        shutil.rmtree(directory, ignore_errors=True)


def copy(source: str, destination: str, topic: str, target: str, ends: Mapping[int, int], timeout: float) -> float:
    """The floor of a Kafka -> Kafka copy: every record (key, value, headers, timestamp) consumed and produced to the
    same partition of `target` on `destination`; seconds from assign() until every delivery report is in."""
    consumer, errors = _consumer(source), []

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err.str())

    producer = Producer({"bootstrap.servers": destination, **COPY_PRODUCER, "on_delivery": delivered})
    try:
        began = time.monotonic()
        for batch in _drain(consumer, topic, ends, timeout):
            for msg in batch:
                extra = {"timestamp": msg.timestamp()[1], "headers": msg.headers()}
                _send(producer, target, msg.partition() or 0, msg.value(), msg.key(), **extra)
            producer.poll(0)
        _flushed(producer, errors, "raw copy")
        return time.monotonic() - began
    finally:
        consumer.close()


def kcat(bootstrap: str, topic: str, ends: Mapping[int, int], timeout: float) -> dict[str, float] | None:
    """kcat (C, librdkafka) reading the backlog with the raw consumer's fetch settings, printing each record's key and
    value sizes: seconds and CPU seconds from process start to exit. None when kcat is not installed."""
    binary = shutil.which("kcat") or shutil.which("kafkacat")
    if binary is None:
        return None
    skip = ("logger", "enable.auto.commit", "enable.partition.eof")
    settings = [f"-X{key}={value}" for key, value in CONSUMER.items() if key not in skip]
    command = [binary, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", *settings, "-f", "%K %S\n"]
    before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    done = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
    seconds, after = time.monotonic() - began, resource.getrusage(resource.RUSAGE_CHILDREN)
    records = done.stdout.count(b"\n")
    if done.returncode != 0 or records != sum(ends.values()):
        raise KafkaDataError(f"kcat exited {done.returncode} after {records} records: {done.stderr[-500:]!r}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {"seconds": seconds, "cpu_seconds": cpu}
