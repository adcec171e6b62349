"""The report step: `<workdir>/results.jsonl` and `micro.json` rendered as the benchmark document and its chart.

Every number comes from those files; a measurement repeated (`--repeat`) shows its median with the range of the runs.
"""

from __future__ import annotations

import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from bench import report_estate
from bench.procs import JVM, MIRROR
from bench.raw import CONSUMER, KEY_BYTES
from bench.runner import MICRO, RESULTS

Row = dict[str, Any]
GIB_MIB = 1024
BASELINES = {
    "raw": "raw consume (confluent-kafka)",
    "kcat": "raw consume (kcat)",
    "raw-parquet": "raw consume + zstd Parquet, 1 thread",
    "raw-copy": "raw copy (consume → produce)",
    "mm2-eos": "MirrorMaker 2 3.9.1, exactly-once (peer)",
    "mm2": "MirrorMaker 2 3.9.1, default at-least-once (peer)",
}
KAFKA_TO_KAFKA = ("raw-copy", "mm2-eos", "mm2", "kafka-preserve", "kafka-renumber")
PATHS = {
    "filesystem": "mirror → filesystem",
    "filesystem-table": "mirror → filesystem + Iceberg table",
    "s3": "mirror → S3 (moto)",
    "kafka-preserve": "mirror → Kafka (preserve)",
    "kafka-renumber": "mirror → Kafka (renumber)",
}
# One per baseline and path, in their order (the peers' in purple and brown).
COLOURS = (
    "#4d4d4d",
    "#8c8c8c",
    "#bfbfbf",
    "#e0e0e0",
    "#9467bd",
    "#8c564b",
    "#1f77b4",
    "#17becf",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
)
CPU_COLUMNS = (MIRROR, JVM, "source broker", "destination server")
IDLE_HEADER = (
    "mirrors|config|RSS Python MiB|RSS JVM MiB|RSS total MiB|CPU Python cores|CPU JVM cores|CPU broker cores|fds|"
    "threads Python / JVM|start-up s|drain s"
)
CPU_HEADER = (
    "cell|path|mirror (Python) µs|Spark JVM + workers µs|source broker µs|destination server µs|all µs|raw consumer µs|"
    "raw + Parquet µs|"
    "CPU ceiling records/s|measured records/s"
)
RESTORE_PATHS = {
    "raw": ("raw consume (confluent-kafka)", None),
    "archive": ("mirror → filesystem (writes the archive)", "raw"),
    "verify": ("verify (archive vs source)", "raw"),
    "raw-produce": ("raw produce (acks=all, idempotent)", None),
    "restore-preserve": ("restore (preserve)", "raw-produce"),
    "restore-renumber": ("restore (renumber)", "raw-produce"),
    "restore-renumber-dr": ("restore (renumber, --create-topics --as-of, 3 group positions)", "raw-produce"),
    "compact": ("compact (the archive's copy: every blob merged)", None),
    "verify-compacted": ("verify of the compacted archive", "raw"),
    "restore-preserve-compacted": ("restore (preserve) of the compacted archive", "raw-produce"),
    "restore-renumber-compacted": ("restore (renumber) of the compacted archive", "raw-produce"),
}  # path -> (label, the baseline its ratio is to)
RESTORE_COMMANDS = (
    "verify",
    "restore-preserve",
    "restore-renumber",
    "restore-renumber-dr",
    "compact",
    "verify-compacted",
    "restore-preserve-compacted",
    "restore-renumber-compacted",
)
RESTORE_DETAILS = (
    "scenario|command|wall s|Spark start s|before work s|work s|logged s|Spark jobs: kind ×count at s: s|Python µs|"
    "JVM + workers µs|broker µs"
)
TARGETS_NOTE = (
    "Targets of issue #13 on this 2-CPU machine, each against a baseline from the same run: Kafka → filesystem at "
    "≤ 1.2× the CPU per record and ≥ 1.3× the records/s of raw consume + zstd Parquet in one thread (1 and 8 "
    "partitions); Kafka → S3 (moto) ≥ 0.8× that baseline; Kafka → Kafka (both modes) ≥ 0.7× the raw consume → "
    "produce copy; produce → durable p99 ≤ max-time + 0.5 s; 1,000 idle mirrors in < 0.5 GiB RSS. Issue #32's, for a "
    "steady producer over P partitions (estate-steady): at max-time 1 s p99 ≤ 2.5 s and ≤ 1 core, below Structured "
    "Streaming's cores, at every P; at max-time 10 s p99 ≤ 12 s and ≤ 0.5 cores; every destination keeps up."
)


def spread(values: Sequence[float], fmt: Callable[[float], str]) -> str:
    """The median; with the range of the runs when there were several."""
    if len(values) < 2:
        return fmt(values[0])
    if fmt(min(values)) == fmt(max(values)):
        return f"{fmt(values[0])} ({len(values)} runs)"
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}–{fmt(max(values))}, {len(values)} runs)"


