"""The estate-steady rows of `results.jsonl` (bench.estate) as a section of the benchmark document, its targets
(issue 32) and its chart of cores and p99 against the number of partitions, the mirror next to Structured Streaming.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

Row = dict[str, Any]
MIRROR, REFERENCE = "mirror", "structured-streaming"
DESTINATIONS = {
    "filesystem": "filesystem",
    "s3": "S3 (moto)",
    "kafka-preserve": "Kafka, preserve",
    "kafka-renumber": "Kafka, renumber",
}
HEADER = (
    "partitions|max-time|destination|flushes/s needed|mirror: flushes/s|jobs/s|cores|broker cores|p50 / p99 / max|"
    "lag at window start → end|Structured Streaming: batches/s|cores|broker cores|p50 / p99 / max|"
    "lag at window start → end"
)
P99_TICKS = (0.1, 0.2, 0.5, 1, 2, 2.5, 5, 10, 20, 50, 100, 200, 500)
DETAILS = (
    "partitions|max-time|system|destination|produced|records/s achieved|largest tick gap ms|measured records|"
    "start-up s|catch-up s|drain s|bench cores|other cores|verified"
)


def runs_by(rows: Iterable[Row]) -> dict[tuple[str, str, str], list[Row]]:
    """(scenario, system, path) -> its runs (repeats)."""
    found: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if r.get("kind") == "estate-steady" and "system" in r and "error" not in r:
            found[(r["scenario"], r["system"], r["path"])].append(r)
    return found


def median(runs: Sequence[Row], key: Callable[[Row], float]) -> float:
    return statistics.median(key(r) for r in runs)


def seconds(x: float) -> str:
    return f"{x:.1f} s" if x >= 10 else f"{x:.2f} s"


def latencies(runs: Sequence[Row]) -> str:
    return " / ".join(seconds(statistics.median(float(r[key]) for r in runs)) for key in ("p50", "p99", "max"))


def lag(runs: Sequence[Row]) -> str:
    start, end = median(runs, lambda r: r["lag_window_start"]), median(runs, lambda r: r["lag_window_end"])
    return f"{start:,.0f} → {end:,.0f}"


def cores(runs: Sequence[Row], label: str = "tree") -> str:
    if label == "tree":
        return f"{median(runs, lambda r: r['tree_cores']):.2f}"
    return f"{median(runs, lambda r: r['cores'].get(label, 0.0)):.2f}"


def per_second(runs: Sequence[Row], key: str) -> str:
    values = [r[key] for r in runs if r.get(key) is not None]
    return f"{statistics.median(values):.2f}" if values else "n/a"


def needed(r: Row) -> float:
    """Flushes a second that hold max-time: one per partition per max-time, or one per record if records are rarer."""
    return float(min(r["partitions"], r["rate"] * r["max_time_ms"] / 1000) / (r["max_time_ms"] / 1000))


def estate_table(rows: list[Row]) -> list[tuple[str, ...]]:
    runs = runs_by(rows)
    table: list[tuple[str, ...]] = []
    for (scenario, system, path), found in runs.items():
        if system != MIRROR:
            continue
        first = found[0]
        reference = runs.get((scenario, REFERENCE, path), []) if path == "filesystem" else []
        theirs: tuple[str, ...] = ("-",) * 5
        if reference:
            theirs = (
                per_second(reference, "flushes_per_second"),
                cores(reference),
                cores(reference, "source broker"),
                latencies(reference),
                lag(reference),
            )
        table.append(
            (
                f"{first['partitions']:,}",
                f"{first['max_time_ms'] / 1000:g} s",
                DESTINATIONS.get(path, path),
                f"{needed(first):,.1f}",
                per_second(found, "flushes_per_second"),
                per_second(found, "jobs_per_second"),
                cores(found),
                cores(found, "source broker"),
                latencies(found),
                lag(found),
                *theirs,
            )
        )
    return table


def details_table(rows: list[Row]) -> list[tuple[str, ...]]:
    table: list[tuple[str, ...]] = []
    for (_, system, path), found in runs_by(rows).items():
        for r in found:
            table.append(
                (
                    f"{r['partitions']:,}",
                    f"{r['max_time_ms'] / 1000:g} s",
                    "mirror-v3" if system == MIRROR else "Structured Streaming",
                    DESTINATIONS.get(path, path),
                    f"{r['produced']:,}",
                    f"{r['achieved_rate']:,.0f}",
                    f"{r['largest_tick_gap_ms']:.0f}",
                    f"{r['records']:,}",
                    f"{r['startup_seconds']:.1f}",
                    f"{r['catch_up_seconds']:.1f}",
                    f"{r['drain_seconds']:.1f}",
                    f"{r['bench_cores']:.2f}" if "bench_cores" in r else "-",
                    f"{r['other_cores']:.2f}" if "other_cores" in r else "-",
                    "yes" if r.get("verified") else "no",
                )
            )
    return table


def estate_targets(rows: list[Row]) -> list[tuple[str, str, bool]]:
    """Issue 32's targets, each measured row against its bound: (what, measured, holds)."""
    found = []
    runs = runs_by(rows)
    for (scenario, system, path), mine in runs.items():
        if system != MIRROR:
            continue
        first = mine[0]
        p, max_time = first["partitions"], first["max_time_ms"] / 1000
        p99, tree = median(mine, lambda r: r["p99"]), median(mine, lambda r: r["tree_cores"])
        where = f"P = {p:,}, max-time {max_time:g} s, {DESTINATIONS.get(path, path)}"
        kept = median(mine, lambda r: r["lag_window_end"] - r["lag_window_start"]) <= first["rate"] * max_time
        found.append((f"keeps up: lag grows by ≤ 1 max-time of records over the window ({where})", lag(mine), kept))
        if path != "s3":  # issue 32 asks S3 (on moto, sharing the cores) only to keep up
            bound = 2.5 if max_time <= 1 else 12.0
            found.append((f"p99 produce → durable ≤ {bound:g} s ({where})", seconds(p99), p99 <= bound))
        if path == "filesystem":
            limit = 1.0 if max_time <= 1 else 0.5
            found.append((f"mirror CPU ≤ {limit:g} core ({where})", f"{tree:.2f} cores", tree <= limit))
            # Issue 32 compares with Structured Streaming at max-time 1 s (P = 4 to 256); at 10 s it asks ≤ 0.5 cores
            # only. The longer rows' reference is in the table, not a target.
            if max_time <= 1 and (reference := runs.get((scenario, REFERENCE, path))):
                theirs = median(reference, lambda r: r["tree_cores"])
                what = f"mirror CPU < Structured Streaming's ({where})"
                found.append((what, f"{tree:.2f} vs {theirs:.2f} cores", tree < theirs))
    return found


