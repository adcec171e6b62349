"""The console table and the generated docs/benchmarks.md."""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.data import KEY_BYTES, ProduceResult
from bench.machine import Machine
from bench.mirror_run import MirrorResult, MirrorSettings
from bench.raw import CONSUMER_CONFIG, PRODUCER_CONFIG, ConsumeResult, CopyResult

HEADER = ("path", "records", "record size", "seconds", "records/s", "MB/s", "ratio to raw", "ratio to raw copy")
RAW_PATH = "raw: confluent-kafka consume loop"
RAW_COPY_PATH = "raw: confluent-kafka consume → produce"
PATH_LABELS = {
    "filesystem": "mirror-v3: Kafka → Parquet files (filesystem)",
    "s3": "mirror-v3: Kafka → Parquet objects (S3 on moto)",
    "kafka-preserve": "mirror-v3: Kafka → Kafka, offsets: preserve",
    "kafka-renumber": "mirror-v3: Kafka → Kafka, offsets: renumber",
}
PATH_TITLES = {
    "filesystem": "Kafka → filesystem",
    "s3": "Kafka → S3 (moto)",
    "kafka-preserve": "Kafka → Kafka (preserve)",
    "kafka-renumber": "Kafka → Kafka (renumber)",
}


@dataclass(frozen=True)
class PathRun:
    """One mirror run: the same backlog into one kind of destination."""

    kind: str  # "filesystem" or "s3"
    mirror: MirrorResult
    server_startup_seconds: float | None = None  # the S3 server's own start-up (not part of any timing)


@dataclass(frozen=True)
class Run:
    command: str
    started: float  # epoch seconds
    records_per_partition: int
    partitions: int
    value_size: int
    topic: str
    settings: MirrorSettings
    machine: Machine
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    produced: ProduceResult
    raw: ConsumeResult
    raw_copy: CopyResult | None  # the Kafka -> Kafka baseline, measured when a Kafka path runs
    paths: list[PathRun]
    moto: str  # moto's version

    @property
    def payload_bytes(self) -> int:
        return self.produced.payload_bytes


def rows(run: Run) -> list[tuple[str, ...]]:
    size = f"{KEY_BYTES} B key + {run.value_size} B value"
    raw_rate = run.raw.records / run.raw.seconds
    copy = run.raw_copy
    copy_rate = copy.records / copy.seconds if copy is not None else None
    table = [_row(RAW_PATH, run.raw.records, size, run.raw.seconds, run.raw.payload_bytes, "1.00", "")]
    if copy is not None:
        ratio = f"{copy.records / copy.seconds / raw_rate:.2f}"
        table.append(_row(RAW_COPY_PATH, copy.records, size, copy.seconds, copy.payload_bytes, ratio, "1.00"))
    for path in run.paths:
        mirror = path.mirror
        rate = mirror.records / mirror.backlog_seconds
        to_copy = f"{rate / copy_rate:.2f}" if copy_rate is not None and path.kind.startswith("kafka-") else ""
        table.append(
            _row(
                PATH_LABELS[path.kind],
                mirror.records,
                size,
                mirror.backlog_seconds,
                run.payload_bytes,
                f"{rate / raw_rate:.2f}",
                to_copy,
            )
        )
    return table


def _row(
    path: str, records: int, size: str, seconds: float, payload: int, ratio: str, copy_ratio: str
) -> tuple[str, ...]:
    return (
        path,
        f"{records:,}",
        size,
        f"{seconds:.2f}",
        f"{records / seconds:,.0f}",
        f"{payload / seconds / 1e6:,.1f}",
        ratio,
        copy_ratio or "-",
    )