def md_table(header: str, rows: Iterable[Sequence[str]], left: int = 1) -> list[str]:
    """A markdown table of the `|`-separated `header`, its first `left` columns left-aligned, the rest right-aligned."""
    columns = header.split("|")
    lines = [
        f"| {' | '.join(columns)} |",
        "|" + "|".join("---" if i < left else "---:" for i in range(len(columns))) + "|",
    ]
    return [*lines, *(f"| {' | '.join(row)} |" for row in rows), ""]


def group(rows: Iterable[Row], *keys: str) -> dict[tuple[Any, ...], list[Row]]:
    grouped: dict[tuple[Any, ...], list[Row]] = defaultdict(list)
    for row in rows:
        grouped[tuple(row.get(key) for key in keys)].append(row)
    return grouped


def num(x: float, digits: int = 0) -> str:
    return f"{x:,.{digits}f}"


def triggers(row: Row) -> str:
    return ", ".join(f"{name} {count}" for name, count in sorted(row["triggers"].items()))


class Throughput:
    """The throughput rows, by (cell, path): rates and their ratios to the same cell's baselines."""

    def __init__(self, rows: list[Row]) -> None:
        self.runs = group((r for r in rows if r["kind"] == "throughput" and "path" in r), "scenario", "path")
        self.cells = list(dict.fromkeys(cell for cell, _ in self.runs))

    def rates(self, cell: str, path: str) -> list[float]:
        return [r["records"] / r["seconds"] for r in self.runs.get((cell, path), [])]

    def rate(self, cell: str, path: str) -> float | None:
        rates = self.rates(cell, path)
        return statistics.median(rates) if rates else None

    def paths(self, cell: str) -> list[str]:
        return [p for p in (*BASELINES, *PATHS) if (cell, p) in self.runs]

    def row(self, cell: str) -> Row:
        return next(iter(r for (c, _), runs in self.runs.items() if c == cell for r in runs))


def cpu_per_record(run: Row) -> float:
    """CPU seconds per record of a run: a baseline's own process, or a mirror's processes (Python, JVM, workers)."""
    if "cpu_seconds" in run:
        return float(run["cpu_seconds"]) / int(run["records"])
    return float(sum(run["cpu"].get(label, 0.0) for label in (MIRROR, JVM))) / int(run["records"])


def median_cpu(tp: Throughput, cell: str, path: str) -> float | None:
    runs = tp.runs.get((cell, path), [])
    return statistics.median(cpu_per_record(r) for r in runs) if runs else None


def targets(rows: list[Row], tp: Throughput) -> list[tuple[str, str, str]]:
    found = []
    for cell in tp.cells:
        floor, floor_cpu = tp.rate(cell, "raw-parquet"), median_cpu(tp, cell, "raw-parquet")
        copy = tp.rate(cell, "raw-copy")
        rate, cpu = tp.rate(cell, "filesystem"), median_cpu(tp, cell, "filesystem")
        if floor and rate:
            found.append(
                (f"Kafka → filesystem ≥ 1.3× raw + Parquet ({cell})", f"{rate / floor:.2f}×", rate >= 1.3 * floor)
            )
        if floor_cpu and cpu:
            ratio = cpu / floor_cpu
            found.append(
                (f"Kafka → filesystem CPU/record ≤ 1.2× raw + Parquet ({cell})", f"{ratio:.2f}×", ratio <= 1.2)
            )
        if floor and (s3 := tp.rate(cell, "s3")):
            found.append((f"Kafka → S3 ≥ 0.8× raw + Parquet ({cell})", f"{s3 / floor:.2f}×", s3 >= 0.8 * floor))
        for mode in ("kafka-preserve", "kafka-renumber"):
            if copy and (kafka := tp.rate(cell, mode)):
                found.append((f"{PATHS[mode]} ≥ 0.7× raw copy ({cell})", f"{kafka / copy:.2f}×", kafka >= 0.7 * copy))
        # Issue 50: ahead of MirrorMaker 2 in the same run.
        eos, alo = tp.rate(cell, "mm2-eos"), tp.rate(cell, "mm2")
        for mode, peer, label, bound in (
            ("kafka-preserve", eos, "MirrorMaker 2 exactly-once", 1.2),
            ("kafka-preserve", alo, "MirrorMaker 2 at-least-once", 0.9),
            ("kafka-renumber", eos, "MirrorMaker 2 exactly-once", 1.0),
        ):
            if peer and (kafka := tp.rate(cell, mode)):
                what = f"{PATHS[mode]} ≥ {bound:g}× {label} ({cell})"
                found.append((what, f"{kafka / peer:.2f}×", kafka >= bound * peer))
    for r in rows:
        if r["kind"] == "latency" and "p99" in r:
            bound = r["max_time_ms"] / 1000 + 0.5
            what = f"produce → durable p99 ≤ {bound:g} s ({num(r['rate'])} records/s, max-time-ms {r['max_time_ms']})"
            found.append((what, f"p99 {r['p99']:.3f} s", r["p99"] <= bound))
        if r["kind"] == "idle" and r.get("mirrors") == 1000:
            total = r["rss_total_mib"]
            found.append(
                ("1,000 idle mirrors < 0.5 GiB RSS (Python + JVM)", f"{total / GIB_MIB:.2f} GiB", total < GIB_MIB / 2)
            )
    found += report_estate.estate_targets(rows)
    return [(what, measured, "**holds**" if ok else "**missed**") for what, measured, ok in found]


