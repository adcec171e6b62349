"""Record timestamps travel back from a task as a small log-scale summary; latencies come out within a bucket."""

from __future__ import annotations

import numpy as np

from core.record_times import SMALL, RecordTimes


def test_latencies_are_within_a_bucket_of_the_truth_and_include_the_wait_until_commit() -> None:
    now = 1_700_000_000_000
    ages_ms = np.array([0, 5, 5, 1_000, 60_000, 3_600_000], dtype=np.int64)
    times = RecordTimes.measure(now - ages_ms, now)
    assert times.records == 6
    assert times.last_timestamp_ms == now - 3_600_000
    found = sorted(times.latencies(committed_at_ms=now + 2_000))
    expected = sorted((age + 2_000) / 1000 for age in ages_ms.tolist())
    assert sum(count for _, count in found) == 6
    flat = [seconds for seconds, count in found for _ in range(count)]
    for got, want in zip(flat, expected, strict=True):
        assert abs(got - want) <= 0.1 * want + 0.001, (got, want)


def test_records_without_timestamp_are_left_out_and_future_ones_count_as_zero() -> None:
    now = 1_000_000
    times = RecordTimes.measure(np.array([-1, now + 5_000, now - 10], dtype=np.int64), now)
    assert times.records == 2
    assert min(seconds for seconds, _ in times.latencies(now)) == 0.0
    assert RecordTimes.measure(np.array([-1], dtype=np.int64), now) == RecordTimes(now)


def test_the_summary_stays_small_however_many_records() -> None:
    now = 2_000_000_000_000
    rng = np.random.default_rng(7)
    stamps = now - rng.integers(0, 365 * 86_400_000, size=200_000)
    times = RecordTimes.measure(stamps.astype(np.int64), now)
    assert times.records == 200_000 and len(times.ages) <= 4 * 35
    assert RecordTimes.decode(times.encode()) == times
    assert RecordTimes.decode(None) is None


def test_a_few_timestamps_are_measured_as_many_are() -> None:
    """Up to SMALL timestamps take a Python loop, more the vectorised path: the same buckets either way, at
    powers of two too (where a bucket bound is an integer)."""
    now = 1_800_000_000_000
    rng = np.random.default_rng(11)
    ages = [0, 1, 2, 3, 4, 1024, 1023, 1025, 65_536, -3_000, *rng.integers(0, 10**9, size=40).tolist()]
    stamps = [-1, *(now - age for age in ages)]
    few = RecordTimes.measure(stamps, now)
    padded = RecordTimes.measure(np.array(stamps * 3, dtype=np.int64), now)  # over SMALL: vectorised
    assert len(stamps) <= SMALL < len(stamps) * 3
    assert few.last_timestamp_ms == padded.last_timestamp_ms == stamps[-1]
    assert [(bucket, count * 3) for bucket, count in few.ages] == list(padded.ages)
    assert RecordTimes.measure([-1, -1], now) == RecordTimes(now)