def console_table(run: Run) -> str:
    table = [HEADER, *rows(run)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = []
    for n, row in enumerate(table):
        cells = [
            cell.ljust(width) if i in (0, 2) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def side_facts(run: Run) -> list[str]:
    """The numbers around all measurements, one line each."""
    produced = run.produced
    produce_rate, produce_mb = produced.records / produced.seconds, produced.payload_bytes / produced.seconds / 1e6
    return [
        f"produce: {produced.records:,} records in {produced.seconds:.2f} s "
        f"({produce_rate:,.0f} records/s, {produce_mb:,.1f} MB/s)",
        f"raw consume: {run.raw.records:,} records in {run.raw.seconds:.2f} s",
        *(
            [f"raw consume → produce: {run.raw_copy.records:,} records in {run.raw_copy.seconds:.2f} s"]
            if run.raw_copy is not None
            else []
        ),
    ]


def path_facts(run: Run, path: PathRun) -> list[str]:
    """The numbers around one mirror run, one line each."""
    mirror, s3, kafka = path.mirror, path.kind == "s3", path.kind.startswith("kafka-")
    flushes = mirror.flushes
    flush_seconds = sum(f.elapsed_ms for f in flushes) / 1000
    triggers = sorted({f.trigger for f in flushes})
    per_file = mirror.records / len(flushes) if flushes else 0
    jobs = [job for job in mirror.jobs if job.submitted >= mirror.ready_at - 0.001]
    window = (mirror.ready_at, mirror.done_at)
    job_spans = [(job.submitted, job.completed) for job in jobs]
    flush_spans = [(f.logged_at - f.elapsed_ms / 1000, f.logged_at) for f in flushes]
    job_seconds = covered(job_spans, window)  # wall time with at least one job running (mirrors may overlap)
    first_job = f"the first, on a cold JVM, {jobs[0].seconds:.2f} s; " if len(jobs) > 1 else ""
    outside = mirror.backlog_seconds - covered(job_spans + flush_spans, window)
    if kafka:
        mode = path.kind.removeprefix("kafka-")
        write = (
            "record batches built from Arrow, sent and acknowledged (acks=all), base offsets checked"
            if mode == "preserve"
            else "one transaction: record batches + the position commit, then commit_transaction"
        )
        blobs = f"{len(flushes)} {'flush(es)' if mode == 'preserve' else 'transaction(s)'}"
    elif s3:
        threshold = run.settings.s3_multipart_threshold_bytes
        multipart = sum(1 for f in flushes if f.bytes > threshold)
        write = "Parquet encode + upload: one PutObject, or a multipart upload above the threshold, If-None-Match: *"
        blobs = f"{len(flushes)} object(s), {multipart} of them multipart"
    else:
        write = "Parquet encode + write + fsync + link"
        blobs = f"{len(flushes)} file(s)"
    facts = [
        f"start-up (process start → first Spark job submitted: Spark JVM, session, planning of the first "
        f"read): {mirror.startup_seconds:.2f} s "
        f"(`mirror starting` logged after {mirror.starting_logged_seconds:.2f} s)",
        f"end to end (process start → last offset durable): {mirror.total_seconds:.2f} s; "
        f"drain after SIGTERM: {mirror.drain_seconds:.2f} s, exit {mirror.exit_code}",
        f"Spark jobs (one per range read): {len(jobs)}, running {job_seconds:.2f} s of the backlog time ({first_job}"
        f"{sum(job.tasks for job in jobs)} tasks, executor run time {sum(job.task_seconds for job in jobs):.2f} s, "
        f"CPU {sum(job.cpu_seconds for job in jobs):.2f} s, GC {sum(job.gc_seconds for job in jobs):.2f} s, "
        f"{sum(job.result_bytes for job in jobs) / 1e6:,.1f} MB of Arrow results)",
        f"flushes ({write}; a size-triggered flush holds up the next read): "
        f"{flush_seconds:.2f} s; {blobs}, {per_file:,.0f} records each on average, trigger(s): "
        f"{', '.join(triggers) or '-'}; "
        + (
            f"{sum(f.bytes for f in flushes) / 1e6:,.1f} MB of record batches"
            if kafka
            else f"{mirror.parquet_bytes / 1e6:,.1f} MB of Parquet"
        ),
        f"backlog time with neither a Spark job nor a flush running (query planning, Arrow into Python, offset "
        f"queries, buffering): {outside:.2f} s",
    ]
    store = mirror.store
    if store is not None:
        requests = ", ".join(f"{count:,} {kind}" for kind, count in sorted(store.requests.items())) or "none logged"
        cores = store.cpu_seconds / mirror.total_seconds if mirror.total_seconds > 0 else 0.0
        startup = (
            f" (server start-up {path.server_startup_seconds:.2f} s, not timed)" if path.server_startup_seconds else ""
        )
        facts.append(
            f"moto server, process start → last offset durable: {store.cpu_seconds:.2f} s of CPU "
            f"({cores:.2f} cores on average, taken from the same {run.machine.cpus} CPUs as Spark and the mirror); "
            f"requests: {requests} ({store.bench_lists:,} of the LISTs are this benchmark's done-detection polls)"
            f"{startup}"
        )
    if kafka:
        how = "its offset" if path.kind == "kafka-preserve" else "its mirror-v3.source-offset header"
        facts.append(
            "verified: the destination partition, read back with a read_committed confluent-kafka consumer, holds "
            f"every source offset exactly once ({how})"
        )
    elif s3:
        facts.append(
            "verified: every chain is contiguous from offset 0 and holds each offset exactly once (listed with "
            "botocore; the `offset` column of every object downloaded with botocore and read with pyarrow)"
        )
    else:
        facts.append("verified: every chain is contiguous from offset 0 and holds each offset exactly once")
    return facts


def covered(spans: list[tuple[float, float]], window: tuple[float, float]) -> float:
    """Seconds of `window` inside at least one of `spans`."""
    total, reached = 0.0, window[0]
    for begin, end in sorted(spans):
        begin, end = max(begin, reached), min(end, window[1])
        if end > begin:
            total += end - begin
            reached = end
    return total


def title(run: Run) -> str:
    kinds = [path.kind for path in run.paths]
    names = {
        "filesystem": "filesystem",
        "s3": "S3",
        "kafka-preserve": "Kafka (preserve)",
        "kafka-renumber": "Kafka (renumber)",
    }
    return f"Kafka → {' and '.join(names[kind] for kind in kinds)} backlog throughput"


def markdown(run: Run) -> str:
    settings, machine = run.settings, run.machine
    kinds = {path.kind for path in run.paths}
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(run.started))
    table = [HEADER, *rows(run)]
    md_table = [f"| {' | '.join(row)} |" for row in table]
    md_table.insert(1, "|" + "|".join("---" if i in (0, 2) else "---:" for i in range(len(HEADER))) + "|")
    conf = ", ".join(f"`{k}={v}`" for k, v in sorted(settings.spark_conf.items())) or "none"
    consumer = ", ".join(f"`{k}={v}`" for k, v in CONSUMER_CONFIG.items() if k != "logger")
    load_before = " / ".join(f"{x:.2f}" for x in run.load_before)
    load_after = " / ".join(f"{x:.2f}" for x in run.load_after)
    done = []
    if "filesystem" in kinds:
        done.append(
            "for the filesystem, the partition directory's listing (every 20 ms) holds a file ending at the "
            "partition's end (files are durable: fsynced and linked to their final name)"
        )
    if kinds & {"kafka-preserve", "kafka-renumber"}:
        done.append(
            "for Kafka, the destination partition's high watermark (preserve) or the committed offset of the "
            "mirror's position group (renumber, written by each transaction) equals the partition's end, polled "
            "every 200 ms and after each flush line"
        )
    if "s3" in kinds:
        done.append(
            "for S3, a botocore `ListObjectsV2` of the partition's key prefix shows an object ending there: the "
            "chain's next offset is max(to) + 1 over the keys `<from>-<to>.parquet` (an object is listed only once "
            "its PutObject or CompleteMultipartUpload has succeeded). Every LIST costs moto CPU on this machine, so "
            "the benchmark lists within 20 ms of the mirror logging a flush (the object is committed by then) and "
            "otherwise once a second, each time only the keys after the last one seen"
        )
    details: list[str] = []
    for path in run.paths:
        details += [
            f"### {PATH_TITLES[path.kind]}",
            "",
            *[f"- {fact}" for fact in path_facts(run, path)],
            "",
        ]
    destinations = []
    if "filesystem" in kinds:
        destinations.append(
            "- filesystem destination: a fresh directory on this machine's local disk (`destination.type: "
            "filesystem`); every file fsynced, hard-linked to its final name, directory fsynced"
        )
    if "s3" in kinds:
        destinations.append(
            f"- S3 destination: **moto {run.moto}** (`python -m moto.server`, started by the benchmark through "
            "`testkit.s3_servers.MotoServer`) on 127.0.0.1, a fresh bucket, prefix `bench`; `destination.type: s3`, "
            "`path-style: true`, the endpoint and region in the config, the credentials in environment variables "
            "of the mirror process named by `access-key-id-env` / `secret-access-key-env`; "
            f"multipart-threshold-bytes {settings.s3_multipart_threshold_bytes}, part-size-bytes "
            f"{settings.s3_part_size_bytes}, retry and request-timeout-ms defaults. **moto keeps every object in RAM "
            "on this same machine** (in its own Python process; `MOTO_S3_DEFAULT_KEY_BUFFER_SIZE` is raised so "
            "no object spills to a temp file): no network, no disk, no replication. Latency-wise the S3 row is "
            "therefore an upper bound for real S3, where every request (the commit's PutObject or multipart upload, "
            "the LISTs) takes longer and the bytes cross a network. CPU-wise it is the other way round: moto is a "
            "Python HTTP server that parses, hashes and copies every byte uploaded to it, and its CPU time (listed "
            f"above) comes out of the same {machine.cpus} CPUs that the broker, Spark and the mirror use, which "
            "real S3 would not cost"
        )
    if kinds & {"kafka-preserve", "kafka-renumber"}:
        producer = ", ".join(
            f"`{k}={v}`" for k, v in PRODUCER_CONFIG.items() if k not in ("logger", "compression.type")
        )
        destinations.append(
            "- Kafka destination: a second Apache Kafka 3.9.1 broker on the same machine, started by the benchmark "
            "for each mode (and a third one for the raw copy), the topic created with the same partitions; "
            f"record-batch compression `{settings.kafka_compression}`, other `destination` keys at their defaults "
            f"except flush (above). The raw copy is one confluent-kafka consumer (settings as the raw row) feeding "
            f"one producer ({producer}) that copies key, value, headers and timestamp into the same partition, "
            "timed until every delivery report is in: no transaction and no position, so it is the floor of what a "
            "Kafka → Kafka copy costs here, not an exactly-once one"
        )
    lines = [
        "# Benchmarks",
        "",
        f"<!-- Generated by `{run.command}`; edits are overwritten. -->",
        "",
        f"## {title(run)}",
        "",
        f"Measured {when} with `{run.command}`.",
        "",
        f"A local broker holds a backlog of {run.records_per_partition:,} records in each of {run.partitions} "
        f"partition(s) of one topic. The **raw** row is one confluent-kafka consumer reading it in a tight "
        f"`consume()` loop (read_committed, touching every key and value): the most this machine delivers from "
        f"this broker to one Python process. Each **mirror-v3** row is the real CLI (`python -m supervisor run`) "
        f"copying the same backlog, in the same run, one destination after the other, timed from the moment it is "
        f"ready to read (the later of its `mirror starting` log line and its first Spark job, so the Spark JVM "
        f"start-up is excluded; it is listed below) until the destination chain's next offset equals the "
        f"partition's end: {'; '.join(done)}. MB = 10^6 bytes of key + value payload. "
        f"Ratio to raw = mirror records/s ÷ raw records/s.",
        "",
        *md_table,
        "",
        *[f"- {fact}" for fact in side_facts(run)],
        "",
        *details,
        "### Settings",
        "",
        f"- data: {run.partitions} partition(s) × {run.records_per_partition:,} records, key {KEY_BYTES} B, value "
        f"{run.value_size} B of random (incompressible) bytes, no headers, producer compression none",
        "- broker: Apache Kafka 3.9.1 (KRaft, single node, `testkit.kafka_broker.KafkaBroker` defaults) on 127.0.0.1, "
        "same machine as the consumers; its log is in the page cache for every read",
        f"- raw consumer: {consumer}, `consume(num_messages=min(10000, records left))`",
        f"- mirror: one mirror per partition in one process, a new process per destination; compression "
        f"`{settings.compression}`, flush max-time-ms {settings.flush_max_time_ms}, max-bytes "
        f"{settings.flush_max_bytes}, max-offsets {settings.flush_max_offsets}; spark master `local[*]`, "
        f"max-offsets-per-read {settings.max_offsets_per_read}, offsets-per-task {settings.offsets_per_task}, "
        f"extra spark.conf: {conf}; Spark's event log is on (for the job timings above); everything else: "
        "config/model.py defaults",
        *destinations,
        "",
        "### Machine",
        "",
        f"- {machine.cpus} CPUs ({machine.cpu_model}), {machine.ram_gib:.1f} GiB RAM, Linux {machine.kernel}",
        f"- Python {machine.python}, pyspark {machine.pyspark}, pyarrow {machine.pyarrow}, confluent-kafka "
        f"{machine.confluent_kafka} (librdkafka {machine.librdkafka}), {machine.java}"
        + (
            f", aiobotocore {machine.aiobotocore}, botocore {machine.botocore}, moto {run.moto}"
            if "s3" in kinds
            else ""
        ),
        f"- load average (1 / 5 / 15 min) before the broker started: {load_before}; after the run: {load_after} "
        "(after includes this benchmark's own broker, Spark and S3 server; other work on the machine lowers every "
        "row)",
        f"- commit {machine.commit}",
        "",
        "### Reproduce",
        "",
        "```bash",
        "bash scripts/setup.sh && source .venv/bin/activate",
        run.command,
        "```",
        "",
        "`python -m bench --help` lists the options (`--paths filesystem,s3` picks the destinations, `--quick` is a "
        "smoke run that writes no document). `python -m bench.profile_reads` times single Spark range reads and "
        "Parquet encoding in-process.",
        "",
    ]
    return "\n".join(lines)