def throughput_section(tp: Throughput, cpus: int, chart: str | None) -> list[str]:
    lines = [
        "## Backlog throughput",
        "",
        "Each cell is one backlog in a topic of its own (random, incompressible values, 8 B keys). The **raw** rows "
        "drain it with a tight client loop in the same run; each mirror row is the real CLI (`python -m supervisor "
        "run`, one mirror per partition in one process) copying it into one destination, timed from the moment it "
        "can read (its `spark session ready` line, or its last `mirror starting` line if later) to its last "
        "`flushed` line; every destination was verified (each offset exactly once) after the run. MB = 10^6 bytes "
        "of key + value. **Ratio to raw**: records/s ÷ the raw consume loop's; **ratio to raw copy**: ÷ a raw "
        "confluent-kafka consume → produce copy to the destination broker (the floor of any Kafka → Kafka copy).",
        "",
        *([f"![records/s per path and cell, log scale]({chart})", ""] if chart else []),
    ]
    table = []
    for cell in tp.cells:
        raw, copy, record = tp.rate(cell, "raw"), tp.rate(cell, "raw-copy"), KEY_BYTES + tp.row(cell)["value_size"]
        for path in tp.paths(cell):
            rate = tp.rate(cell, path) or 0.0
            to_copy = f"{rate / copy:.2f}" if copy and path in KAFKA_TO_KAFKA else "-"
            name = BASELINES.get(path) or PATHS[path]
            to_raw = f"{rate / raw:.2f}" if raw else "-"
            table.append((cell, name, spread(tp.rates(cell, path), num), num(rate * record / 1e6, 1), to_raw, to_copy))
    lines += md_table("cell|path|records/s|MB/s|ratio to raw|ratio to raw copy", table, 2)
    cpu_rows, runs = [], []
    for cell in tp.cells:
        raw_runs = tp.runs.get((cell, "raw"), [])
        raw_us = statistics.median(r["cpu_seconds"] / r["records"] * 1e6 for r in raw_runs) if raw_runs else 0.0
        floor_us = (median_cpu(tp, cell, "raw-parquet") or 0.0) * 1e6
        for path in PATHS:
            for r in tp.runs.get((cell, path), []):
                us = [r["cpu"].get(label, 0.0) / r["records"] * 1e6 for label in CPU_COLUMNS]
                ceiling = cpus / (sum(us) / 1e6) if sum(us) else 0.0
                cells = (num(x, 1) for x in (*us, sum(us), raw_us, floor_us))
                cpu_rows.append((cell, PATHS[path], *cells, num(ceiling), num(r["records"] / r["seconds"])))
                seconds = (f"{r['startup_seconds']:.1f}", f"{r['seconds']:.2f}")
                written = (
                    f"{r['flushes']} ({triggers(r)})",
                    f"{r['flush_seconds']:.1f}",
                    num(r["flush_bytes"] / 1e6, 1),
                )
                runs.append((cell, PATHS[path], *seconds, *written, f"{r['drain_seconds']:.1f}", "yes"))
    lines += [
        "### Where the time goes",
        "",
        "µs of CPU per record (= CPU-seconds per million records) of each process during the backlog (psutil, sampled "
        "every 0.25 s; Spark JVM + workers = every process below the mirror's: the JVM and the Python workers that run "
        "the tasks), next to the raw consumer's and the raw consume + Parquet baseline's (each its process's CPU while "
        f"it ran, librdkafka's threads included). If the machine's {cpus} CPUs did nothing else, the mirror could "
        "not go faster than CPUs ÷ (all µs): the ceiling column.",
        "",
        *md_table(CPU_HEADER, cpu_rows, 2),
        "### Mirror runs",
        "",
        "Start-up: process start → ready to read (Spark's JVM and session, not timed above). "
        "Flush s: the `flushed` lines' write time (read + encode + write/upload/produce + commit), summed. MB "
        "written: Parquet, or the records' keys, values and headers for Kafka. Verified: the destination read back "
        "around mirror-v3 (directory listings and "
        "pyarrow, boto3, a read_committed confluent-kafka consumer) holds every source offset exactly once.",
        "",
        *md_table("cell|path|start-up s|backlog s|flushes (triggers)|flush s|MB written|drain s|verified", runs, 2),
    ]
    for cell in tp.cells:
        for r in tp.runs.get((cell, "filesystem"), []):
            if "py_spy" in r:
                frames = "; ".join(f"`{f}` {share:.0%}" for f, share in r["py_spy"]["frames"])
                lines += [
                    f"py-spy, {cell}, mirror and its Python workers → filesystem "
                    f"({r['py_spy']['busy_thread_seconds']:.1f} busy thread-seconds; innermost frames): {frames}",
                    "",
                ]
            if "jfr" in r and "frames" in r["jfr"]:
                frames = "; ".join(f"`{f[:90]}` {share:.0%}" for f, share in r["jfr"]["frames"])
                lines += [f"JFR, {cell}, Spark JVM ({r['jfr']['samples']:,} samples; innermost frames): {frames}", ""]
    return lines


