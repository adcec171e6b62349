"""The console table and the generated docs/benchmarks.md."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.data import KEY_BYTES, ProduceResult
from bench.idle import IdleResult, markdown_idle
from bench.latency import LatencyResult, markdown_latency
from bench.machine import Machine
from bench.mirror_run import MirrorResult, MirrorSettings
from bench.raw import CONSUMER_CONFIG, PRODUCER_CONFIG, ConsumeResult, CopyResult
from bench.restart import RestartResult, markdown_restart

HEADER = ("path", "records", "record size", "seconds", "records/s", "MB/s", "ratio to raw", "ratio to raw copy")
RAW_PATH = "raw: confluent-kafka consume loop"
RAW_COPY_PATH = "raw: confluent-kafka consume → produce"
KCAT_PATH = "raw: kcat -C (C, librdkafka)"
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

    kind: str  # a key of PATH_LABELS
    mirror: MirrorResult
    server_startup_seconds: float | None = None  # the S3 server's own start-up (not part of any timing)


@dataclass(frozen=True)
class Cell:
    """One backlog shape: records of one value size spread over some partitions."""

    value_size: int
    partitions: int
    records_per_partition: int

    @property
    def records(self) -> int:
        return self.records_per_partition * self.partitions

    @property
    def size_label(self) -> str:
        return (
            f"{self.value_size // 1024} KiB"
            if self.value_size % 1024 == 0 and self.value_size
            else f"{self.value_size} B"
        )

    @property
    def label(self) -> str:
        parts = "partition" if self.partitions == 1 else "partitions"
        return f"{self.size_label} records, {self.partitions} {parts}"

    @property
    def slug(self) -> str:
        return f"{self.value_size}b-{self.partitions}p"


@dataclass(frozen=True)
class CellRun:
    """Everything measured over one cell's backlog: the raw baselines and each mirror path."""

    cell: Cell
    topic: str
    produced: ProduceResult
    raw: ConsumeResult
    kcat: ConsumeResult | None  # kcat over the same backlog, when kcat is installed
    raw_copy: CopyResult | None  # the Kafka -> Kafka baseline, measured when a Kafka path runs
    paths: list[PathRun]

    @property
    def payload_bytes(self) -> int:
        return self.produced.payload_bytes

    @property
    def raw_rate(self) -> float:
        return self.raw.records / self.raw.seconds

    def rate(self, kind: str) -> float | None:
        for path in self.paths:
            if path.kind == kind:
                return path.mirror.records / path.mirror.backlog_seconds
        return None


@dataclass(frozen=True)
class Suite:
    command: str
    started: float  # epoch seconds
    finished: float
    settings: MirrorSettings
    machine: Machine
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    cells: list[CellRun]
    latency: LatencyResult | None
    restart: list[RestartResult] | None
    idle: list[IdleResult] | None
    moto: str  # moto's version


def rows(run: CellRun) -> list[tuple[str, ...]]:
    size = f"{KEY_BYTES} B key + {run.cell.value_size} B value"
    raw_rate = run.raw.records / run.raw.seconds
    copy = run.raw_copy
    copy_rate = copy.records / copy.seconds if copy is not None else None
    table = [_row(RAW_PATH, run.raw.records, size, run.raw.seconds, run.raw.payload_bytes, "1.00", "")]
    if run.kcat is not None:
        kcat = run.kcat
        ratio = f"{kcat.records / kcat.seconds / raw_rate:.2f}"
        table.append(_row(KCAT_PATH, kcat.records, size, kcat.seconds, kcat.payload_bytes, ratio, ""))
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


def console_table(run: CellRun) -> str:
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


def side_facts(run: CellRun) -> list[str]:
    """The numbers around one cell's measurements, one line each."""
    produced = run.produced
    produce_rate, produce_mb = produced.records / produced.seconds, produced.payload_bytes / produced.seconds / 1e6
    return [
        f"produce: {produced.records:,} records in {produced.seconds:.2f} s "
        f"({produce_rate:,.0f} records/s, {produce_mb:,.1f} MB/s)",
    ]


