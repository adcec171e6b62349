"""`python -m bench.latency`: produce -> durable latency of Kafka -> filesystem at a steady produce rate.

One run creates a fresh one-partition topic on a running broker and starts the real CLI (`python -m supervisor run`,
one mirror, filesystem destination, `flush.max-time-ms` as given, every other setting default). A few priming
records wait until they are durable (the mirror has started, the Spark JVM is up and has done a read). Then a
confluent-kafka producer sends records at a steady rate, in ticks of 10 ms, for warm-up + measured seconds. Each
record's value starts with its produce time (`time.time()` at `produce()`, microseconds since the epoch, 16 ASCII
digits); its CreateTime carries the same instant in ms. Meanwhile a watcher thread lists the partition directory every
5 ms and notes when each final blob first appears (blobs are published atomically by link/rename; temporaries are
skipped). A record's latency is the moment its blob was first seen minus its produce time; records produced during the
warm-up are left out. The blobs are read back with pyarrow after the run (they are immutable, so reading them later
gives the same answer and keeps the watcher cheap while the mirror runs). Finally the mirror gets SIGTERM (exit 0
expected) and the chain is verified to hold every produced offset exactly once.

Where the time goes is split per record from the mirror's own logs: the Spark event log gives each range read's
submission and completion (reads are sequential, so the cumulative records read map them to offsets), the `flushed`
log lines give each write's end and duration.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import KafkaError, Message, Producer

from bench.data import PAYLOAD_BUFFER_BYTES, PRODUCER_CONFIG
from bench.machine import load_average
from bench.mirror_run import (
    MirrorRunError,
    MirrorSettings,
    _event_lines,
    _events,
    _log_time,
    _tail,
    start_mirror,
    write_config,
)
from bench.targets import FilesystemTarget, VerificationError
from sinks.blob_chain import parse_blob_name
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, watermarks

TIME_DIGITS = 16  # produce time at the start of each value: microseconds since the epoch, zero-padded ASCII
PRIME_RECORDS = 100  # produced (and waited for) before the clock starts: mirror started, Spark up and warm
TICK_SECONDS = 0.01  # the producer sends what is due every 10 ms
WATCH_SECONDS = 0.005  # the watcher lists the partition directory this often
SLICE_SECONDS = 10.0  # the report also splits the window into slices this long (by produce time)
TARGET_SLACK_SECONDS = 0.5  # the project's target: p99 <= flush.max-time-ms + 0.5 s
STARTUP_TIMEOUT = 300.0  # mirror process start -> priming records durable
SETTLE_TIMEOUT = 180.0  # last record produced -> every record durable
PRODUCER_OVERRIDES: dict[str, Any] = {
    "acks": "all",
    "linger.ms": 5,  # a steady trickle: small batches, sent at once
    "batch.num.messages": 10_000,
}
PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 50), ("p90", 90), ("p99", 99), ("p99.9", 99.9))


# ------------------------------------------------------------------------------------------------- pure helpers


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence: the smallest value with at least q % of values <= it."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    rank = math.ceil(round(q * len(sorted_values) / 100, 9))  # round: 99.9 % of 1000 is 999, not 999.0000001
    return sorted_values[max(1, rank) - 1]


@dataclass(frozen=True)
class Spread:
    """A distribution in one unit: nearest-rank percentiles, maximum and mean."""

    count: int
    min: float
    p50: float
    p90: float
    p99: float
    p999: float
    max: float
    mean: float

    @staticmethod
    def of(values: Sequence[float]) -> Spread:
        ordered = sorted(values)
        return Spread(
            count=len(ordered),
            min=ordered[0],
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            p999=percentile(ordered, 99.9),
            max=ordered[-1],
            mean=math.fsum(ordered) / len(ordered),
        )


class Pacer:
    """How many records a steady `rate` per second owes by `elapsed` seconds, capped at `total`.

    Asked every tick, it yields rate * tick records per tick; a tick that wakes late catches up at once, so the
    count never falls behind the schedule by more than one tick's worth.
    """

    def __init__(self, rate: float, total: int) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self.total = total

    def due(self, elapsed: float) -> int:
        if elapsed <= 0:
            return 0
        return min(self.total, math.floor(round(self.rate * elapsed, 9)))


def encode_value(produced_us: int, padding: bytes | memoryview) -> bytes:
    """A record value: its produce time (TIME_DIGITS ASCII digits of µs since the epoch), then the padding."""
    return b"%0*d" % (TIME_DIGITS, produced_us) + bytes(padding)


def produce_times_us(values: pa.Array | pa.ChunkedArray) -> list[int]:
    """The produce times (µs since the epoch) at the start of a column of values written by `encode_value`."""
    prefix = pc.binary_slice(values, 0, TIME_DIGITS)
    return [int(v) for v in pc.cast(pc.cast(prefix, pa.string()), pa.int64()).to_pylist()]


def latency_slices(
    produced_us: Sequence[int],
    latencies: Sequence[float],
    from_us: int,
    window_seconds: float,
    slice_seconds: float = SLICE_SECONDS,
) -> tuple[tuple[float, Spread], ...]:
    """The latencies grouped by produce time into consecutive slices of the window that starts at `from_us`:
    (slice start in seconds into the window, their Spread), in time order; empty slices are left out. The last
    slice also takes the few records of the producer's final tick, which may land just past the window's end."""
    last = max(0, math.ceil(round(window_seconds / slice_seconds, 9)) - 1)
    groups: dict[int, list[float]] = {}
    for produced, latency in zip(produced_us, latencies, strict=True):
        index = min(last, max(0, math.floor((produced - from_us) / 1e6 / slice_seconds)))
        groups.setdefault(index, []).append(latency)
    return tuple((index * slice_seconds, Spread.of(values)) for index, values in sorted(groups.items()))


@dataclass(frozen=True)
class FlushLine:
    """One `flushed` log line of the mirror."""

    first: int
    last: int
    count: int
    bytes: int
    elapsed_ms: int
    interval_ms: int
    trigger: str
    logged_at: float  # epoch seconds (ms resolution)


def parse_flush(fields: dict[str, str]) -> FlushLine:
    return FlushLine(
        first=int(fields["from"]),
        last=int(fields["to"]),
        count=int(fields["count"]),
        bytes=int(fields["bytes"]),
        elapsed_ms=int(fields["elapsed_ms"]),
        interval_ms=int(fields.get("interval_ms", "0")),
        trigger=fields.get("trigger", "?"),
        logged_at=_log_time(fields),
    )


@dataclass(frozen=True)
class SparkRead:
    """One range read as Spark's event log shows it: the SQL execution of its `toArrow()` and the job(s) inside."""

    began: float  # the execution starts (the DataFrame is planned), epoch seconds
    submitted: float  # its first job is submitted
    completed: float  # its last job completes
    ended: float  # the execution ends (the Arrow batches have been handed to Python)
    rows: int  # records read (the scan's `number of output rows`)

    @property
    def seconds(self) -> float:
        return self.ended - self.began