def estate_intro(rows: list[Row], chart: str | None) -> list[str]:
    """The section's heading and what its numbers mean (the tables follow: HEADER, DETAILS)."""
    measured = [r for r in rows if r.get("kind") == "estate-steady" and "system" in r]
    first = measured[0]
    return [
        "## Estate: a steady producer over many partitions",
        "",
        f"Issue 32's workload: a producer sends {first['rate']:,} records/s of {first['value_size']:,} B in all, "
        "spread evenly over the P partitions of one topic, each value starting with its produce time. One `python -m "
        "supervisor run` process selects the topic by name (`topics: [...]`, every partition) and mirrors it with "
        f"`flush.max-time-ms` M; {_windows(measured)}. Beside it, on a fresh topic of the same broker and with the "
        "same producer, what a Spark user writes instead: **Spark Structured Streaming** (Spark's own Kafka source, "
        "the Parquet file sink, `trigger(processingTime=M)`, `local[*]`, its own process; `bench/streaming_job.py`). "
        "Both were primed (100 records durable) before the producer started.",
        "",
        "**Latency** is produce → durable over the records produced in the window: the filesystem blob's commit "
        "(its inode change time: the commit's link and unlink; within a few ms of the mirror's `flushed` line, "
        "`ctime_after_log_ms` in results.jsonl), the mirror's `flushed` line for S3 (checked against "
        "moto's whole-second LastModified), the moment a read_committed consumer of the destination got the record "
        "for Kafka, and the batch's entry in `_spark_metadata` for Structured Streaming (its readers see no file "
        "before). **Cores**: CPU of the whole process tree (Python driver, JVM, Spark's Python workers) over the "
        "window ÷ its length (psutil); **broker cores** likewise for the source broker. **Flushes/s**: the "
        "`mirror_v3_destination_flushes_total` delta over the window (Structured Streaming: batches that committed "
        "files); **jobs/s** from `mirror_v3_spark_jobs_total` where the process exposes it. **Lag**: records "
        "produced but not yet durable, at the window's start and end. After the producer stopped, every record "
        "landed (the mirror's destination held each offset exactly once; the sink each (partition, offset) once).",
        "",
        *([f"![mirror-v3 and Structured Streaming: cores and p99 against partitions]({chart})", ""] if chart else []),
    ]


