"""The raw baseline: how fast one plain confluent-kafka consumer drains the same partitions."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

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


def consume_backlog(bootstrap: str, topic: str, ends: dict[int, int], *, timeout: float = 1800) -> ConsumeResult:
    """Read every partition in `ends` from offset 0 up to its end offset (exclusive), touching each key and value.

    Timed from assign() to the last record; the partitions are known to hold offsets 0..end-1 with no holes.
    """
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-raw-{uuid.uuid4().hex}", **CONSUMER_CONFIG}
    )
    try:
        records = payload = 0
        expected = sum(ends.values())
        pending = {partition for partition, end in ends.items() if end > 0}
        began = time.monotonic()
        # An explicit start offset: OFFSET_BEGINNING costs librdkafka an extra offset lookup before the first fetch.
        consumer.assign([TopicPartition(topic, partition, 0) for partition in pending])
        deadline = began + timeout
        while pending:
            # consume() waits its whole timeout when fewer than num_messages arrive: never ask for more than is left.
            want = max(1, min(BATCH, expected - records))
            for msg in consumer.consume(num_messages=want, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise KafkaDataError(f"raw consume of {topic}[{msg.partition()}]: {err.str()}")
                key, value = msg.key(), msg.value()
                payload += (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
                records += 1
                partition, offset = msg.partition(), msg.offset()
                if partition is not None and offset is not None and offset >= ends[partition] - 1:
                    pending.discard(partition)
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw consume: {records} of {expected} records after {timeout} s")
        seconds = time.monotonic() - began
    finally:
        consumer.close()
    if records != expected:
        raise KafkaDataError(f"raw consume read {records} records, expected {expected}")
    return ConsumeResult(records=records, payload_bytes=payload, seconds=seconds)
