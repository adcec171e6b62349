"""A steady producer over the partitions of one topic, in a background thread: `rate` records/s in all, record i to
partition i mod P (so every partition gets rate/P records/s), sent in 10 ms ticks, each value starting with its
produce time (bench.latency's stamped values), for a fixed number of seconds.

It runs beside the measurement: the caller reads the window's boundaries from `began` and sleeps meanwhile.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping

from confluent_kafka import KafkaError, Message, Producer

from bench.latency import TICK, TIME_DIGITS, stamped_value
from bench.raw import PRODUCER
from testkit.kafka_data import KafkaDataError

# acks=all and a short linger, as bench.latency's producer: a record is on the broker a few ms after its stamp.
STEADY_PRODUCER = {**PRODUCER, "acks": "all", "linger.ms": 5, "delivery.report.only.error": True}


def produce_now(bootstrap: str, topic: str, counts: Mapping[int, int], value_size: int) -> None:
    """counts[p] stamped records into each partition p at once (priming records, sent before the clock starts)."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, **STEADY_PRODUCER, "on_delivery": _collect(errors)})
    padding = os.urandom(value_size - TIME_DIGITS)
    for partition, count in counts.items():
        for _ in range(count):
            producer.produce(topic, stamped_value(padding), partition=partition)
            producer.poll(0)
    if producer.flush(60) or errors:
        raise KafkaDataError(f"priming producer: {errors[:3]}")


class SteadyProducer(threading.Thread):
    """`rate` records/s over `partitions` partitions of `topic` for `seconds`; `sent[p]` records went to partition p
    once it has joined (`error` says why it stopped early, if it did)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, value_size: int, seconds: float) -> None:
        super().__init__(name="bench-steady-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.value_size, self.seconds = rate, value_size, seconds
        self.sent = dict.fromkeys(range(partitions), 0)
        self.largest_gap = 0.0  # seconds between two ticks: a stalled producer shows here, not as mirror latency
        self.began = 0.0  # epoch seconds of the first tick, set before `started` is
        self.ended = 0.0  # epoch seconds after the last record was acknowledged
        self.started = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:
            self.error = exc
        finally:
            self.started.set()  # never leave a waiter hanging on a producer that failed before its first tick

    def total(self) -> int:
        return sum(self.sent.values())

    def join_checked(self, timeout: float) -> None:
        self.join(timeout)
        if self.is_alive():
            raise KafkaDataError(f"the steady producer did not finish within {timeout:g} s")
        if self.error is not None:
            raise KafkaDataError(f"the steady producer failed: {self.error}") from self.error

    def _produce(self) -> None:
        errors: list[str] = []
        producer = Producer({"bootstrap.servers": self.bootstrap, **STEADY_PRODUCER, "on_delivery": _collect(errors)})
        padding = os.urandom(self.value_size - TIME_DIGITS)
        total, sent = int(self.rate * self.seconds), 0
        began = last = time.monotonic()
        self.began = time.time()
        self.started.set()
        while sent < total:
            now = time.monotonic()
            self.largest_gap, last = max(self.largest_gap, now - last), now
            due = min(total, math.floor(round(self.rate * (now - began), 9)))
            for index in range(sent, due):
                partition = index % self.partitions
                producer.produce(self.topic, stamped_value(padding), partition=partition)
                self.sent[partition] += 1
            sent = due
            producer.poll(0)
            time.sleep(max(0.0, TICK - (time.monotonic() - now)))
        if producer.flush(60) or errors:
            raise KafkaDataError(f"steady producer: {errors[:3]}")
        self.ended = time.time()


def _collect(errors: list[str]) -> Callable[[KafkaError | None, Message], None]:
    def failed(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err.str())

    return failed