def latency_section(runs: list[Row]) -> list[str]:
    first = runs[0]
    stats = ("p50", "p90", "p99", "p99.9", "max", "mean")
    return [
        "## Produce → durable latency",
        "",
        f"One mirror copies a one-partition topic to the filesystem with `flush.max-time-ms: {first['max_time_ms']}` "
        f"while a confluent-kafka producer (acks=all, linger 5 ms) sends {num(first['rate'])} records/s of "
        f"{num(first['value_size'])} B in 10 ms ticks, each value starting with its produce time. A record's latency "
        "is the moment a 5 ms directory poll first sees its Parquet file minus its produce time, over the "
        f"{first['window_seconds']:g} s after a {first['warmup_seconds']:g} s warm-up.",
        "",
        *md_table(
            "statistic|produce → durable",
            [(s, spread([r[s] for r in runs], lambda x: f"{x * 1000:,.0f} ms")) for s in stats],
        ),
        *[
            f"- {num(r['records'])} measured records (achieved {num(r['achieved_rate'])}/s, largest producer tick gap "
            f"{r['largest_tick_gap_ms']:.0f} ms) in {r['files']} files; {r['flushes']} flushes in all (triggers: "
            f"{triggers(r)}), {r['flush_seconds']:.1f} s writing; mirror start → first records durable "
            f"{r['startup_seconds']:.1f} s; drain {r['drain_seconds']:.1f} s; every offset verified once"
            for r in runs
        ],
        "",
    ]


def restart_section(runs: list[Row]) -> list[str]:
    objects = runs[0]["objects"]
    rows = []
    for (destination,), found in group(runs, "destination").items():
        lists = [r["lists"] for r in found if r["lists"] is not None]
        others = ", ".join(f"{n} {k}" for k, n in sorted(found[-1]["requests"].items()) if k != "LIST") or "n/a"
        seconds = spread([r["restart_seconds"] for r in found], lambda x: f"{x:.2f}")
        rows.append((destination, num(objects), seconds, spread(lists, num) if lists else "n/a", others))
    return [
        f"## Restart with {num(objects)} objects in the chain",
        "",
        f"Each destination's chain was filled with {num(objects)} one-record blobs (named and encoded as the mirror "
        "writes them) and the CLI started on it, timed from process start to its `mirror starting` line (logged "
        "once the chain's tail is found; Spark's JVM starts meanwhile), with the requests moto logged until then; "
        f"it then copied {num(runs[0]['extra'])} more records, was drained (exit 0) and its chain verified. A full "
        f"listing of the chain would take {-(-objects // 1000)} LIST page(s) of 1,000 keys.",
        "",
        *md_table(
            "destination|objects|process start → position known, s|LIST requests|other requests (last run)", rows
        ),
    ]


def compaction_section(runs: list[Row]) -> list[str]:
    rows = []
    for (scenario, path), found in group(runs, "scenario", "path").items():
        gb = found[0]["bytes"] / 1e9
        requests = [sum(r["requests"].values()) for r in found]
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(found[-1]["requests"].items()))
        cpu = [sum(r["cpu"].get(label, 0.0) for label in (MIRROR, JVM)) / gb for r in found]
        rows.append(
            (
                scenario,
                path,
                num(found[-1]["blobs"]),
                f"{found[0]['bytes'] / 1e6:.0f}",
                spread([r["seconds"] for r in found], lambda x: f"{x:.1f}"),
                spread(cpu, lambda x: f"{x:.0f}"),
                spread([n / gb for n in requests], num),
                kinds,
            )
        )
    return [
        "## Compaction and prune of an S3 archive: requests and CPU per GB",
        "",
        "A backlog archived by the real mirror CLI into S3 (moto, objects in RAM) in small blobs, with the requests "
        "moto logged meanwhile (the write's own cost, for scale); then `compact` (everything merged: min-age 0, no "
        "window) and `prune --before <now>` (every chain down to its last blob), one at a time, each exit 0, the "
        "compacted chains checked to hold the same offsets. **blobs**: in the archive after the step; **MB**: the "
        "archive's bytes before compaction; **CPU s/GB**: the command's process tree (Python, the Spark JVM and its "
        "workers; moto's own CPU not counted) over the archive's GB; **requests/GB**: every request moto logged "
        "during the step, by kind in the last column (last run).",
        "",
        *md_table("scenario|step|blobs|MB|wall s|CPU s/GB|requests/GB|requests by kind (last run)", rows),
    ]


