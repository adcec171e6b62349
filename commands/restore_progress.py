"""How a restore reports where it is: on stderr for the person who started it (`restored_so_far`, shown by
`commands.job_progress` as every long command's progress is), and as the Prometheus series of `run` for the
monitoring that watches it (`RestoreMetrics`).

Both read the same per-partition facts (`RestoreState`): the archived range [first, end), the next archived
offset the destination holds (`position`), and what this run produced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from commands.job_progress import JobTasks
from sinks.kafka.produce import ProducedRange
from telemetry.metrics import MetricFamilies, MirrorMetrics

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


def restored_so_far(parts: Sequence[RestoreState]) -> Callable[[], JobTasks]:
    """What the restore of `parts` has done since now: the offsets produced of those left to produce (a rerun's
    total is what was left), with the records and bytes they carried."""
    left_at_start = sum(_left(p) for p in parts)

    def read() -> JobTasks:
        done = left_at_start - sum(_left(p) for p in parts)
        return JobTasks(done, left_at_start, sum(p.records for p in parts), sum(p.record_bytes for p in parts))

    return read


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
