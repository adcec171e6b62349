"""The raw baseline: how fast one plain confluent-kafka consumer drains the same partitions."""

from __future__ import annotations

import resource
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from testkit.kafka_data import RDKAFKA_LOGGER, KafkaDataError

BATCH = 10_000  # records asked for per consume() call

CONSUMER_CONFIG: dict[str, Any] = {
    "logger": RDKAFKA_LOGGER,
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "earliest",
    "isolation.level": "read_committed",
    "enable.partition.eof": True,
    # Large fetches and a deep pre-fetch queue: the broker is never waiting for us to ask.
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 32 * 1024 * 1024,
    "receive.message.max.bytes": 64 * 1024 * 1024 + 1024 * 1024,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 1_048_576,
    "fetch.wait.max.ms": 100,
}


@dataclass(frozen=True)
class ConsumeResult:
    records: int
    payload_bytes: int  # key + value bytes, as received
    seconds: float
    cpu_seconds: float = 0.0  # the client's user + system CPU (all its threads) while it read


def consume_backlog(bootstrap: str, topic: str, ends: dict[int, int], *, timeout: float = 1800) -> ConsumeResult:
    """Read every partition in `ends` from offset 0 up to its end offset (exclusive), touching each key and value.

    Timed from assign() to the last record; the partitions are known to hold offsets 0..end-1 with no holes.
    """
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex}", **CONSUMER_CONFIG}
    )
    try:
        records = payload = 0
        began, cpu_began = time.monotonic(), time.process_time()
        for messages in _drain(consumer, topic, ends, timeout, "raw consume"):
            for msg in messages:
                key, value = msg.key(), msg.value()
                payload += (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
            records += len(messages)
        seconds, cpu = time.monotonic() - began, time.process_time() - cpu_began
    finally:
        consumer.close()
    return ConsumeResult(records=records, payload_bytes=payload, seconds=seconds, cpu_seconds=cpu)


def _drain(consumer: Consumer, topic: str, ends: dict[int, int], timeout: float, what: str) -> Iterator[list[Message]]:
    """Assign every partition of `ends` at offset 0 and yield the records read, batch by batch, until each
    partition's last offset (end - 1) has been seen; then check that exactly sum(ends) records came."""
    expected = sum(ends.values())
    records = 0
    pending = {partition for partition, end in ends.items() if end > 0}
    deadline = time.monotonic() + timeout
    # An explicit start offset: OFFSET_BEGINNING costs librdkafka an extra offset lookup before the first fetch.
    consumer.assign([TopicPartition(topic, partition, 0) for partition in pending])
    while pending:
        # consume() waits its whole timeout when fewer than num_messages arrive: never ask for more than is left.
        want = max(1, min(BATCH, expected - records))
        batch: list[Message] = []
        for msg in consumer.consume(num_messages=want, timeout=0.5):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise KafkaDataError(f"{what} of {topic}[{msg.partition()}]: {err.str()}")
            batch.append(msg)
            partition, offset = msg.partition(), msg.offset()
            if partition is not None and offset is not None and offset >= ends[partition] - 1:
                pending.discard(partition)
        records += len(batch)
        yield batch
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: {records} of {expected} records after {timeout} s")
    if records != expected:
        raise KafkaDataError(f"{what} read {records} records, expected {expected}")


PRODUCER_CONFIG: dict[str, Any] = {
    "logger": RDKAFKA_LOGGER,
    "acks": "all",
    "enable.idempotence": True,  # what the preserve mode's producer gives
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "compression.type": "none",
}


@dataclass(frozen=True)
class CopyResult:
    records: int
    payload_bytes: int
    seconds: float


def consume_produce_backlog(
    source: str, destination: str, topic: str, ends: dict[int, int], *, compression: str, timeout: float = 1800
) -> CopyResult:
    """The Kafka -> Kafka baseline: one confluent-kafka consumer reads each partition from offset 0 to its end and a
    producer writes every record (key, value, headers, timestamp) to the same partition of `topic` on `destination`.

    Timed from assign() until the producer has every delivery report (acks=all, idempotent); not exactly-once
    (no transaction, no position kept anywhere): the least a Kafka -> Kafka copy costs on this machine.
    """
    from confluent_kafka import Producer

    consumer = Consumer({"bootstrap.servers": source, "group.id": f"bench-copy-{uuid.uuid4().hex}", **CONSUMER_CONFIG})
    producer = Producer({"bootstrap.servers": destination, **PRODUCER_CONFIG, "compression.type": compression})
    failures: list[str] = []

    def delivered(err: KafkaError | None, _msg: Any) -> None:
        if err is not None and len(failures) < 5:
            failures.append(err.str())

    try:
        records = payload = 0
        began = time.monotonic()
        deadline = began + timeout
        for messages in _drain(consumer, topic, ends, timeout, "raw copy"):
            for msg in messages:
                key, value, partition = msg.key(), msg.value(), msg.partition()
                assert partition is not None
                while True:
                    try:
                        producer.produce(
                            topic,
                            value=value,
                            key=key,
                            partition=partition,
                            timestamp=msg.timestamp()[1],
                            headers=msg.headers(),
                            on_delivery=delivered,
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)  # the local queue is full: serve delivery reports
                payload += (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
            records += len(messages)
            producer.poll(0)
        left = producer.flush(max(1.0, deadline - time.monotonic()))
        seconds = time.monotonic() - began
    finally:
        consumer.close()
    if left or failures:
        raise KafkaDataError(f"raw copy: {left} records undelivered, failures: {failures}")
    return CopyResult(records=records, payload_bytes=payload, seconds=seconds)


def kcat_binary() -> str | None:
    """kcat (formerly kafkacat), if installed (`apt-get install kcat`): a second raw baseline in C."""
    return shutil.which("kcat") or shutil.which("kafkacat")


def kcat_consume(
    kcat: str, bootstrap: str, topic: str, ends: dict[int, int], *, timeout: float = 1800
) -> ConsumeResult:
    """kcat reading every partition of `topic` from the beginning to its end, with the raw consumer's fetch
    settings; it prints one size per record, which is summed here. Timed from process start to exit."""
    settings = [
        f"-X{key}={value}"
        for key, value in CONSUMER_CONFIG.items()
        if key not in ("logger", "enable.auto.commit", "enable.auto.offset.store", "enable.partition.eof")
    ]
    command = [kcat, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q", *settings, "-f", "%K %S\n"]
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
    seconds = time.monotonic() - began
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (children.ru_utime - children_before.ru_utime) + (children.ru_stime - children_before.ru_stime)
    if done.returncode != 0:
        raise KafkaDataError(f"kcat exited {done.returncode}: {done.stderr.decode(errors='replace').strip()[-500:]}")
    records = payload = 0
    for line in done.stdout.splitlines():
        key_size, _, value_size = line.partition(b" ")
        payload += max(0, int(key_size)) + max(0, int(value_size))  # -1 is a null key or value
        records += 1
    if records != sum(ends.values()):
        raise KafkaDataError(f"kcat read {records} records, expected {sum(ends.values())}")
    return ConsumeResult(records=records, payload_bytes=payload, seconds=seconds, cpu_seconds=cpu)