def col(runs: list[Row], key: str, fmt: Callable[[float], str] = num, sub: str | None = None) -> str:
    """One column of a group of repeated runs: a field's values (or its entry `sub`), as a spread."""
    return spread([r[key] if sub is None else r[key].get(sub, 0.0) for r in runs], fmt)


def idle_section(runs: list[Row]) -> list[str]:
    rows = []
    for (mirrors, selection), found in group(runs, "mirrors", "selection").items():
        cores = [col(found, "cores", lambda x: f"{x:.3f}", label) for label in (MIRROR, JVM, "source broker")]
        threads = f"{found[-1]['python_threads']} / {found[-1]['jvm_threads']}"
        seconds = [col(found, key, lambda x: f"{x:.1f}") for key in ("startup_seconds", "drain_seconds")]
        memory = [col(found, key) for key in ("rss_python_mib", "rss_jvm_mib", "rss_total_mib")]
        form = "one topic-regex entry" if selection else "one entry per partition"
        rows.append((num(mirrors), form, *memory, *cores, col(found, "python_fds"), threads, *seconds))
    first = runs[0]
    return [
        "## Idle mirrors",
        "",
        "N mirrors in one `python -m supervisor run` process, one per partition of empty topics (up to 100 "
        "partitions each), written as one config entry per partition or selected by one `topic-regex` entry (the "
        "estate form: its start-up reads the cluster's metadata once), filesystem destination, every other setting "
        "default. After every mirror logged `mirror "
        f"starting` and the SparkSession was up, the process was left alone for {first['settle_seconds']:g} s, then "
        f"sampled with psutil once a second for {first['window_seconds']:.0f} s: the highest RSS of the Python "
        "process and of the processes below it (Spark's JVM), CPU as average cores, fds and threads at the end. "
        "Start-up: process start → the last `mirror starting` line.",
        "",
        *md_table(IDLE_HEADER, rows),
    ]


def restore_section(rows: list[Row]) -> list[str]:
    runs = group((r for r in rows if "path" in r), "scenario", "path")
    scenarios = list(dict.fromkeys(scenario for scenario, _ in runs))

    def rate(scenario: str, path: str) -> float | None:
        found = [r["records"] / r["seconds"] for r in runs.get((scenario, path), [])]
        return statistics.median(found) if found else None

    table, details = [], []
    for scenario in scenarios:
        for path, (label, baseline) in RESTORE_PATHS.items():
            found = runs.get((scenario, path), [])
            if not found:
                continue
            record = KEY_BYTES + found[0]["value_size"]
            rates = [r["records"] / r["seconds"] for r in found]
            median, base = statistics.median(rates), rate(scenario, baseline) if baseline else None
            to_base = f"{median / base:.2f}" if base else "baseline" if baseline is None else "-"
            us = spread([cpu_per_record(r) * 1e6 for r in found], lambda x: num(x, 1))
            wall = [r["records"] / r["wall_seconds"] for r in found if "wall_seconds" in r]
            table.append(
                (
                    scenario,
                    label,
                    spread(rates, num),
                    num(median * record / 1e6, 1),
                    to_base,
                    us,
                    spread([r["seconds"] for r in found], lambda x: f"{x:.1f}"),
                    spread([r["wall_seconds"] for r in found], lambda x: f"{x:.1f}") if wall else "-",
                    spread(wall, num) if wall else "-",
                )
            )
            for r in found if path in RESTORE_COMMANDS else []:
                jobs = "; ".join(
                    f"{kind} ×{j['jobs']} at {j['at']:.1f} s: {j['seconds']:.1f} s"
                    for kind, j in sorted(r["spark_jobs"].items(), key=lambda item: item[1]["at"])
                )
                broker = next((v for k, v in r["cpu"].items() if k.endswith("broker")), 0.0)
                us_each = (r["cpu"].get(MIRROR, 0.0), r["cpu"].get(JVM, 0.0), broker)
                details.append(
                    (
                        scenario,
                        label,
                        f"{r['wall_seconds']:.1f}",
                        f"{r['spark_start_seconds']:.1f}",
                        f"{r['before_work_seconds']:.1f}",
                        f"{r['seconds']:.1f}",
                        f"{r['logged_seconds']:.1f}" if "logged_seconds" in r else "-",
                        jobs,
                        *(num(x / r["records"] * 1e6, 1) for x in us_each),
                    )
                )
    first = rows[0]
    return [
        "## Restore and verify",
        "",
        f"A backlog of {num(first['records'])} records of {num(first['value_size'])} B over {first['partitions']} "
        "partitions (random values, 8 B keys) is drained by the raw consume loop, then archived by the real mirror "
        "CLI into a directory. `python -m supervisor verify` runs on that mirror's config (archive vs source, record "
        "by record: it reads both; exit 0 with every record equal required). Then a destination broker is started; "
        "the raw produce sends the archive's records (read into memory first) with the preserve mode's producer "
        "settings (acks=all, idempotent, linger 5 ms) into a fresh topic, and `python -m supervisor restore` puts the "
        "archive into a fresh topic per offsets mode, each checked afterwards (preserve: watermarks 0..end; "
        "renumber: every committed record's `mirror-v3.source-offset` covers 0..end-1 once). The disaster-recovery "
        "restore is renumber again as docs/disaster-recovery.md does it: into a topic it creates from the archived "
        "topic "
        "metadata (`--create-topics`), `--as-of` the moment the archive was finished, committing the archived "
        "positions of 3 consumer groups (`group-positions`, checked afterwards); its work ends with the last group "
        "committed. **records/s** and "
        "**MB/s** are over the **work** time: for restore, its first produce job's submission → its `restore "
        "finished` line; for verify, its Spark job (first submitted → last ended); both from a Spark event log "
        "(the job boundaries are not in their logs). The mirror: its first read → its last `flushed` line; a raw "
        "client: its loop. **Wall**: process start → exit (Python and Spark start-up, listing, the survey included). "
        "CPU µs/record: the command's processes (Python, the Spark JVM and its workers) over the work time, or the raw "
        "client's own process; **ratio**: records/s ÷ the baseline's (verify and the mirror ÷ raw consume, restore "
        "÷ raw produce).",
        "",
        *md_table(
            "scenario|command|records/s|MB/s|ratio to baseline|CPU µs/record|work s|wall s|records/s over wall",
            table,
            2,
        ),
        "Where the wall time goes. Spark start: process start → the SparkContext's start; before work: process "
        "start → the work window; logged s: the `seconds=` of restore's `restore finished` line (and its stdout "
        "summary: the produce loop, after the destinations are opened); Spark jobs by kind: how many, when "
        "the first was submitted (s after process start), first submitted → last ended. CPU µs/record over the "
        "work time: Python (the CLI's process), the Spark JVM + its Python workers, and the broker it talks to "
        "(verify: the source; restore: the destination).",
        "",
        *md_table(RESTORE_DETAILS, details, 2),
    ]


