"""estate-steady: a steady producer over P partitions of one topic, mirrored by one `run` process that selects the
topic by name, next to Spark Structured Streaming doing the same on the same broker (issue 32, step 5).

For each destination of the row (filesystem, S3 on moto, Kafka preserve or renumber on a second broker) and then for
the reference, in turn and each on a fresh topic of P partitions:

1. start the system (the mirror: `python -m supervisor run`, one entry `topics: [<topic>]`, `flush.max-time-ms` M,
   /metrics on a free port; the reference: bench.streaming_job with `trigger(processingTime=M)`), wait until it is up
   and prime it: 100 records into partition 0 made durable, so Spark's first jobs are behind it;
2. produce `rate` records/s of `value_size` B over the P partitions for warm-up + window seconds (bench.steady);
3. over the window: CPU of the system's whole process tree (psutil: the Python driver, its JVM and Python workers)
   and of the brokers, as average cores; the mirror's flushes (`mirror_v3_destination_flushes_total`) and Spark
   jobs (`mirror_v3_spark_jobs_total`, when the process exposes it) from /metrics at both ends; the reference's
   committed batches;
4. after the producer stops: wait until every record landed, stop the system, check the destination holds each
   produced offset exactly once (counted), and read when each record became durable (bench.durable): latency of
   the records produced in the window (p50 / p90 / p99 / max) and the lag (produced, not yet durable) at the window's
   start and end.

Run it alone (one row, its report in WORKDIR/benchmarks.md; --set changes the row's fields, see bench.scenarios):

    python -m bench estate-steady --set partitions=16 --set max_time_ms=1000 --set warmup=10 --set seconds=20
    python -m bench estate-steady --set 'paths=[filesystem, kafka-preserve]' --set reference=false

Every row of the full table: `python -m bench --only estate-steady`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psutil  # type: ignore[import-untyped]  # no type information in the package
from confluent_kafka import Consumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from bench.durable import (
    KafkaLandings,
    ctime_after_log,
    filesystem_landings,
    flushed_times,
    s3_landings,
    table_landings,
)
from bench.mirror import Context, finish, flushes, start_selection, wait_for, wait_landed
from bench.procs import JVM, MIRROR, Sampler
from bench.scenarios import TABLE, Scenario
from bench.steady import SteadyProducer, produce_now
from bench.streaming import StreamingQuery
from bench.throughput import RamMoto, path_target
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, delete_topic
from testkit.mirror_run import MirrorRun
from testkit.ports import free_port
from testkit.targets import FilesystemTarget, KafkaTarget, S3Target, Target, VerificationError, chain

PRIME = 100  # records into partition 0 made durable before the clock starts
FLUSHES = ("mirror_v3_flushes_total", "mirror_v3_destination_flushes_total")  # the first the process exposes
JOBS = "mirror_v3_spark_jobs_total"
SOURCE_BROKER, DESTINATION = "source broker", "destination server"
Counters = tuple[float, float | None]  # flushes so far, Spark jobs so far (None: not exposed)


@dataclass(frozen=True)
class Window:
    """The measured window, in epoch seconds: from warm-up's end to the producer's last tick."""

    start: float
    end: float
    machine_cpu: float = 0.0  # CPU-seconds every process of the machine used in the window
    bench_cpu: float = 0.0  # of which this process (the producer, the destination consumer)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def _cpu_now() -> tuple[float, float]:
    """CPU-seconds so far of the whole machine (every core busy: not idle, not waiting on I/O) and of this process."""
    machine = psutil.cpu_times()
    own = psutil.Process().cpu_times()
    return machine.user + machine.nice + machine.system + machine.irq + machine.softirq + machine.steal, (
        own.user + own.system
    )


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    row = {
        "partitions": s.partitions,
        "max_time_ms": s.max_time_ms,
        "rate": s.rate,
        "value_size": s.value_size,
        "warmup_seconds": s.warmup,
        "window_seconds": s.seconds,
    }
    with contextlib.ExitStack() as servers:
        destination = servers.enter_context(KafkaBroker()) if any(p.startswith("kafka-") for p in s.paths) else None
        moto = servers.enter_context(RamMoto()) if "s3" in s.paths else None
        for path in s.paths:
            topic = f"{ctx.name}-{path}"
            target, name, server = path_target(path, ctx, topic, s.partitions, moto, destination, topic_timeout=300)
            selection: dict[str, Any] = {"topics": [topic]}
            if name != topic:  # a Kafka destination: the selection writes `<topic>.<mode>`
                selection["destination-name"] = {"suffix": name.removeprefix(topic)}
            create_topic(ctx.bootstrap, topic, s.partitions, timeout=300)  # leaders of 1,000 partitions take a while
            result = _mirror(s, ctx, path, topic, target, name, selection, server)
            yield {**row, "system": "mirror", "path": path, **result}
            delete_topic(ctx.bootstrap, topic)
    if s.reference:
        topic = f"{ctx.name}-streaming"
        create_topic(ctx.bootstrap, topic, s.partitions, timeout=300)
        yield {**row, "system": "structured-streaming", "path": "filesystem", **_reference(s, ctx, topic)}
        delete_topic(ctx.bootstrap, topic)


def _mirror(
    s: Scenario,
    ctx: Context,
    path: str,
    topic: str,
    target: Target,
    name: str,
    selection: dict[str, Any],
    server: int | None,
) -> dict[str, Any]:
    """One `run` process mirroring `topic` into `target` (as `name`) through the warm-up, the window and the
    catch-up, then drained and verified."""
    extra = capture_settings(s.capture) if not isinstance(target, KafkaTarget) else {}
    if s.table is not None:
        extra["table"] = {"format": s.table, "name": TABLE, "commit-interval-ms": s.table_commit_ms}
    if s.compaction_ms is not None:
        extra["compaction"] = {
            "interval-ms": s.compaction_ms,
            "min-age-ms": s.compaction_min_age_ms,
            "window-ms": s.compaction_window_ms,
        }
    run = start_selection(ctx, f"mirror-{path}", target, selection, s.max_time_ms, free_port(), extra)
    named = {SOURCE_BROKER: ctx.broker_pid, DESTINATION: server}
    committer = GroupCommitter(ctx.bootstrap, topic, s.partitions) if s.capture else contextlib.nullcontext()
    with run, Sampler(run.pid, named) as sampler, committer:
        wait_for(run, "spark session ready", ctx.timeout)
        wait_for(run, "mirror starting", ctx.timeout, count=s.partitions)
        produce_now(ctx.bootstrap, topic, {0: PRIME}, s.value_size)
        wait_landed(run, target, name, {0: PRIME}, ctx.timeout)
        startup = time.time() - run.started_at
        consumer = KafkaLandings(target.bootstrap, name, s.partitions) if isinstance(target, KafkaTarget) else None
        if consumer is not None:
            consumer.start()
        try:
            producer, window, counters = _steady(s, ctx, topic, lambda: _counters(run))
            ends = {p: producer.sent[p] + (PRIME if p == 0 else 0) for p in range(s.partitions)}
            wait_landed(run, target, name, ends, ctx.timeout)
            if consumer is not None:
                total = sum(ends.values())
                run.wait_until(lambda: consumer.received() >= total, ctx.timeout, "the destination consumer")
        finally:
            landings = consumer.stop() if consumer is not None else None
        written = flushes(run)
        last_flush = written.pop("last_flush_at")
        flushed = flushed_times(run.events("flushed"))
        result = finish(run, target, {name: ends})  # every offset exactly once: the count that nothing was lost
        table_commits = run.events("table committed")  # the drain's last one too
        merges = run.events("merged blob committed")
    checks: dict[str, Any] = {}
    if s.table is not None:
        if not isinstance(target, FilesystemTarget) or s.table != "iceberg":
            raise ValueError("estate-steady measures an Iceberg table of a filesystem archive only")
        visible = table_landings(target, name, range(s.partitions), TABLE.format(topic=topic))
        checks["table"] = {
            "commits": len(table_commits),
            "files_per_commit": round(sum(int(c["files"]) for c in table_commits) / max(1, len(table_commits)), 1),
            **{k: v for k, v in visible.summary(window.start, window.end).items() if k != "records"},
        }
    if s.compaction_ms is not None:
        if not isinstance(target, FilesystemTarget):
            raise ValueError("estate-steady measures compaction of a filesystem archive only")
        files = sum(len(chain(target, name, p)) for p in range(s.partitions))
        checks["compaction"] = {
            "merges": len(merges),
            "blobs_merged": sum(int(m["replaces"]) for m in merges),
            "files_after": files,
            "files_without": files + sum(int(m["replaces"]) - 1 for m in merges),  # each merge: n blobs -> 1
            "failures": len(run.events("compaction failed, tried again next round")),
        }
    if isinstance(target, FilesystemTarget):
        landings = filesystem_landings(target, name, range(s.partitions))
        checks["ctime_after_log_ms"] = ctime_after_log(target, name, range(s.partitions), flushed)
    elif isinstance(target, S3Target):
        landings = s3_landings(target, name, range(s.partitions), flushed)
    if landings is None or len(landings) != sum(ends.values()):
        raise VerificationError(f"durable times of {0 if landings is None else len(landings)} records")
    (flushes0, jobs0), (flushes1, jobs1) = counters
    captured = {
        "capture": {None: "default", False: "off", True: "every 1 s"}[s.capture],
        "topic_documents": len(run.events("topic metadata archived")),
        "group_documents": len(run.events("group positions archived")),
    }
    return {
        **_produced(producer),
        **landings.summary(window.start, window.end),
        **_cores(sampler, window),
        **captured,
        "flushes_per_second": round((flushes1 - flushes0) / window.seconds, 2),
        "jobs_per_second": None if jobs0 is None or jobs1 is None else round((jobs1 - jobs0) / window.seconds, 2),
        "catch_up_seconds": round(max(landings.durable) - producer.ended, 2),
        "startup_seconds": round(startup, 2),
        "last_flush_seconds": round(last_flush - producer.ended, 2),
        **checks,
        **written,
        **result,
    }


CAPTURED_GROUPS = ("bench-billing", "bench-audit", "bench-search")


def capture_settings(capture: bool | None) -> dict[str, Any]:
    """The destination keys of a row's `capture` (see bench.scenarios.Scenario)."""
    if capture is None:
        return {}
    if not capture:
        return {"topic-metadata-interval-ms": 0}
    return {
        "topic-metadata-interval-ms": 1000,
        "archive-groups": {"groups": list(CAPTURED_GROUPS), "interval-ms": 1000},
    }


