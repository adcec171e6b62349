"""How `status` shows a report: the filters, the summary line, the table that fits a terminal and the wide one,
and the JSON document. Pure: the report and the time in, text out.

The default table is for an estate of hundreds of partitions in a terminal: one summary line first (how many
mirrors, how many lag or failed, the lag in all and the oldest record still waiting), then per mirror only what
an operator acts on (its cluster when the rows come from more than one, topic, partition, state, lag in records and
in seconds, time since the last flush, the error), cut to STANDARD_WIDTH columns. What did not answer is never
counted as no lag: the summary then says "at least" or "unknown". An error cut to fit is written whole under the
table (up to ERRORS_UNDER_TABLE of them, then how many more). `--wide` shows every column uncut, `--format json`
every field.
"""

from __future__ import annotations

import calendar
import re
import time
from dataclasses import dataclass, replace

import msgspec

from commands.output import table_lines
from commands.status import (
    FAILED_STATES,
    MirrorStatus,
    StatusDocument,
    StatusReport,
    StatusSummary,
)

STANDARD_WIDTH = 100
TABLE_COLUMNS = ("TOPIC", "PARTITION", "STATE", "LAG", "LAG-S", "LAST-FLUSH", "ERROR")
WIDE_COLUMNS = (
    "MIRROR",
    "TOPIC",
    "PARTITION",
    "SOURCE-START",
    "SOURCE-END",
    "DEST-NEXT",
    "TABLE-NEXT",
    "LAG",
    "LAG-S",
    "LAG-HW",
    "HELD-SINCE",
    "RATE/S",
    "ETA",
    "LAST-FLUSH",
    "STATE",
    "CLUSTER",
    "OWNER",
    "DESTINATION",
    "ERROR",
)
TOPIC_WIDTH = 30  # longer topic names are cut (…) in the default table
CLUSTER_WIDTH = 16  # the same for cluster names, shown when the rows come from more than one
MIN_ERROR_WIDTH = 12
ERRORS_UNDER_TABLE = 10


@dataclass(frozen=True)
class StatusFilter:
    """Which rows `status` shows: all of them by default. `topic` must match the whole topic name (as a selection's
    topic-regex does); `lagging`: lag above 0; `failed`: a failed, restarting or data-lost mirror, or a row that
    could not be queried."""

    cluster: str | None = None
    topic: str | None = None
    lagging: bool = False
    failed: bool = False

    def keeps(self, row: MirrorStatus) -> bool:
        if self.cluster is not None and row.cluster != self.cluster:
            return False
        if self.topic is not None and re.fullmatch(self.topic, row.topic) is None:
            return False
        if self.lagging and not (row.lag or 0) > 0:
            return False
        return not self.failed or failing(row)

    def apply(self, report: StatusReport) -> StatusReport:
        """The report with only the rows kept, and with `--cluster` only that cluster if it was unreadable: its `ok`
        then speaks for what is shown."""
        unreadable = report.unreadable
        if self.cluster is not None:
            unreadable = {name: why for name, why in unreadable.items() if name == self.cluster}
        return replace(report, rows=[row for row in report.rows if self.keeps(row)], unreadable=unreadable)


def failing(row: MirrorStatus) -> bool:
    return row.state in FAILED_STATES or row.error is not None


def summarize(report: StatusReport) -> StatusSummary:
    rows = report.rows
    ages = [row.lag_seconds for row in rows if row.lag_seconds is not None]
    known = [row.lag for row in rows if row.lag is not None]
    unknown = len(rows) - len(known)
    # Nothing answered is not "no lag": the total is unknown, never 0, when some lag is missing and none is known.
    missing = unknown > 0 or bool(report.unreadable)
    return StatusSummary(
        mirrors=len(rows),
        lagging=sum(1 for lag in known if lag > 0),
        failed=sum(1 for row in rows if row.state in FAILED_STATES),
        errors=sum(1 for row in rows if row.error is not None),
        lag_unknown=unknown,
        total_lag=None if missing and not known else sum(known),
        oldest_pending_seconds=max(ages) if ages else None,
    )


def summary_line(summary: StatusSummary, unreadable_clusters: int = 0) -> str:
    """`3 mirrors: 1 lagging, 0 failed; lag 120 records, oldest pending 2.4s`; what did not answer is said, and the
    lag is then a lower bound ("at least") or "unknown", never a total that looks healthy."""
    oldest = "-" if summary.oldest_pending_seconds is None else age(summary.oldest_pending_seconds)
    counts = f"{summary.lagging} lagging, {summary.failed} failed"
    if summary.errors:
        counts += f", {summary.errors} not queried"
    if unreadable_clusters:
        counts += f", {_count(unreadable_clusters, 'cluster')} unreadable"
    if summary.total_lag is None:
        lag = "lag unknown"
    elif summary.lag_unknown or unreadable_clusters:
        lag = f"lag at least {summary.total_lag} records"
    else:
        lag = f"lag {summary.total_lag} records"
    return f"{_count(summary.mirrors, 'mirror')}: {counts}; {lag}, oldest pending {oldest}"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def render_table(report: StatusReport, wide: bool = False, now: float | None = None) -> str:
    """The summary line, the table (default or wide), then the unreadable clusters and the Spark line."""
    now = time.time() if now is None else now
    lines = [summary_line(summarize(report), len(report.unreadable))]
    lines += _wide_lines(report, now) if wide else _standard_lines(report, now)
    lines += [
        f"cluster {cluster}: unreadable, its selections' partitions are not listed: {why}"
        for cluster, why in sorted(report.unreadable.items())
    ]
    lines += [f"table {table}: position unreadable: {why}" for table, why in sorted(report.unreadable_tables.items())]
    if report.kept_since is not None:
        lines.append(f"archive: pruned, keeps what was committed since {report.kept_since}")
    if report.spark is not None:
        load = report.spark
        wait = "-" if load.flush_wait_p50_seconds is None else f"{load.flush_wait_p50_seconds:g}s"
        longest = "-" if load.flush_wait_max_seconds is None else f"{load.flush_wait_max_seconds:g}s"
        # Whether the process's Spark jobs keep up: a wait near flush.max-time-ms says the estate outgrows the machine.
        lines.append(
            f"spark (last {load.window_seconds:g}s): {load.jobs_per_second:g} jobs/s ({load.shared_jobs_per_second:g} "
            f"shared), {load.partitions_per_job:g} partitions per job, flush wait p50 {wait} max {longest}"
        )
    return "\n".join(lines)