_EVENT_MARKERS = ("SQLExecutionStart", "SQLExecutionEnd", '"SparkListenerJob', '"SparkListenerTaskEnd"')


def spark_reads(lines: Iterable[str]) -> list[SparkRead]:
    """The reads of a Spark event log (JSON lines), in the order they began.

    A job belongs to the SQL execution named by its `spark.sql.execution.id` property (the root execution of the
    `toArrow()` call); its rows are the per-task updates of the scan's `number of output rows` metric (the plan may
    count the same rows in more than one operator: the largest count is taken).
    """
    execution_start: dict[int, float] = {}
    execution_end: dict[int, float] = {}
    job_execution: dict[int, int] = {}
    job_times: dict[int, list[float]] = {}
    stage_job: dict[int, int] = {}
    job_rows: dict[int, dict[int, int]] = {}  # job -> metric id -> rows
    for line in lines:
        if not any(marker in line for marker in _EVENT_MARKERS):
            continue
        event = json.loads(line)
        kind = str(event.get("Event", ""))
        if kind.endswith("SQLExecutionStart"):
            execution_start[int(event["executionId"])] = event["time"] / 1000
        elif kind.endswith("SQLExecutionEnd"):
            execution_end[int(event["executionId"])] = event["time"] / 1000
        elif kind == "SparkListenerJobStart":
            job = int(event["Job ID"])
            execution = (event.get("Properties") or {}).get("spark.sql.execution.id")
            if execution is not None:
                job_execution[job] = int(execution)
            job_times[job] = [event["Submission Time"] / 1000, event["Submission Time"] / 1000]
            for stage in event.get("Stage IDs", []):
                stage_job[int(stage)] = job
        elif kind == "SparkListenerJobEnd" and int(event["Job ID"]) in job_times:
            job_times[int(event["Job ID"])][1] = event["Completion Time"] / 1000
        elif kind == "SparkListenerTaskEnd" and int(event["Stage ID"]) in stage_job:
            rows = job_rows.setdefault(stage_job[int(event["Stage ID"])], {})
            for metric in (event.get("Task Info") or {}).get("Accumulables", []):
                if metric.get("Name") == "number of output rows" and metric.get("Update") is not None:
                    rows[int(metric["ID"])] = rows.get(int(metric["ID"]), 0) + int(metric["Update"])
    jobs_of: dict[int, list[int]] = {}
    for job, execution in job_execution.items():
        jobs_of.setdefault(execution, []).append(job)
    reads = []
    for execution, jobs in jobs_of.items():
        submitted = min(job_times[job][0] for job in jobs)
        completed = max(job_times[job][1] for job in jobs)
        reads.append(
            SparkRead(
                began=execution_start.get(execution, submitted),
                submitted=submitted,
                completed=completed,
                ended=execution_end.get(execution, completed),
                rows=sum(max(job_rows.get(job, {}).values(), default=0) for job in jobs),
            )
        )
    return sorted(reads, key=lambda read: read.began)