def outage_section(rows: list[Row]) -> list[str]:
    """Two source clusters in one process, one of them blackholed, then killed: the other's latency per window
    (issue 46, bench.outage)."""
    first = rows[0]
    table = []
    for (scenario, phase), runs in group(rows, "scenario", "phase").items():
        table.append(
            (
                scenario,
                phase,
                num(sum(r["records"] for r in runs)),
                *(spread([r[s] for r in runs], lambda x: f"{x:.2f} s") for s in ("p50", "p90", "p99", "max")),
                ", ".join(f"{r['slow_flushes']} ({r['slowest_flush_ms'] / 1000:.1f} s)" for r in runs),
                ", ".join(f"{r['held_polls']}/{r['polls']}" for r in runs),
            )
        )
    return [
        "## One of two clusters down under the shared flush jobs",
        "",
        f"One `run` process mirrors clusters a and b ({first['partitions']} partitions each, {num(first['rate'])} "
        f"records/s of {num(first['value_size'])} B into each, `flush.max-time-ms: {first['max_time_ms']}`, every "
        "other setting at its default) into a filesystem; b is read through a TCP proxy. After a "
        f"{first['warmup_seconds']:g} s warm-up, three windows of {first['window_seconds']:g} s: both up; b's route "
        "blackholed (no answer, no error); b's broker killed (SIGKILL) while b's mirrors read a backlog. The latency "
        "is produce → durable of **a's** records "
        "produced in the window; slow flushes: a's flushes that took over a second (the slowest); held: /mirrors "
        "polls (every 0.5 s) that found one of a's mirrors `held-by-job`. Every offset of both clusters verified once.",
        "",
        *md_table("scenario|window|a's records|p50|p90|p99|max|slow flushes per run|held polls per run", table, 2),
    ]