def _windows(measured: list[Row]) -> str:
    """ "after 15 s of warm-up a 40 s window is measured", naming the rows that differ from the most common."""
    spans = Counter((r["warmup_seconds"], r["window_seconds"]) for r in measured)
    (warmup, window), _ = spans.most_common(1)[0]
    said = f"after {warmup:g} s of warm-up a {window:g} s window is measured"
    others = sorted({(r["partitions"], r["max_time_ms"], r["warmup_seconds"], r["window_seconds"]) for r in measured})
    for partitions, max_time_ms, other_warmup, other_window in others:
        if (other_warmup, other_window) != (warmup, window):
            said += (
                f" (P = {partitions:,} at {max_time_ms / 1000:g} s: {other_warmup:g} s of warm-up, so that its "
                f"partitions reach their steady state, and a {other_window:g} s window)"
            )
    return said


DETAILS_NOTE = (
    "Each run: records produced (priming included), the producer's achieved rate and its largest gap between 10 ms "
    "ticks (a stalled producer, not a slow mirror), records measured in the window, start-up (process start → "
    "primed), catch-up (producer done → last record durable) and stop; the cores of the bench's own process (the "
    "producer, a Kafka destination's consumer) and of everything else on the machine in the window (all busy CPU "
    "less the measured processes and the bench: well above 0 means something else shared the cores)."
)


def write_estate_chart(rows: list[Row], file: Path) -> bool:
    """Cores and p99 against partitions (log scale), one line per system, destination and max-time; False when there
    is nothing to draw."""
    series: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    for (_, system, path), found in runs_by(rows).items():
        first = found[0]
        who = "mirror-v3" if system == MIRROR else "Structured Streaming"
        label = f"{who}, {DESTINATIONS.get(path, path)}, max-time {first['max_time_ms'] / 1000:g} s"
        series[label].append(
            (first["partitions"], median(found, lambda r: r["tree_cores"]), median(found, lambda r: r["p99"]))
        )
    if not series:
        return False
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")  # no display: straight to the file
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.6), dpi=110)
    for label, points in sorted(series.items()):
        points.sort()
        style = "-o" if label.startswith("mirror") else "--s"
        xs = [p for p, _, _ in points]
        left.plot(xs, [c for _, c, _ in points], style, label=label)
        right.plot(xs, [l99 for _, _, l99 in points], style, label=label)
    # Issue 32's bounds at max-time 1 s, for the eye: p99 2.5 s, one core.
    left.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    right.axhline(2.5, color="grey", linestyle=":", linewidth=1)
    partitions = sorted({p for points in series.values() for p, _, _ in points})
    for axes, title in ((left, "CPU of the process tree, cores"), (right, "p99 produce → durable, s (log)")):
        axes.set_xscale("log", base=2)
        axes.set_xticks(partitions, [f"{p:,}" for p in partitions])
        axes.minorticks_off()
        axes.set_xlabel("partitions")
        axes.set_title(title)
        axes.grid(alpha=0.3)
    left.set_ylim(bottom=0)
    # Log scale (p99 spans 1 s to minutes), labelled with plain seconds: the range always includes the 2.5 s bound.
    p99s = [l99 for points in series.values() for _, _, l99 in points] + [2.5]
    low, high = min(p99s) / 1.5, max(p99s) * 1.5
    right.set_yscale("log")
    right.set_ylim(low, high)
    right.set_yticks([t for t in P99_TICKS if low <= t <= high], [f"{t:g}" for t in P99_TICKS if low <= t <= high])
    right.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.legend(fontsize=7, loc="upper left")
    figure.suptitle("steady producer over P partitions: mirror-v3 vs Spark Structured Streaming, same run")
    figure.tight_layout()
    figure.savefig(file)
    plt.close(figure)
    return True