def load_spark_reads(event_log_dir: Path) -> list[SparkRead]:
    """The reads of the (single) application whose event log is in `event_log_dir`."""
    logs = sorted(event_log_dir.iterdir())
    if len(logs) != 1:
        raise MirrorRunError(f"expected one Spark event log in {event_log_dir}, found {[p.name for p in logs]}")
    return spark_reads(_event_lines(logs[0]))


def read_ranges(reads: Sequence[SparkRead], first_offset: int = 0) -> list[tuple[int, int, SparkRead]]:
    """(first, last offset, read) of each range read of one mirror, which reads one range at a time: in the order
    they began, the reads cover consecutive offsets, `rows` each (no holes: no transactions). Empty reads are
    dropped."""
    ranges = []
    offset = first_offset
    for read in sorted(reads, key=lambda r: r.began):
        if read.rows > 0:
            ranges.append((offset, offset + read.rows - 1, read))
            offset += read.rows
    return ranges


# ------------------------------------------------------------------------------------------------------- result


@dataclass(frozen=True)
class Stage:
    """One leg of the way from produce() to a durable blob, over the measured records."""

    name: str
    spread: Spread  # seconds
    tail_mean: float  # mean over the records at or above the latency p99, seconds


@dataclass(frozen=True)
class Breakdown:
    stages: tuple[Stage, ...]
    reads: int  # Spark range reads that fetched measured records
    read_seconds: Spread  # their SQL executions: toArrow() called -> rows handed to Python
    plan_seconds: Spread  # execution start -> first job submitted
    job_seconds: Spread  # first job submitted -> last job completed
    gap_seconds: Spread | None  # previous read's end -> this read's start (the ingest loop between reads)
    records_per_read: Spread


@dataclass(frozen=True)
class LatencyResult:
    rate: int  # target records/s
    seconds: float  # measured window
    warmup_seconds: float
    value_size: int
    max_time_ms: int
    topic: str
    records: int  # measured records (produced after the warm-up)
    produced: int  # every record of the topic: priming + warm-up + measured
    achieved_rate: float  # measured records / measured window
    largest_tick_gap_ms: float  # the longest the producer loop was away between two ticks
    latency: Spread  # seconds, produce() -> blob first seen
    slices: tuple[tuple[float, Spread], ...]  # (seconds into the window, latency) per SLICE_SECONDS of produce time
    files: int  # blobs holding measured records
    records_per_file: Spread
    flushes: tuple[FlushLine, ...]  # the `flushed` lines of those blobs
    breakdown: Breakdown | None
    breakdown_note: str  # why there is no breakdown, or ""
    startup_seconds: float  # mirror process start -> priming records durable
    settle_seconds: float  # last record produced -> every record durable
    drain_seconds: float  # SIGTERM -> exit
    exit_code: int
    run_seconds: float  # the whole measure_latency() call
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]

    @property
    def target_seconds(self) -> float:
        return self.max_time_ms / 1000 + TARGET_SLACK_SECONDS

    @property
    def meets_target(self) -> bool:
        return self.latency.p99 <= self.target_seconds

    @property
    def triggers(self) -> dict[str, int]:
        return dict(Counter(flush.trigger for flush in self.flushes))

    def flush_intervals_ms(self) -> Spread | None:
        # The first flush line of a run has interval 0 (no previous flush); a measured blob is never the first.
        intervals = [float(f.interval_ms) for f in self.flushes if f.interval_ms > 0]
        return Spread.of(intervals) if intervals else None

    def flush_elapsed_ms(self) -> Spread | None:
        return Spread.of([float(f.elapsed_ms) for f in self.flushes]) if self.flushes else None