def render_json(report: StatusReport) -> str:
    document = StatusDocument(
        ok=report.ok,
        process=report.process,
        summary=summarize(report),
        mirrors=report.rows,
        spark=report.spark,
        unreadable_clusters=report.unreadable,
        unreadable_tables=report.unreadable_tables,
        kept_since=report.kept_since,
    )
    return msgspec.json.encode(document).decode()


def _standard_lines(report: StatusReport, now: float) -> list[str]:
    # One topic-partition mirrored from two clusters is two rows: then each row names its cluster.
    several = len({row.cluster for row in report.rows}) > 1
    columns = ("CLUSTER", *TABLE_COLUMNS) if several else TABLE_COLUMNS
    body = [
        [
            *([_cut(row.cluster, CLUSTER_WIDTH)] if several else []),
            _cut(row.topic, TOPIC_WIDTH),
            str(row.partition),
            row.state or "-",
            _cell(row.lag),
            "-" if row.lag_seconds is None else age(row.lag_seconds),
            _since(row.last_flush, now),
            _problem(row),
        ]
        for row in report.rows
    ]
    lines = table_lines(columns, body)
    # The error column takes what the others leave of the width (at least MIN_ERROR_WIDTH).
    room = max(MIN_ERROR_WIDTH, STANDARD_WIDTH - (len(lines[0]) - len("ERROR")))
    errors = [_cut(row[-1], room) for row in body]
    lines = table_lines(columns, [[*row[:-1], error] for row, error in zip(body, errors, strict=True)])
    cut = [
        (row, whole)
        for row, whole, shown in zip(report.rows, (b[-1] for b in body), errors, strict=True)
        if whole != shown
    ]
    lines += [
        f"{f'{row.cluster} ' if several else ''}{row.topic} {row.partition}: {whole}"
        for row, whole in cut[:ERRORS_UNDER_TABLE]
    ]
    if len(cut) > ERRORS_UNDER_TABLE:
        lines.append(f"... and {len(cut) - ERRORS_UNDER_TABLE} more errors: status --failed --wide shows them")
    return lines


def _wide_lines(report: StatusReport, now: float) -> list[str]:
    body = [
        [
            row.name,
            row.topic,
            str(row.partition),
            _cell(row.source_log_start),
            _cell(row.source_end),
            "empty" if row.destination_next is None and row.error is None else _cell(row.destination_next),
            _cell(row.table_next),
            _cell(row.lag),
            "-" if row.lag_seconds is None else age(row.lag_seconds),
            _cell(row.high_watermark_lag),
            row.held_since or ("held" if _held_here(row) else "-"),
            "-" if row.rate is None else f"{row.rate:.0f}",
            duration(row.eta_seconds),
            row.last_flush or "-",
            row.state or "-",
            row.cluster,
            "-" if row.owner is None else str(row.owner),
            row.destination,
            _problem(row),
        ]
        for row in report.rows
    ]
    return table_lines(WIDE_COLUMNS, body)


def _problem(row: MirrorStatus) -> str:
    return "; ".join(e for e in (_lost_line(row), row.error, row.failure and f"process: {row.failure}") if e)


def _held_here(row: MirrorStatus) -> bool:
    """Caught up to the last stable offset with records behind it: an open transaction holds the mirror
    (since when, only the running process knows)."""
    return row.lag == 0 and (row.high_watermark_lag or 0) > 0


def _lost_line(row: MirrorStatus) -> str | None:
    if row.lost is None:
        return None
    return (
        f"source offsets {row.lost} were deleted before they were mirrored: every start fails (source.on-data-loss: "
        "fail); set on-data-loss: skip to go on without them"
    )


def _since(iso_utc: str | None, now: float) -> str:
    """A last-flush time as its age ("3s ago"), the way an operator reads it."""
    if iso_utc is None:
        return "-"
    try:
        then = calendar.timegm(time.strptime(iso_utc, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return iso_utc
    return f"{age(max(0.0, now - then))} ago"


def age(seconds: float) -> str:
    """Seconds as an operator reads them: 0.4s, 12s, 3m05s, 2h07m, 3d04h."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 86_400:
        return duration(seconds)
    days, rest = divmod(round(seconds), 86_400)
    return f"{days}d{rest // 3600:02d}h"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _cell(value: int | None) -> str:
    return "-" if value is None else str(value)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
