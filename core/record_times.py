"""Record timestamps of a written range, summarised small enough to travel back from a Spark task.

The driver never sees the records, yet replication latency (record timestamp to durable commit) is a
per-record measure. A task therefore measures each record's age when it finishes writing and sends
back a histogram of those ages on a logarithmic scale (four buckets per doubling, so a bucket's width
is 19 % of its value). At commit the driver adds the time that passed since the task measured and
has every record's latency to within that width, whatever the number of records: the summary holds
at most one count per bucket in use (about 140 for ages from 1 ms to a year).

Records without a timestamp (-1) are left out. A timestamp in the future (producer clocks drift)
counts as age 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

BUCKETS_PER_DOUBLING = 4
_ZERO = -1  # the bucket of ages below 1 ms
SMALL = 64  # up to this many timestamps, measured by a Python loop


@dataclass(frozen=True)
class RecordTimes:
    measured_at_ms: int  # the task's wall clock when it measured the ages
    ages: tuple[tuple[int, int], ...] = ()  # (bucket, records), bucket i holding ages in [2^(i/4), 2^((i+1)/4)) ms
    last_timestamp_ms: int | None = None  # the timestamp of the range's last record (by offset)

    @staticmethod
    def measure(timestamps_ms: npt.NDArray[np.int64] | Sequence[int], measured_at_ms: int) -> RecordTimes:
        """The summary of `timestamps_ms` (in offset order) as of `measured_at_ms`. O(n): a Python loop up to
        SMALL records (a steady partition's blob holds a few: numpy's dozen calls cost 20 µs, the loop 2-3), else
        vectorised."""
        if len(timestamps_ms) <= SMALL:
            return _measure_few(list(timestamps_ms), measured_at_ms)
        stamped = np.asarray(timestamps_ms, dtype=np.int64)
        stamped = stamped[stamped >= 0]
        if not len(stamped):
            return RecordTimes(measured_at_ms)
        ages = measured_at_ms - stamped
        buckets = np.full(len(ages), _ZERO, dtype=np.int64)
        positive = ages >= 1
        buckets[positive] = np.floor(np.log2(ages[positive]) * BUCKETS_PER_DOUBLING).astype(np.int64)
        found, counts = np.unique(buckets, return_counts=True)
        return RecordTimes(
            measured_at_ms,
            tuple((int(bucket), int(count)) for bucket, count in zip(found, counts, strict=True)),
            int(stamped[-1]),
        )

    def encode(self) -> str:
        """For a task's result row."""
        return msgspec.json.encode([self.measured_at_ms, self.ages, self.last_timestamp_ms]).decode()

    @staticmethod
    def decode(text: str | None) -> RecordTimes | None:
        if not text:
            return None
        measured_at, ages, last = msgspec.json.decode(text, type=tuple[int, list[tuple[int, int]], int | None])
        return RecordTimes(measured_at, tuple(ages), last)

    @property
    def records(self) -> int:
        return sum(count for _, count in self.ages)

    def latencies(self, committed_at_ms: int) -> Iterator[tuple[float, int]]:
        """(latency in seconds, records) per bucket, for records made durable at `committed_at_ms`: the
        bucket's geometric middle plus the time since the task measured."""
        waited_ms = max(0, committed_at_ms - self.measured_at_ms)
        for bucket, count in self.ages:
            age_ms = 0.0 if bucket == _ZERO else 2 ** ((bucket + 0.5) / BUCKETS_PER_DOUBLING)
            yield (age_ms + waited_ms) / 1000, count


def _measure_few(timestamps_ms: list[int], measured_at_ms: int) -> RecordTimes:
    """`RecordTimes.measure` of a few timestamps, bucketed as the vectorised path does (the same formula over the same
    integer ages; both log2s are exact at powers of two, the only integer bucket bounds, and should they ever round
    apart elsewhere, a record would count in the neighbouring bucket: 19 % off, not lost)."""
    counts: dict[int, int] = {}
    last: int | None = None
    for stamp in timestamps_ms:
        if stamp < 0:
            continue
        last = stamp
        age = measured_at_ms - stamp
        bucket = math.floor(math.log2(age) * BUCKETS_PER_DOUBLING) if age >= 1 else _ZERO
        counts[bucket] = counts.get(bucket, 0) + 1
    if last is None:
        return RecordTimes(measured_at_ms)
    return RecordTimes(measured_at_ms, tuple(sorted(counts.items())), int(last))