def schemas_section(rows: list[Row]) -> list[str]:
    """Kafka → Kafka with schema IDs rewritten, and an archive keeping the schemas, each next to the same records
    copied as they are (issue 35)."""
    runs = group((r for r in rows if "schemas" in r), "scenario", "path", "schemas")
    table = []
    for scenario, path in dict.fromkeys((scenario, path) for scenario, path, _ in runs):
        off, on = runs.get((scenario, path, "off"), []), runs.get((scenario, path, "lenient"), [])
        if not off or not on:
            continue
        rate_off = [r["records"] / r["seconds"] for r in off]
        rate_on = [r["records"] / r["seconds"] for r in on]
        ratio = statistics.median(rate_on) / statistics.median(rate_off)
        table.append(
            (
                scenario,
                report_estate.DESTINATIONS.get(path, path),
                spread(rate_off, num),
                spread(rate_on, num),
                f"{ratio:.2f}",
                spread([cpu_per_record(r) * 1e6 for r in off], lambda x: num(x, 1)),
                spread([cpu_per_record(r) * 1e6 for r in on], lambda x: num(x, 1)),
                "**holds**" if ratio >= 0.9 else "**missed**",
            )
        )
    first = rows[0]
    return [
        "## Schema IDs rewritten (Kafka → Kafka), and schemas kept in an archive",
        "",
        f"A backlog of {num(first['records'])} records of {num(first['value_size'])} B over {first['partitions']} "
        "partitions in a schema registry's wire format (a zero byte, a registered Avro schema's ID, then the body), "
        "two schema registries (Apicurio, the Confluent API) and a destination broker. The same mirror copies it "
        "into a fresh destination topic twice per offsets mode: `schemas` off (the bytes as they are: the baseline) "
        "and `schemas: {value: lenient}` (each value's ID looked up once per Spark Python worker, then rewritten to "
        "the destination registry's, which differs); and into a fresh directory twice (filesystem): off, and "
        "lenient (each value's ID noted by the blob task, its schema written beside the chains once, before the "
        "first blob carrying it is committed). Timed as the backlog rows (first read → last flush); CPU "
        "µs/record of every process. Issue 35's target: rewriting costs ≤ 10 % of the throughput (ratio ≥ 0.90).",
        "",
        *md_table(
            "scenario|path|records/s, schemas off|records/s, lenient|ratio|CPU µs/record, off|CPU µs/record, lenient|"
            "target",
            table,
            2,
        ),
    ]


def estate_section(rows: list[Row], chart: str | None) -> list[str]:
    """The estate-steady rows: the mirror next to Structured Streaming per row, then every run's details."""
    return [
        *report_estate.estate_intro(rows, chart),
        *md_table(report_estate.HEADER, report_estate.estate_table(rows), 3),
        report_estate.DETAILS_NOTE,
        "",
        *md_table(report_estate.DETAILS, report_estate.details_table(rows), 4),
    ]


def micro_section(micro: dict[str, Any]) -> list[str]:
    rows = []
    for b in micro.get("benchmarks", []):
        s, extra = b["stats"], b.get("extra_info", {})
        per = f"{s['median'] / extra['items'] * 1e9:,.1f} ns" if extra.get("items") else "-"
        note = f"{extra['listings']} listings" if "listings" in extra else ""
        times = (f"{s[key] * 1e3:,.3f}" for key in ("median", "min", "max"))
        rows.append((b["name"], *times, num(extra.get("items", 0)), per, str(s["rounds"]), note))
    return [
        "## Micro benchmarks",
        "",
        "The mirror's hot pure functions in this process, timed by pytest-benchmark (`bench/micro`): read planning, "
        "record conversion (the one-pass Arrow builder, conform), Parquet encoding, and the tail search of a "
        "chain of 10,000 and 1,000,000 blob names (a sorted in-memory store). Items: what one call handles (records; "
        "reads planned; blob names in the chain); per item = median ÷ items.",
        "",
        *md_table("benchmark|median ms|min ms|max ms|items|per item|rounds|note", rows),
    ]