# ----------------------------------------------------------------------------------------------------- the run


class BlobWatcher(threading.Thread):
    """Lists a directory every `interval` seconds; remembers when each final blob name was first seen."""

    def __init__(self, directory: Path, interval: float = WATCH_SECONDS) -> None:
        super().__init__(name="blob-watcher", daemon=True)
        self.directory = directory
        self.interval = interval
        self._seen: dict[str, float] = {}
        self._next: int | None = None
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                self.look()
                self._stop_event.wait(self.interval)
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def look(self) -> None:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        now = time.time()
        with self._lock:
            for name in names:
                if name in self._seen:
                    continue
                blob = parse_blob_name(name)  # None for temporaries (`.<name>.tmp-<random>`) and anything else
                if blob is not None:
                    self._seen[name] = now
                    self._next = max(self._next or 0, blob.last + 1)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)

    def chain_next(self) -> int | None:
        with self._lock:
            return self._next

    def seen(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seen)


class _RateProducer:
    """A confluent-kafka producer of time-stamped values to partition 0 of one topic."""

    def __init__(self, bootstrap: str, topic: str, value_size: int) -> None:
        if value_size < TIME_DIGITS:
            raise ValueError(f"value size must be at least {TIME_DIGITS} bytes (the produce time), got {value_size}")
        self.topic = topic
        self.pad = value_size - TIME_DIGITS
        self.payload = memoryview(os.urandom(max(PAYLOAD_BUFFER_BYTES // 4, 2 * self.pad + 1)))
        self.position = 0
        self.sent = 0
        self.errors: list[str] = []
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                **PRODUCER_CONFIG,
                **PRODUCER_OVERRIDES,
                "on_delivery": self._on_delivery,
            }
        )

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None and len(self.errors) < 10:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def send(self) -> None:
        padding = self.payload[self.position : self.position + self.pad]
        self.position += self.pad
        if self.position + self.pad > len(self.payload):
            self.position = 0
        key = b"%08x" % (self.sent & 0xFFFFFFFF)
        while True:
            now_us = time.time_ns() // 1000
            try:
                self.producer.produce(self.topic, encode_value(now_us, padding), key, 0, timestamp=now_us // 1000)
                break
            except BufferError:  # the local queue is full: serve deliveries, then produce (with a new time)
                self.producer.poll(0.01)
        self.sent += 1

    def poll(self) -> None:
        self.producer.poll(0)

    def flush(self, timeout: float) -> None:
        remaining = self.producer.flush(timeout)
        if remaining:
            self.errors.append(f"{remaining} record(s) undelivered after {timeout} s")
        if self.errors:
            raise MirrorRunError("produce failed: " + "; ".join(self.errors))


def measure_latency(
    bootstrap: str,
    workdir: Path,
    rate: int = 5000,
    seconds: float = 60.0,
    warmup_seconds: float = 10.0,
    value_size: int = 1024,
    max_time_ms: int = 1000,
) -> LatencyResult:
    """Produce -> durable latency of one Kafka -> filesystem mirror (the real CLI) at a steady produce rate.

    `bootstrap` is a running broker; `workdir` receives the destination, the config, the mirror's log and the Spark
    event log. Raises MirrorRunError when the mirror fails, misses a deadline, or the chain does not verify.
    """
    began = time.monotonic()
    load_before = load_average()
    workdir.mkdir(parents=True, exist_ok=True)
    topic = f"latency-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    target = FilesystemTarget(workdir / "destination", topic)
    event_log_dir = workdir / "spark-events"
    log_path = workdir / "mirror.log"
    config = write_config(
        workdir / "mirror.yaml",
        bootstrap=bootstrap,
        target=target,
        topic=topic,
        partitions=1,
        settings=MirrorSettings(flush_max_time_ms=max_time_ms),
        event_log_dir=event_log_dir,
    )

    producer = _RateProducer(bootstrap, topic, value_size)
    watcher = BlobWatcher(target.directory(0))
    watcher.start()
    with log_path.open("wb") as log_file:
        process_start = time.time()
        proc = start_mirror(config, log_file, target.env())
        try:

            def wait_durable(end: int, timeout: float, what: str) -> float:
                deadline = time.monotonic() + timeout
                while (watcher.chain_next() or 0) < end:
                    _check_alive(proc, watcher, log_path)
                    if time.monotonic() > deadline:
                        raise MirrorRunError(f"{what}: not durable within {timeout} s:\n{_tail(log_path)}")
                    time.sleep(WATCH_SECONDS)
                return time.time()

            # Prime: the mirror has started, Spark is up and has read; the JVM is warm.
            for _ in range(PRIME_RECORDS):
                producer.send()
            producer.flush(60)
            primed_at = wait_durable(PRIME_RECORDS, STARTUP_TIMEOUT, f"the first {PRIME_RECORDS} records")

            # Steady production: warm-up, then the measured window.
            total_seconds = warmup_seconds + seconds
            pacer = Pacer(rate, math.floor(round(rate * total_seconds, 9)))
            start_wall = time.time()
            start = time.monotonic()
            measure_from_us = round((start_wall + warmup_seconds) * 1e6)
            next_tick = start
            largest_gap = 0.0
            previous_tick = start
            while producer.sent - PRIME_RECORDS < pacer.total:
                now = time.monotonic()
                largest_gap = max(largest_gap, now - previous_tick)
                previous_tick = now
                due = pacer.due(now - start) if now - start < total_seconds else pacer.total
                while producer.sent - PRIME_RECORDS < due:
                    producer.send()
                producer.poll()
                _check_alive(proc, watcher, log_path)
                next_tick += TICK_SECONDS
                delay = next_tick - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_tick = time.monotonic()  # late: the pacer has caught up on the count; tick on from now
            produced_until = time.time()
            producer.flush(60)
            low, high = watermarks(bootstrap, topic, 0)
            if (low, high) != (0, producer.sent):
                raise MirrorRunError(f"{topic}[0] holds offsets {low}..{high - 1}, expected 0..{producer.sent - 1}")
            settled_at = wait_durable(high, SETTLE_TIMEOUT, f"all {high} records")
            watcher.stop()
            stop_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(120)
            drain_seconds = time.monotonic() - stop_at
        finally:
            watcher.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    if exit_code != 0:
        raise MirrorRunError(f"mirror exited {exit_code} after SIGTERM (expected 0):\n{_tail(log_path)}")
    try:
        target.verify({0: high})
    except VerificationError as exc:
        raise MirrorRunError(str(exc)) from None

    flushes = {(f.first, f.last): f for f in map(parse_flush, _events(log_path, "flushed"))}
    measured_window = produced_until - measure_from_us / 1e6
    analysis = _analyse(target, watcher.seen(), flushes, measure_from_us)
    breakdown, note = _breakdown(analysis, flushes, event_log_dir)
    return LatencyResult(
        rate=rate,
        seconds=seconds,
        warmup_seconds=warmup_seconds,
        value_size=value_size,
        max_time_ms=max_time_ms,
        topic=topic,
        records=len(analysis.latencies),
        produced=high,
        achieved_rate=len(analysis.latencies) / measured_window,
        largest_tick_gap_ms=largest_gap * 1000,
        latency=Spread.of(analysis.latencies),
        slices=latency_slices(analysis.produced_us, analysis.latencies, measure_from_us, seconds),
        files=len(analysis.file_records),
        records_per_file=Spread.of([float(n) for n in analysis.file_records]),
        flushes=tuple(analysis.flushes),
        breakdown=breakdown,
        breakdown_note=note,
        startup_seconds=primed_at - process_start,
        settle_seconds=settled_at - produced_until,
        drain_seconds=drain_seconds,
        exit_code=exit_code,
        run_seconds=time.monotonic() - began,
        load_before=load_before,
        load_after=load_average(),
    )


def _check_alive(proc: subprocess.Popen[bytes], watcher: BlobWatcher, log_path: Path) -> None:
    if proc.poll() is not None:
        raise MirrorRunError(f"mirror exited {proc.returncode} while running:\n{_tail(log_path)}")
    if watcher.error is not None:
        raise MirrorRunError(f"the blob watcher failed: {watcher.error!r}")
    if not watcher.is_alive():
        raise MirrorRunError("the blob watcher stopped")


@dataclass(frozen=True)
class _Analysis:
    offsets: list[int]  # measured records, in offset order
    produced_us: list[int]
    seen_at: list[float]  # when each one's blob was first seen
    latencies: list[float]  # seconds
    file_records: list[int]  # measured records per blob holding any
    flushes: list[FlushLine]  # those blobs' flush lines
    blob_of: list[tuple[int, int]]  # (first, last) of each measured record's blob


def _analyse(
    target: FilesystemTarget, seen: dict[str, float], flushes: dict[tuple[int, int], FlushLine], measure_from_us: int
) -> _Analysis:
    result = _Analysis([], [], [], [], [], [], [])
    for blob, _size in target.blobs(0):
        if blob.name not in seen:
            raise MirrorRunError(f"{target.location(0, blob.name)} was never seen by the watcher")
        table = pq.read_table(target.directory(0) / blob.name, columns=["offset", "value"])
        offsets = table.column("offset").to_pylist()
        times = produce_times_us(table.column("value"))
        count = 0
        seen_at = seen[blob.name]
        for offset, produced in zip(offsets, times, strict=True):
            if produced < measure_from_us:
                continue
            count += 1
            result.offsets.append(offset)
            result.produced_us.append(produced)
            result.seen_at.append(seen_at)
            result.latencies.append(seen_at - produced / 1e6)
            result.blob_of.append((blob.first, blob.last))
        if count:
            result.file_records.append(count)
            flush = flushes.get((blob.first, blob.last))
            if flush is not None:
                result.flushes.append(flush)
    if not result.latencies:
        raise MirrorRunError("no record was produced after the warm-up")
    return result


def _breakdown(
    analysis: _Analysis, flushes: dict[tuple[int, int], FlushLine], event_log_dir: Path
) -> tuple[Breakdown | None, str]:
    """Split each measured record's latency into legs: produce -> its range read starts, the Spark job(s) of the
    read, job done -> rows handed to Python, time in the buffer until its write begins, the write, and write logged ->
    blob seen by the watcher. Returns (None, why) when the logs cannot be matched to the offsets."""
    try:
        ranges = read_ranges(load_spark_reads(event_log_dir))
    except (MirrorRunError, OSError, ValueError, KeyError) as exc:
        return None, f"no usable Spark event log: {exc}"
    covered = ranges[-1][1] + 1 if ranges else 0
    if covered != analysis.offsets[-1] + 1:
        return None, f"the Spark reads hold {covered} records, the topic {analysis.offsets[-1] + 1}"
    firsts = [first for first, _last, _read in ranges]
    until_read, job, to_python, buffered, write, seen = [], [], [], [], [], []
    used: dict[int, SparkRead] = {}
    for offset, produced_us, seen_at, blob in zip(
        analysis.offsets, analysis.produced_us, analysis.seen_at, analysis.blob_of, strict=True
    ):
        index = bisect.bisect_right(firsts, offset) - 1
        flush = flushes.get(blob)
        if flush is None:
            return None, f"blob {blob} has no `flushed` line"
        first, last, read = ranges[index]
        if not blob[0] <= first <= last <= blob[1]:  # a read is buffered whole, so it lies inside one blob
            return None, f"read {first}..{last} (from the event log) straddles blob {blob[0]}..{blob[1]}"
        used[index] = read
        write_began = flush.logged_at - flush.elapsed_ms / 1000
        until_read.append(read.began - produced_us / 1e6)
        job.append(read.completed - read.began)
        to_python.append(read.ended - read.completed)
        buffered.append(write_began - read.ended)
        write.append(flush.elapsed_ms / 1000)
        seen.append(seen_at - flush.logged_at)
    p99 = percentile(sorted(analysis.latencies), 99)
    tail = [i for i, latency in enumerate(analysis.latencies) if latency >= p99]
    legs = (
        ("produce → its range read starts", until_read),
        ("read: plan + Spark job", job),
        ("read: job done → rows in Python", to_python),
        ("in the buffer until its write starts", buffered),
        ("write (`flushed` elapsed_ms)", write),
        ("write logged → file seen", seen),
    )
    stages = tuple(
        Stage(name=name, spread=Spread.of(values), tail_mean=math.fsum(values[i] for i in tail) / len(tail))
        for name, values in legs
    )
    indexes = sorted(used)
    reads = [used[i] for i in indexes]
    gaps = [ranges[i][2].began - ranges[i - 1][2].ended for i in indexes if i > 0]
    return (
        Breakdown(
            stages=stages,
            reads=len(reads),
            read_seconds=Spread.of([read.seconds for read in reads]),
            plan_seconds=Spread.of([read.submitted - read.began for read in reads]),
            job_seconds=Spread.of([read.completed - read.submitted for read in reads]),
            gap_seconds=Spread.of(gaps) if gaps else None,
            records_per_read=Spread.of([float(read.rows) for read in reads]),
        ),
        "",
    )


# ------------------------------------------------------------------------------------------------------ report


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f} ms"


def _load(load: tuple[float, float, float]) -> str:
    return " / ".join(f"{value:.2f}" for value in load)


def _spread_ms(spread: Spread) -> str:
    """A Spread already in ms."""
    return f"p50 {spread.p50:,.0f}, p90 {spread.p90:,.0f}, p99 {spread.p99:,.0f}, max {spread.max:,.0f} ms"


def _facts(result: LatencyResult) -> list[str]:
    triggers = ", ".join(f"{name} {count}" for name, count in sorted(result.triggers.items()))
    intervals, elapsed = result.flush_intervals_ms(), result.flush_elapsed_ms()
    per_file = result.records_per_file
    facts = [
        f"produced {result.records:,} measured records of {result.value_size:,} B at a target of {result.rate:,}/s: "
        f"achieved {result.achieved_rate:,.0f}/s over {result.seconds:g} s after a {result.warmup_seconds:g} s "
        f"warm-up (largest gap between producer ticks {result.largest_tick_gap_ms:.0f} ms); "
        f"{result.produced:,} offsets in all, each verified in the chain exactly once",
        f"{result.files} files held measured records: {per_file.p50:,.0f} records per file (median; "
        f"min {per_file.min:,.0f}, max {per_file.max:,.0f}); flush triggers: {triggers or 'none logged'}",
    ]
    if intervals is not None:
        facts.append(f"interval between flushes (`flushed` interval_ms): {_spread_ms(intervals)}")
    if elapsed is not None:
        facts.append(f"write time per flush (`flushed` elapsed_ms): {_spread_ms(elapsed)}")
    verdict = "met" if result.meets_target else "**missed**"
    facts.append(
        f"target p99 ≤ max-time + {TARGET_SLACK_SECONDS:g} s = {result.target_seconds:g} s: {verdict} "
        f"(p99 {result.latency.p99:.3f} s)"
    )
    if result.breakdown is not None:
        facts.append(_reads_fact(result.breakdown))
    facts.append(
        f"run: {result.run_seconds:.0f} s in all; mirror start → first records durable {result.startup_seconds:.1f} s; "
        f"last produce → all durable {result.settle_seconds:.2f} s; drain {result.drain_seconds:.1f} s, "
        f"exit {result.exit_code}; load average (1/5/15 min) {_load(result.load_before)} before, "
        f"{_load(result.load_after)} after"
    )
    return facts


def _reads_fact(breakdown: Breakdown) -> str:
    def s(spread: Spread) -> str:
        return f"{_ms(spread.p50)} median, {_ms(spread.max)} max"

    text = (
        f"{breakdown.reads} Spark range reads of {breakdown.records_per_read.p50:,.0f} records (median; max "
        f"{breakdown.records_per_read.max:,.0f}) took {s(breakdown.read_seconds)} each from `toArrow()` to rows in "
        f"Python: planning {s(breakdown.plan_seconds)}, the Spark job {s(breakdown.job_seconds)}"
    )
    if breakdown.gap_seconds is not None:
        text += f"; between two reads the ingest loop spent {s(breakdown.gap_seconds)}"
    return text


def markdown_latency(result: LatencyResult) -> list[str]:
    lines = [
        "### Produce → durable latency",
        "",
        f"One mirror (the real CLI) copies a one-partition topic to the filesystem with `flush.max-time-ms: "
        f"{result.max_time_ms}` (everything else default) while a confluent-kafka producer (acks=all, linger 5 ms) "
        f"sends {result.rate:,} records/s of {result.value_size:,} B in 10 ms ticks, each value starting with its "
        "produce time in µs. A record's latency is the moment a 5 ms directory poll first sees its Parquet file "
        f"minus its produce time, over the {result.seconds:g} s after a {result.warmup_seconds:g} s warm-up.",
        "",
        "| percentile | produce → durable |",
        "|---|---:|",
    ]
    latency = result.latency
    for (label, _q), value in zip(PERCENTILES, (latency.p50, latency.p90, latency.p99, latency.p999), strict=True):
        lines.append(f"| {label} | {_ms(value)} |")
    lines += [f"| max | {_ms(latency.max)} |", f"| mean | {_ms(latency.mean)} |", ""]
    lines += [f"- {fact}" for fact in _facts(result)]
    if len(result.slices) > 1:
        lines += [
            "",
            f"By {SLICE_SECONDS:g} s of the window (records grouped by produce time):",
            "",
            "| produced at | records | p50 | p99 | max |",
            "|---|---:|---:|---:|---:|",
        ]
        for start, spread in result.slices:
            end = min(start + SLICE_SECONDS, result.seconds)
            cells = (f"{start:g}–{end:g} s", f"{spread.count:,}", _ms(spread.p50), _ms(spread.p99), _ms(spread.max))
            lines.append("| " + " | ".join(cells) + " |")
    if result.breakdown is not None:
        lines += [
            "",
            "Where the time goes, per record (Spark event log and `flushed` lines; the tail column averages the "
            "records at or above the p99):",
            "",
            "| leg | p50 | p99 | max | mean | mean in the slowest 1 % |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for stage in result.breakdown.stages:
            s = stage.spread
            lines.append(
                f"| {stage.name} | {_ms(s.p50)} | {_ms(s.p99)} | {_ms(s.max)} | {_ms(s.mean)} "
                f"| {_ms(stage.tail_mean)} |"
            )
    elif result.breakdown_note:
        lines += ["", f"No breakdown: {result.breakdown_note}."]
    return lines


def console_latency(result: LatencyResult) -> list[str]:
    latency = result.latency
    verdict = "met" if result.meets_target else "MISSED"
    lines = [
        f"produce -> durable latency, {result.rate}/s x {result.value_size} B, flush.max-time-ms {result.max_time_ms}, "
        f"{result.records:,} records over {result.seconds:g} s (achieved {result.achieved_rate:,.0f}/s)",
        f"  p50 {_ms(latency.p50)}  p90 {_ms(latency.p90)}  p99 {_ms(latency.p99)}  p99.9 {_ms(latency.p999)}  "
        f"max {_ms(latency.max)}  -> target p99 <= {result.target_seconds:g} s {verdict}",
        f"  {result.files} files, median {result.records_per_file.p50:,.0f} records/file; triggers {result.triggers}",
    ]
    intervals, elapsed = result.flush_intervals_ms(), result.flush_elapsed_ms()
    if intervals is not None:
        lines.append(f"  flush interval_ms: {_spread_ms(intervals)}")
    if elapsed is not None:
        lines.append(f"  flush elapsed_ms:  {_spread_ms(elapsed)}")
    if result.breakdown is not None:
        for stage in result.breakdown.stages:
            s = stage.spread
            lines.append(
                f"  {stage.name:<50} p50 {_ms(s.p50):>9}  p99 {_ms(s.p99):>9}  slowest 1 %: {_ms(stage.tail_mean):>9}"
            )
    else:
        lines.append(f"  no breakdown: {result.breakdown_note}")
    slices = ", ".join(f"{start:g}s {s.p99 * 1000:,.0f}" for start, s in result.slices)
    lines.append(f"  p99 (ms) by {SLICE_SECONDS:g} s slice of the window: {slices}")
    lines.append(
        f"  run {result.run_seconds:.0f} s; load average {_load(result.load_before)} -> {_load(result.load_after)}"
    )
    return lines


# --------------------------------------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.latency",
        description="Start a local broker, run the mirror CLI (Kafka -> filesystem) on a fresh topic, produce at a "
        "steady rate and measure produce -> durable latency per record; print the result and a markdown section.",
    )
    parser.add_argument("--rate", type=int, default=5000, help="records per second (default 5000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds (default 60)")
    parser.add_argument("--warmup", type=float, default=10.0, help="warm-up seconds, not measured (default 10)")
    parser.add_argument("--value-size", type=int, default=1024, help="value bytes per record (default 1024)")
    parser.add_argument("--max-time-ms", type=int, default=1000, help="the mirror's flush.max-time-ms (default 1000)")
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the run's files here: destination, config, mirror log, Spark event log (default: a temp dir)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.value_size < TIME_DIGITS:
        build_parser().error(f"--value-size must be at least {TIME_DIGITS}")
    command = shlex.join(["python", "-m", "bench.latency", *(sys.argv[1:] if argv is None else argv)])
    print(f"$ {command}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="mirror-v3-latency-") as temp:
        workdir = args.workdir or Path(temp)
        try:
            with KafkaBroker() as broker:
                print(f"broker at {broker.bootstrap}; running in {workdir}", file=sys.stderr, flush=True)
                result = measure_latency(
                    broker.bootstrap,
                    workdir,
                    rate=args.rate,
                    seconds=args.seconds,
                    warmup_seconds=args.warmup,
                    value_size=args.value_size,
                    max_time_ms=args.max_time_ms,
                )
        except MirrorRunError as exc:
            print(f"latency run failed: {exc}", file=sys.stderr)
            return 1
    print("\n".join(console_latency(result)))
    print()
    print("\n".join(markdown_latency(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
