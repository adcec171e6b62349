"""Produce a backlog quickly: one random buffer sliced per record, small keys, big producer batches."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from testkit.kafka_data import RDKAFKA_LOGGER, KafkaDataError, watermarks

KEY_BYTES = 8  # b"%08x" % (i mod 2**32)
# Records walk through this buffer without overlap, so a Parquet page (or a zstd window) never sees the same
# bytes twice: the payload is as incompressible as random data, and generating it costs one slice per record.
PAYLOAD_BUFFER_BYTES = 64 * 1024 * 1024

PRODUCER_CONFIG: dict[str, Any] = {
    "logger": RDKAFKA_LOGGER,
    "enable.idempotence": False,
    # One request in flight keeps records in order even when a batch is retried.
    "max.in.flight.requests.per.connection": 1,
    "acks": 1,
    # Random payloads do not compress; lz4 would only burn CPU the broker and the mirror then need.
    "compression.type": "none",
    "linger.ms": 50,
    "batch.size": 1_000_000,  # below the broker's default message.max.bytes (1 MiB)
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    # Delivery reports only for failures: no Python callback per record.
    "delivery.report.only.error": True,
}


@dataclass(frozen=True)
class ProduceResult:
    records: int
    payload_bytes: int  # key + value bytes
    seconds: float


def produce_backlog(
    bootstrap: str, topic: str, partitions: int, records_per_partition: int, value_size: int
) -> ProduceResult:
    """Produce `records_per_partition` records of `value_size` bytes to each partition; check the high watermarks."""
    payload = os.urandom(max(PAYLOAD_BUFFER_BYTES, 2 * value_size))
    wrap = len(payload) - value_size
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None and len(errors) < 10:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, "on_delivery": on_delivery})
    began = time.monotonic()
    try:
        produce = producer.produce
        position = 0
        for partition in range(partitions):
            for i in range(records_per_partition):
                value = payload[position : position + value_size]
                position += value_size
                if position > wrap:
                    position = 0
                key = b"%08x" % (i & 0xFFFFFFFF)
                try:
                    produce(topic, value, key, partition)
                except BufferError:  # local queue full: serve deliveries, then retry once there is room
                    while True:
                        producer.poll(0.01)
                        try:
                            produce(topic, value, key, partition)
                            break
                        except BufferError:
                            continue
        remaining = producer.flush(300)
    finally:
        seconds = time.monotonic() - began
    if remaining:
        errors.append(f"{remaining} record(s) undelivered after 300 s")
    if errors:
        raise KafkaDataError("produce failed: " + "; ".join(errors))
    for partition in range(partitions):
        low, high = watermarks(bootstrap, topic, partition)
        if (low, high) != (0, records_per_partition):
            raise KafkaDataError(
                f"{topic}[{partition}] holds offsets {low}..{high - 1}, expected 0..{records_per_partition - 1}"
            )
    total = partitions * records_per_partition
    return ProduceResult(records=total, payload_bytes=total * (KEY_BYTES + value_size), seconds=seconds)