def render(workdir: Path, output: Path) -> None:
    """Write `output` (markdown) and the chart beside it from the results in `workdir`."""
    rows = [json.loads(line) for line in (workdir / RESULTS).read_text().splitlines() if line.strip()]
    machine = next(r for r in rows if r["kind"] == "machine")
    end: Row = next((r for r in rows if r["kind"] == "end"), {"finished": time.time(), "load": [0, 0, 0]})
    micro = json.loads((workdir / MICRO).read_text()) if (workdir / MICRO).exists() else {}
    tp = Throughput(rows)
    chart = output.with_suffix(".png") if tp.cells else None
    if chart is not None:
        write_chart(tp, chart)
    by_kind = group((r for r in rows if "error" not in r), "kind")
    versions = ", ".join(f"{name} {version}" for name, version in machine["versions"].items())
    lines = [
        "# Benchmarks",
        "",
        f"<!-- Generated by `{machine['command']}`; edits are overwritten. -->",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(machine['started']))} with "
        f"`{machine['command']}` ({(end['finished'] - machine['started']) / 60:.0f} minutes) on {machine['cpus']} CPUs "
        f"({machine['cpu_model']}), {machine['ram_gib']} GiB RAM, at commit {machine['commit']}. Every process "
        "(brokers, Spark, the mirror, moto, the raw clients) shares this one machine.",
        "",
        "## Targets",
        "",
        TARGETS_NOTE,
        "",
        *md_table("target|measured|verdict", targets(rows, tp)),
        *(
            ["Where a throughput target is missed, [where the time goes](#where-the-time-goes) shows the CPU.", ""]
            if tp.cells
            else []
        ),
    ]
    errors = [r for r in rows if "error" in r]
    if errors:
        lines += [
            "## Failed scenarios",
            "",
            *(f"- {r['scenario']} (round {r['round']}): `{r['error'][:500]}`" for r in errors),
            "",
        ]
    if tp.cells:
        lines += throughput_section(tp, machine["cpus"], chart.name if chart else None)
    sections = (
        ("latency", latency_section),
        ("restart", restart_section),
        ("idle", idle_section),
        ("restore", restore_section),
        ("schemas", schemas_section),
        ("outage", outage_section),
        ("compaction", compaction_section),
    )
    for kind, section in sections:
        if (kind,) in by_kind:
            lines += section(by_kind[(kind,)])
    if ("estate-steady",) in by_kind:
        estate_chart = output.with_name(f"{output.stem}-estate.png")
        drawn = report_estate.write_estate_chart(by_kind[("estate-steady",)], estate_chart)
        lines += estate_section(by_kind[("estate-steady",)], estate_chart.name if drawn else None)
    if micro:
        lines += micro_section(micro)
    consumer = ", ".join(f"`{k}={v}`" for k, v in CONSUMER.items() if k != "logger")
    lines += [
        "## Settings and machine",
        "",
        "- brokers: Apache Kafka 3.9.1 (KRaft, single node, `testkit.kafka_broker.KafkaBroker` defaults) on 127.0.0.1",
        f"- raw consumer (confluent-kafka): {consumer}; kcat `-C -e -o beginning` with the same settings; raw copy: "
        "that consumer feeding an idempotent acks=all producer (linger 5 ms) into the destination broker"
        + (
            "; raw produce (restore's baseline): that producer alone, from memory, delivery reports only for errors"
            if ("restore",) in by_kind
            else ""
        ),
        f"- mirror: `flush.max-time-ms: 1000`, `spark:` {machine.get('spark') or 'defaults'}, every other setting at "
        "its config/model.py default; S3 on moto (objects "
        "in RAM, in its own process on this machine: a cost real S3 would not take from these CPUs)",
        f"- {machine['cpus']} CPUs ({machine['cpu_model']}), {machine['ram_gib']} GiB RAM, Linux {machine['kernel']}; "
        f"Python {machine['python']}, {versions}, {machine['java']}",
        f"- load average (1 / 5 / 15 min) at the start: {load(machine)}; at the end: {load(end)}",
        "",
        "## Reproduce",
        "",
        "```bash",
        "bash scripts/setup.sh && source .venv/bin/activate",
        "apt-get install -y kcat   # optional: the kcat baseline",
        machine["command"],
        "```",
        "",
        "`python -m bench --help` lists the options; `--report-only DIR` renders this page again from a run's "
        "`results.jsonl` and `micro.json`.",
        "",
    ]
    output.write_text("\n".join(lines))


def load(row: Row) -> str:
    return " / ".join(f"{x:.2f}" for x in row["load"])


def write_chart(tp: Throughput, file: Path) -> None:
    """Grouped bars of records/s per cell (log scale), the mirror's bars labelled with their ratio to raw."""
    import matplotlib

    matplotlib.use("Agg")  # no display: straight to the file
    import matplotlib.pyplot as plt

    series = [p for p in (*BASELINES, *PATHS) if any(tp.rate(cell, p) for cell in tp.cells)]
    width = 0.8 / max(1, len(series))
    figure, axes = plt.subplots(figsize=(max(8.0, 2.6 * len(tp.cells)), 5.0), dpi=110)
    for index, path in enumerate(series):
        points = [(i, rate, tp.rate(cell, "raw")) for i, cell in enumerate(tp.cells) if (rate := tp.rate(cell, path))]
        xs = [i - 0.4 + width * (index + 0.5) for i, _, _ in points]
        colour = COLOURS[(*BASELINES, *PATHS).index(path)]
        bars = axes.bar(
            xs, [rate for _, rate, _ in points], width=width, color=colour, label=BASELINES.get(path) or PATHS[path]
        )
        for bar, (_, rate, raw) in zip(bars, points, strict=True):
            if path in PATHS and raw:
                axes.annotate(
                    f"{rate / raw:.2f}×", (bar.get_x() + width / 2, rate), ha="center", va="bottom", fontsize=7
                )
    axes.set_yscale("log")
    axes.set_ylabel("records/s (log scale); labels: ratio to raw consume")
    axes.set_xticks(range(len(tp.cells)), [cell.replace(", ", "\n") for cell in tp.cells])
    axes.set_title("mirror-v3 backlog throughput vs raw Kafka clients, same run, same machine")
    axes.grid(axis="y", which="both", alpha=0.3)
    axes.legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    figure.tight_layout()
    figure.savefig(file)
    plt.close(figure)
