"""Produce -> durable latency of Kafka -> filesystem at a steady produce rate.

One mirror copies a fresh one-partition topic. A few priming records are waited for (the mirror is up and Spark has
read), then a producer sends `rate` records/s in 10 ms ticks for warm-up + window seconds, each value starting with
its produce time (µs since the epoch, 16 ASCII digits). A watcher thread lists the partition's directory every 5 ms
and notes when each blob first appears (blobs appear atomically, by link). A record's latency is the moment its
blob was first seen minus its produce time, over the records produced in the window.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import KafkaError, Message, Producer

from bench.mirror import Context, finish, flushes, start, wait_landed
from bench.raw import PRODUCER
from bench.scenarios import Scenario
from sinks.blob.chain import parse_blob_name
from testkit.kafka_data import KafkaDataError, create_topic
from testkit.targets import FilesystemTarget, chain

TIME_DIGITS = 16
PRIME = 100  # records made durable before the clock starts
TICK = 0.01  # the producer sends what is due every 10 ms
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9))


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q % of the values at or below it."""
    if not ordered or not 0 <= q <= 100:
        raise ValueError(f"percentile {q} of {len(ordered)} values")
    rank = math.ceil(round(q * len(ordered) / 100, 9))  # round: 99.9 % of 1000 is 999, not 999.0000000001
    return ordered[max(1, rank) - 1]


class Watcher(threading.Thread):
    """Notes when each blob of a directory first appears, listing it every 5 ms."""

    def __init__(self, directory: str) -> None:
        super().__init__(name="bench-latency-watcher", daemon=True)
        self.directory, self.done = directory, threading.Event()
        self.seen: dict[str, float] = {}

    def run(self) -> None:
        while not self.done.wait(0.005):
            now = time.time()
            for name in os.listdir(self.directory) if os.path.isdir(self.directory) else []:
                if name not in self.seen and parse_blob_name(name) is not None:
                    self.seen[name] = now


def stamped_value(padding: bytes) -> bytes:
    """A value that starts with its produce time: µs since the epoch, TIME_DIGITS ASCII digits."""
    return b"%0*d" % (TIME_DIGITS, time.time_ns() // 1000) + padding


def value_stamps(values: pa.ChunkedArray | pa.Array) -> pa.Array:
    """The produce times (µs since the epoch) at the start of stamped values."""
    stamps = pc.cast(pc.cast(pc.binary_slice(values, 0, TIME_DIGITS), pa.string()), pa.int64())
    return stamps.combine_chunks() if isinstance(stamps, pa.ChunkedArray) else stamps


def _produce_steady(bootstrap: str, topic: str, s: Scenario, count: int | None = None) -> tuple[int, float]:
    """`count` records at once, or `rate` records/s for warm-up + window seconds; (records, largest tick gap s)."""
    errors: list[str] = []

    def failed(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err.str())

    config = {**PRODUCER, "acks": "all", "linger.ms": 5, "delivery.report.only.error": True, "on_delivery": failed}
    producer = Producer({"bootstrap.servers": bootstrap, **config})
    padding, sent, gap = os.urandom(s.value_size - TIME_DIGITS), 0, 0.0
    total = count if count is not None else int(s.rate * (s.warmup + s.seconds))
    began = last = time.monotonic()
    while sent < total:
        now = time.monotonic()
        gap, last = max(gap, now - last), now
        due = total if count is not None else min(total, math.floor(round(s.rate * (now - began), 9)))
        for _ in range(due - sent):
            producer.produce(topic, stamped_value(padding), partition=0)
        sent = due
        producer.poll(0)
        time.sleep(max(0.0, TICK - (time.monotonic() - now)))
    if producer.flush(60) or errors:
        raise KafkaDataError(f"latency producer: {errors[:3]}")
    return sent, gap


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    topic, target = ctx.name, FilesystemTarget(ctx.scratch / "latency")
    create_topic(ctx.bootstrap, topic, 1)
    _produce_steady(ctx.bootstrap, topic, s, PRIME)
    with start(ctx, "latency", target, [{"topic": topic, "partition": 0}], s.max_time_ms) as run:
        wait_landed(run, target, topic, {0: PRIME}, ctx.timeout)
        startup = time.time() - run.started_at
        watcher = Watcher(str(target.directory(topic, 0)))
        watcher.start()
        try:
            window_from = (time.time() + s.warmup) * 1e6
            produced, gap = _produce_steady(ctx.bootstrap, topic, s)
            wait_landed(run, target, topic, {0: PRIME + produced}, ctx.timeout)
        finally:
            watcher.done.set()
            watcher.join()
        written = flushes(run)
        result = finish(run, target, {topic: {0: PRIME + produced}})
    latencies: list[float] = []
    files = 0
    for blob in chain(target, topic, 0):
        table = pq.read_table(target.directory(topic, 0) / blob.name, columns=["value"])
        stamps = value_stamps(table.column("value"))
        measured = [us for us in stamps.to_pylist() if us >= window_from]
        files += bool(measured)
        latencies += [watcher.seen[blob.name] - us / 1e6 for us in measured]
    latencies.sort()
    yield {
        "rate": s.rate,
        "value_size": s.value_size,
        "max_time_ms": s.max_time_ms,
        "window_seconds": s.seconds,
        "warmup_seconds": s.warmup,
        "records": len(latencies),
        "achieved_rate": round(len(latencies) / s.seconds, 1),
        "largest_tick_gap_ms": round(gap * 1000, 1),
        **{label: round(percentile(latencies, q), 4) for label, q in PERCENTILES},
        "max": round(latencies[-1], 4),
        "mean": round(math.fsum(latencies) / len(latencies), 4),
        "files": files,
        "startup_seconds": round(startup, 2),
        **{key: written[key] for key in ("flushes", "flush_seconds", "triggers")},
        **result,
    }