class GroupCommitter:
    """CAPTURED_GROUPS committing every partition of `topic` once a second, each time further on (a consumer that
    keeps up), so every capture round finds new positions and adds a document: the capture's dearest case."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self._consumers = [
            Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
            for group in CAPTURED_GROUPS
        ]
        self._topic, self._partitions = topic, partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._commit, name="group-committer", daemon=True)

    def __enter__(self) -> GroupCommitter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for consumer in self._consumers:
            consumer.close()

    def _commit(self) -> None:
        position = 0
        while not self._stop.wait(1.0):
            position += 1
            offsets = [TopicPartition(self._topic, p, position) for p in range(self._partitions)]
            for consumer in self._consumers:
                consumer.commit(offsets=offsets, asynchronous=False)


def _reference(s: Scenario, ctx: Context, topic: str) -> dict[str, Any]:
    """Structured Streaming copying `topic` into a Parquet sink, measured as the mirror is."""
    directory = ctx.scratch / "structured-streaming"
    query = StreamingQuery(ctx.bootstrap, topic, directory, s.max_time_ms, ctx.logs / "structured-streaming.log")
    with query, Sampler(query.pid, {SOURCE_BROKER: ctx.broker_pid}) as sampler:
        query.wait_started(ctx.timeout)
        produce_now(ctx.bootstrap, topic, {0: PRIME}, s.value_size)
        query.wait_rows(PRIME, ctx.timeout)
        startup = time.time() - query.started_at
        producer, window, _ = _steady(s, ctx, topic, lambda: (0.0, None))
        total = producer.total() + PRIME
        query.wait_rows(total, ctx.timeout)
        stop_seconds = query.stop()
    landings, distinct = query.sink.landings()
    if len(landings) != total or distinct != total:
        raise VerificationError(f"the sink holds {len(landings)} records, {distinct} distinct; {total} were produced")
    batches = sum(1 for at in query.sink.batches if window.start <= at < window.end)
    return {
        **_produced(producer),
        **landings.summary(window.start, window.end),
        **_cores(sampler, window),
        "flushes_per_second": round(batches / window.seconds, 2),  # micro-batches that committed files
        "jobs_per_second": None,
        "catch_up_seconds": round(max(landings.durable) - producer.ended, 2),
        "startup_seconds": round(startup, 2),
        "batches": len(query.sink.batches),
        "files": len(query.sink.committed),
        "drain_seconds": round(stop_seconds, 3),
        "verified": True,
    }


def _steady(
    s: Scenario, ctx: Context, topic: str, counters: Callable[[], Counters]
) -> tuple[SteadyProducer, Window, tuple[Counters, Counters]]:
    """The producer's warm-up and window; `counters()` is read at the window's start and end."""
    producer = SteadyProducer(ctx.bootstrap, topic, s.partitions, s.rate, s.value_size, s.warmup + s.seconds)
    producer.start()
    producer.started.wait()
    start, end = producer.began + s.warmup, producer.began + s.warmup + s.seconds
    time.sleep(max(0.0, start - time.time()))
    first, (machine0, bench0) = counters(), _cpu_now()
    time.sleep(max(0.0, end - time.time()))
    last, (machine1, bench1) = counters(), _cpu_now()
    producer.join_checked(s.seconds + 120)
    return producer, Window(start, end, machine1 - machine0, bench1 - bench0), (first, last)


def _counters(run: MirrorRun) -> Counters:
    """The mirror's flushes and Spark jobs so far, summed over every label, from its /metrics."""
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(run.scrape()):
        for sample in family.samples:
            if sample.name in (*FLUSHES, JOBS):
                found[sample.name] = found.get(sample.name, 0.0) + float(sample.value)
    flushes = next((found[name] for name in FLUSHES if name in found), None)
    if flushes is None:
        raise VerificationError(f"the mirror's /metrics has none of {FLUSHES}")
    return flushes, found.get(JOBS)


def _produced(producer: SteadyProducer) -> dict[str, Any]:
    return {
        "produced": producer.total() + PRIME,
        "achieved_rate": round(producer.total() / (producer.ended - producer.began), 1),
        "largest_tick_gap_ms": round(producer.largest_gap * 1000, 1),
    }


def _cores(sampler: Sampler, window: Window) -> dict[str, Any]:
    """Average cores over the window: the system's process tree (its Python driver, and everything below it: the
    JVM and Spark's Python workers), each broker and server."""
    cpu = sampler.cpu_between(window.start, window.end)
    cores = {label: round(seconds / window.seconds, 3) for label, seconds in cpu.items()}
    # What else ran on this shared machine meanwhile: a number well above 0 says the window's numbers are not clean.
    elsewhere = window.machine_cpu - window.bench_cpu - sum(cpu.values())
    return {
        "cores": cores,
        "tree_cores": round(cores.get(MIRROR, 0.0) + cores.get(JVM, 0.0), 3),
        "bench_cores": round(window.bench_cpu / window.seconds, 3),
        "other_cores": round(max(0.0, elsewhere) / window.seconds, 3),
    }