def path_facts(run: CellRun, path: PathRun, settings: MirrorSettings, cpus: int) -> list[str]:
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
        threshold = settings.s3_multipart_threshold_bytes
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
    if mirror.cpu:
        window_cpu = sum(mirror.cpu.values())
        split = ", ".join(
            f"{label} {seconds:.1f} s" for label, seconds in sorted(mirror.cpu.items(), key=lambda x: -x[1])
        )
        facts.append(
            f"CPU during the backlog ({mirror.backlog_seconds:.1f} s × {cpus} CPUs = "
            f"{mirror.backlog_seconds * cpus:.1f} CPU-seconds available): {split}; "
            f"{window_cpu:.1f} CPU-seconds in all ({window_cpu / max(mirror.backlog_seconds, 1e-9):.2f} cores busy)"
        )
    if mirror.profile is not None:
        profile = mirror.profile
        doing = ", ".join(
            f"{name} {seconds:.1f} s" for name, seconds in profile.activities if not name.startswith("idle")
        )
        top = ", ".join(f"`{name}` {seconds:.1f} s" for name, seconds in profile.top_frames[:5])
        facts.append(
            f"py-spy on the mirror process (wall time of its threads over {profile.seconds:.1f} s from `spark "
            f"session ready`): {doing}; busiest Python frames: {top or 'none'}"
        )
    store = mirror.store
    if store is not None:
        requests = ", ".join(f"{count:,} {kind}" for kind, count in sorted(store.requests.items())) or "none logged"
        cores = store.cpu_seconds / mirror.total_seconds if mirror.total_seconds > 0 else 0.0
        startup = (
            f" (server start-up {path.server_startup_seconds:.2f} s, not timed)" if path.server_startup_seconds else ""
        )
        facts.append(
            f"moto server, process start → last offset durable: {store.cpu_seconds:.2f} s of CPU "
            f"({cores:.2f} cores on average, taken from the same {cpus} CPUs as Spark and the mirror); "
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


TARGETS_NOTE = (
    "Targets of issue #6 on this 2-CPU machine: Kafka → filesystem at ≥ 0.6× the raw consume rate for 1 KiB records "
    "and ≥ 500,000 records/s for 100 B records; produce → durable p99 ≤ max-time + 0.5 s; 1,000 idle mirrors in "
    "≤ 4 GiB RSS."
)
GIB = 1024**3


def targets(suite: Suite) -> list[tuple[str, str, str]]:
    """(target, measured, holds) rows for what this run measured."""
    found: list[tuple[str, str, str]] = []
    for run in suite.cells:
        rate = run.rate("filesystem")
        if rate is None:
            continue
        if run.cell.value_size == 1024:
            ratio = rate / run.raw_rate
            found.append(
                (
                    f"Kafka → filesystem ≥ 0.6× raw consume ({run.cell.label})",
                    f"{ratio:.2f}× ({rate:,.0f} of {run.raw_rate:,.0f} records/s)",
                    _holds(ratio >= 0.6),
                )
            )
        if run.cell.value_size == 100:
            found.append(
                (
                    f"Kafka → filesystem ≥ 500,000 records/s ({run.cell.label})",
                    f"{rate:,.0f} records/s ({rate / run.raw_rate:.2f}× raw)",
                    _holds(rate >= 500_000),
                )
            )
    if suite.latency is not None:
        latency = suite.latency
        found.append(
            (
                f"produce → durable p99 ≤ max-time + 0.5 s = {latency.target_seconds:.1f} s "
                f"({latency.rate:,} records/s, max-time-ms {latency.max_time_ms})",
                f"p99 {latency.latency.p99:.3f} s (p50 {latency.latency.p50:.3f} s)",
                _holds(latency.meets_target),
            )
        )
    for idle in suite.idle or []:
        if idle.mirrors == 1000:
            total = idle.rss_total_max_bytes
            found.append(
                (
                    "1,000 idle mirrors ≤ 4 GiB RSS (Python + Spark JVM)",
                    f"{total / GIB:.2f} GiB at most ({idle.rss_python_max_bytes / 2**20:,.0f} MiB Python, "
                    f"{idle.rss_jvm_max_bytes / 2**20:,.0f} MiB JVM)",
                    _holds(idle.failed is None and total <= 4 * GIB),
                )
            )
    return found


def _holds(ok: bool) -> str:
    return "**holds**" if ok else "**missed**"


def summary_rows(suite: Suite) -> list[tuple[str, ...]]:
    """One row per cell and path: the overview table."""
    table: list[tuple[str, ...]] = []
    for run in suite.cells:
        raw_rate = run.raw_rate
        copy_rate = run.raw_copy.records / run.raw_copy.seconds if run.raw_copy is not None else None
        record = KEY_BYTES + run.cell.value_size
        table.append(
            (run.cell.label, "raw consume (confluent-kafka)", f"{raw_rate:,.0f}", _mb(raw_rate, record), "1.00", "-")
        )
        if run.kcat is not None:
            kcat_rate = run.kcat.records / run.kcat.seconds
            table.append(
                (
                    run.cell.label,
                    "raw consume (kcat)",
                    f"{kcat_rate:,.0f}",
                    _mb(kcat_rate, record),
                    f"{kcat_rate / raw_rate:.2f}",
                    "-",
                )
            )
        if copy_rate is not None:
            table.append(
                (
                    run.cell.label,
                    "raw copy (confluent-kafka consume → produce)",
                    f"{copy_rate:,.0f}",
                    _mb(copy_rate, record),
                    f"{copy_rate / raw_rate:.2f}",
                    "1.00",
                )
            )
        for path in run.paths:
            rate = path.mirror.records / path.mirror.backlog_seconds
            to_copy = f"{rate / copy_rate:.2f}" if copy_rate is not None and path.kind.startswith("kafka-") else "-"
            table.append(
                (
                    run.cell.label,
                    PATH_TITLES[path.kind],
                    f"{rate:,.0f}",
                    _mb(rate, record),
                    f"{rate / raw_rate:.2f}",
                    to_copy,
                )
            )
    return table


def _mb(rate: float, record_bytes: int) -> str:
    return f"{rate * record_bytes / 1e6:,.1f}"


def _md_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> list[str]:
    lines = [
        f"| {' | '.join(header)} |",
        "|" + "|".join("---" if i in left else "---:" for i in range(len(header))) + "|",
    ]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    return lines


def _demote(lines: list[str]) -> list[str]:
    """A section written with `###` headings, as a `##` section of this document."""
    return [line[1:] if line.startswith("###") else line for line in lines]


def markdown(suite: Suite, chart: str | None) -> str:
    settings, machine = suite.settings, suite.machine
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(suite.started))
    minutes = (suite.finished - suite.started) / 60
    load_before = " / ".join(f"{x:.2f}" for x in suite.load_before)
    load_after = " / ".join(f"{x:.2f}" for x in suite.load_after)
    lines = [
        "# Benchmarks",
        "",
        f"<!-- Generated by `{suite.command}`; edits are overwritten. -->",
        "",
        f"Measured {when} with `{suite.command}` ({minutes:.0f} minutes) on {machine.cpus} CPUs ({machine.cpu_model}), "
        f"{machine.ram_gib:.1f} GiB RAM, at commit {machine.commit}. Every service runs on this one machine: the "
        "brokers, Spark, the mirror, moto and the raw clients share the same CPUs. Machine, versions and settings "
        "are at the end; how to reproduce is at the very end.",
        "",
        "## Targets",
        "",
        TARGETS_NOTE,
        "",
    ]
    found = targets(suite)
    lines += (
        _md_table(("target", "measured", "verdict"), found) if found else ["(none of the targeted measurements ran)"]
    )
    lines += [
        "",
        "Where a target is missed, [where the time goes](#where-the-time-goes) says why, with the numbers.",
        "",
    ]
    if suite.cells:
        lines += [
            "## Backlog throughput",
            "",
            "Each cell is one backlog (a topic of its own on the source broker: random, incompressible values, 8 B "
            "keys, no headers). The **raw** rows drain it with a tight client loop in the same run; each mirror-v3 "
            "row is the real CLI (`python -m supervisor run`, one mirror per partition in one process) copying it "
            "into one destination, timed from the moment it is ready to read (the later of its `mirror starting` "
            "line and its first Spark job, so Spark's JVM start-up is excluded and listed below) until the "
            "destination shows every offset durable. MB = 10^6 bytes of key + value. **Ratio to raw** = records/s ÷ "
            "the raw confluent-kafka consume loop's; **ratio to raw copy** = records/s ÷ a raw confluent-kafka "
            "consume → produce copy to a fresh broker (the floor of any Kafka → Kafka copy).",
            "",
        ]
        if chart:
            lines += [f"![records/s per path and cell, log scale]({chart})", ""]
        lines += _md_table(
            ("cell", "path", "records/s", "MB/s", "ratio to raw", "ratio to raw copy"), summary_rows(suite), left=(0, 1)
        )
        lines += ["", *where_the_time_goes(suite), ""]
    if suite.latency is not None:
        lines += [*_demote(markdown_latency(suite.latency)), ""]
    if suite.restart is not None:
        lines += [*_demote(markdown_restart(suite.restart)), ""]
    if suite.idle is not None:
        lines += [*_demote(markdown_idle(suite.idle)), ""]
    if suite.cells:
        lines += ["## Throughput details", ""]
        for run in suite.cells:
            lines += [f"### {run.cell.label}", "", *[f"- {fact}" for fact in side_facts(run)], ""]
            table = [HEADER, *rows(run)]
            lines += [f"| {' | '.join(row)} |" for row in table[:1]]
            lines += ["|" + "|".join("---" if i in (0, 2) else "---:" for i in range(len(HEADER))) + "|"]
            lines += [f"| {' | '.join(row)} |" for row in table[1:]]
            lines.append("")
            for path in run.paths:
                lines += [
                    f"#### {PATH_TITLES[path.kind]}",
                    "",
                    *[f"- {f}" for f in path_facts(run, path, settings, machine.cpus)],
                    "",
                ]
    conf = ", ".join(f"`{k}={v}`" for k, v in sorted(settings.spark_conf.items())) or "none"
    consumer = ", ".join(f"`{k}={v}`" for k, v in CONSUMER_CONFIG.items() if k != "logger")
    producer = ", ".join(f"`{k}={v}`" for k, v in PRODUCER_CONFIG.items() if k not in ("logger", "compression.type"))
    lines += [
        "## Settings",
        "",
        "- broker: Apache Kafka 3.9.1 (KRaft, single node, `testkit.kafka_broker.KafkaBroker` defaults) on 127.0.0.1; "
        "its log is in the page cache for every read",
        f"- raw consumer (confluent-kafka): {consumer}, `consume(num_messages=min(10000, records left))`, touching "
        "every key and value; kcat: `kcat -C -e -o beginning` with the same librdkafka settings, printing each "
        "record's key and value sizes",
        f"- raw copy: the raw consumer feeding one producer ({producer}) that copies key, value, headers and "
        "timestamp into the same partition of a fresh broker, timed until every delivery report is in",
        f"- mirror (throughput runs): compression `{settings.compression}`, flush max-time-ms "
        f"{settings.flush_max_time_ms}, max-bytes {settings.flush_max_bytes}, max-offsets "
        f"{settings.flush_max_offsets}; "
        f"spark master `local[*]`, max-offsets-per-read {settings.max_offsets_per_read}, max-bytes-per-read "
        f"{settings.max_bytes_per_read}, offsets-per-task {settings.offsets_per_task}, bytes-per-task "
        f"{settings.bytes_per_task}, extra spark.conf: {conf}; Spark's event log is on (job timings); everything "
        "else: config/model.py defaults. Why these Spark settings: [spark-tuning.md](spark-tuning.md)",
        "- filesystem destination: a fresh directory on this machine's local disk; every file fsynced, hard-linked to "
        "its final name, directory fsynced",
        f"- S3 destination: **moto {suite.moto}** (`python -m moto.server`) on 127.0.0.1, a fresh bucket, path-style, "
        f"multipart-threshold-bytes {settings.s3_multipart_threshold_bytes}, part-size-bytes "
        f"{settings.s3_part_size_bytes}. moto keeps every object in RAM in its own Python process on this machine: "
        "latency-wise an upper bound for real S3; CPU-wise a cost real S3 would not take from the mirror's CPUs",
        f"- Kafka destination: a fresh Apache Kafka 3.9.1 broker per mode on this machine, record-batch compression "
        f"`{settings.kafka_compression}`; other `destination` keys at their defaults except flush (above)",
        "",
        "## Machine",
        "",
        f"- {machine.cpus} CPUs ({machine.cpu_model}), {machine.ram_gib:.1f} GiB RAM, Linux {machine.kernel}",
        f"- Python {machine.python}, pyspark {machine.pyspark}, pyarrow {machine.pyarrow}, confluent-kafka "
        f"{machine.confluent_kafka} (librdkafka {machine.librdkafka}), {machine.java}, aiobotocore "
        f"{machine.aiobotocore}, botocore {machine.botocore}, moto {suite.moto}",
        f"- load average (1 / 5 / 15 min) before the broker started: {load_before}; after the run: {load_after}",
        f"- commit {machine.commit}",
        "",
        "## Reproduce",
        "",
        "```bash",
        "bash scripts/setup.sh && source .venv/bin/activate",
        "apt-get install -y kcat   # optional: the kcat baseline row",
        suite.command,
        "```",
        "",
        "`python -m bench --help` lists the options (`--only throughput,latency` picks parts, `--paths`, "
        "`--value-sizes`, `--partition-counts` shape the throughput matrix, `--quick` is a smoke run that writes "
        "no document). `python -m bench.latency`, `python -m bench.restart` and `python -m bench.idle` run one part "
        "alone; `python -m bench.profile_reads` times single Spark range reads in-process.",
        "",
    ]
    return "\n".join(lines)


