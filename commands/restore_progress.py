"""How a restore reports where it is: on stderr for the person who started it (`Progress`), and as the
Prometheus series of `run` for the monitoring that watches it (`RestoreMetrics`).

Both read the same per-partition facts (`RestoreState`): the archived range [first, end), the next archived
offset the destination holds (`position`), and what this run produced.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Protocol

from core.logs import log_event
from sinks.kafka.produce import ProducedRange
from telemetry.metrics import MetricFamilies, MirrorMetrics

log = logging.getLogger("mirror_v3.restore")

PROGRESS_EVERY_S = 5.0
ARCHIVE_CLUSTER = "archive"  # the `cluster` label of a restore's series: its source is the archive


class RestoreState(Protocol):
    @property
    def name(self) -> str: ...  # archived/partition

    archived: str
    partition: int
    topic: str
    first: int
    end: int
    position: int | None
    records: int
    record_bytes: int


class Progress:
    """Records, MB/s and ETA on stderr: a bar redrawn in place on a terminal, an INFO line every few seconds
    otherwise. The ETA assumes the offsets still to restore go at the rate so far."""

    def __init__(self, parts: Sequence[RestoreState], tty: bool | None = None) -> None:
        self._tty = sys.stderr.isatty() if tty is None else tty
        self._started = time.monotonic()
        self._last_line = 0.0
        self._offsets_at_start = sum(_left(p) for p in parts)

    def _numbers(self, parts: Sequence[RestoreState]) -> tuple[int, int, float, float, float | None]:
        records = sum(p.records for p in parts)
        left = sum(_left(p) for p in parts)
        elapsed = max(1e-6, time.monotonic() - self._started)
        megabytes = sum(p.record_bytes for p in parts) / 1e6 / elapsed
        done = self._offsets_at_start - left
        eta = left * elapsed / done if done > 0 else None
        return records, left, records / elapsed, megabytes, eta

    def update(self, parts: Sequence[RestoreState]) -> None:
        records, left, rate, megabytes, eta = self._numbers(parts)
        if self._tty:
            total = max(1, self._offsets_at_start)
            share = (total - left) / total
            bar = "#" * int(share * 30)
            when = "-" if eta is None else f"{eta:.0f}s"
            sys.stderr.write(
                f"\r[{bar:<30}] {share:6.1%} {records} records {rate:,.0f}/s {megabytes:.1f} MB/s ETA {when}  "
            )
            sys.stderr.flush()
            return
        now = time.monotonic()
        if now - self._last_line < PROGRESS_EVERY_S:
            return
        self._last_line = now
        fields = {
            "records": records,
            "offsets_left": left,
            "records_per_s": round(rate),
            "mb_per_s": round(megabytes, 2),
            "eta_s": None if eta is None else round(eta),
        }
        log_event(log, logging.INFO, "restoring", **fields)

    def finish(self, parts: Sequence[RestoreState]) -> None:
        if self._tty:
            sys.stderr.write("\n")


def _left(part: RestoreState) -> int:
    return part.end - (part.position if part.position is not None else part.first)


class RestoreMetrics:
    """The series `run` exports, one set per restored partition, labelled cluster="archive", topic and
    partition of the archived chain, and destination (the topic restored into). The source offsets are the
    archive's: log start is the range's first offset, end its end, lag the offsets still to restore."""

    def __init__(self, families: MetricFamilies) -> None:
        self._families = families
        self._mirrors: dict[str, MirrorMetrics] = {}

    def of(self, part: RestoreState) -> MirrorMetrics:
        """The partition's series, created on first use (so none shows a range of 0 before its destination is
        open)."""
        found = self._mirrors.get(part.name)
        if found is None:
            found = MirrorMetrics.for_mirror(self._families, ARCHIVE_CLUSTER, part.archived, part.partition, part.topic)
            # A restore has no flush timer and no source transaction to wait for: it configures neither limit
            # (an exported 0 would read as "flushes are always late").
            self._mirrors[part.name] = found
        return found

    def opened(self, part: RestoreState) -> None:
        metrics = self.of(part)
        metrics.source_log_start.set(part.first)
        self._position(part, metrics)

    def retrying(self, part: RestoreState, attempt: int) -> None:
        self.of(part).inflight_retry.set(attempt)

    def produced(self, part: RestoreState, item: ProducedRange) -> None:
        metrics = self.of(part)
        metrics.records.inc(item.records)
        metrics.bytes.inc(item.record_bytes)
        metrics.flushes.inc()
        metrics.last_flush.set(time.time())
        metrics.gap_records.inc(item.last - item.first + 1 - item.records)
        metrics.staging_retries.inc(item.retries)
        self._position(part, metrics)

    @staticmethod
    def _position(part: RestoreState, metrics: MirrorMetrics) -> None:
        position = part.position if part.position is not None else part.first
        metrics.offset_verified.set(position)
        metrics.source_lag.set(part.end - position)