def where_the_time_goes(suite: Suite) -> list[str]:
    """Per filesystem run: how the backlog's CPU time splits between processes, and what py-spy saw."""
    lines = ["### Where the time goes", ""]
    rows_: list[tuple[str, ...]] = []
    for run in suite.cells:
        for path in run.paths:
            mirror = path.mirror
            if not mirror.cpu:
                continue
            available = mirror.backlog_seconds * suite.machine.cpus
            cells = [run.cell.label, PATH_TITLES[path.kind], f"{mirror.backlog_seconds:.1f}"]
            for label in CPU_COLUMNS:
                cells.append(f"{mirror.cpu.get(label, 0.0) / available * 100:.0f} %")
            other = sum(v for k, v in mirror.cpu.items() if k not in CPU_COLUMNS)
            cells.append(f"{other / available * 100:.0f} %")
            cells.append(f"{sum(mirror.cpu.values()) / available * 100:.0f} %")
            rows_.append(tuple(cells))
    if rows_:
        lines += [
            f"Share of the machine's {suite.machine.cpus} CPUs each process used during the backlog (from "
            "/proc/<pid>/stat, sampled every 0.25 s). The mirror process itself (Python: asyncio, pyarrow, Parquet, "
            "the Kafka sink) is one column; Spark's JVM, which fetches from Kafka, builds rows and Arrow batches and "
            "serves them to Python, is another.",
            "",
            *_md_table(
                (
                    "cell",
                    "path",
                    "backlog s",
                    *[CPU_COLUMNS[c] for c in CPU_COLUMNS],
                    "destination server, py-spy",
                    "all",
                ),
                rows_,
                left=(0, 1),
            ),
            "",
        ]
    per_record: list[tuple[str, ...]] = []
    for run in suite.cells:
        fs = next((path for path in run.paths if path.kind == "filesystem" and path.mirror.cpu), None)
        if fs is None or run.raw.cpu_seconds <= 0:
            continue
        records = fs.mirror.records
        jvm = fs.mirror.cpu.get("Spark JVM (its child)", 0.0) / records * 1e6
        python = fs.mirror.cpu.get("mirror process (Python)", 0.0) / records * 1e6
        broker = fs.mirror.cpu.get("source broker", 0.0) / records * 1e6
        raw = run.raw.cpu_seconds / run.raw.records * 1e6
        total = jvm + python + broker
        per_record.append(
            (
                run.cell.label,
                f"{raw:.1f}",
                f"{jvm:.1f}",
                f"{python:.1f}",
                f"{broker:.1f}",
                f"{suite.machine.cpus / (total / 1e6):,.0f}",
                f"{fs.mirror.records / fs.mirror.backlog_seconds:,.0f}",
            )
        )
    if per_record:
        lines += [
            "CPU cost per record of Kafka → filesystem against the raw consumer's (µs of CPU per record; the raw "
            "consumer's is its process's CPU time while it read, librdkafka threads included). If the machine's "
            "CPUs did nothing else, the mirror could not go faster than CPUs ÷ (JVM + Python + broker µs): the "
            "ceiling column.",
            "",
            *_md_table(
                (
                    "cell",
                    "raw consumer µs",
                    "Spark JVM µs",
                    "mirror Python µs",
                    "source broker µs",
                    "CPU ceiling records/s",
                    "measured records/s",
                ),
                per_record,
            ),
            "",
        ]
    for run in suite.cells:
        for path in run.paths:
            profile = path.mirror.profile
            if profile is None:
                continue
            busy = [(name, sec) for name, sec in profile.activities if not name.startswith("idle")]
            lines += [
                f"py-spy, {run.cell.label}, {PATH_TITLES[path.kind]} (seconds of thread wall time over "
                f"{profile.seconds:.1f} s; idle worker threads left out): "
                + "; ".join(f"{name} {sec:.1f} s" for name, sec in busy),
                "",
            ]
    return lines


CPU_COLUMNS = {
    "Spark JVM (its child)": "Spark JVM",
    "mirror process (Python)": "mirror (Python)",
    "source broker": "source broker",
}
