"""bench.latency's pure helpers: percentiles, the rate pacer, the time-stamped values, read ranges."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from bench.latency import (
    TIME_DIGITS,
    Pacer,
    SparkRead,
    Spread,
    encode_value,
    latency_slices,
    parse_flush,
    percentile,
    produce_times_us,
    read_ranges,
    spark_reads,
)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 1001)]  # 1..1000
    assert percentile(values, 50) == 500
    assert percentile(values, 99) == 990
    assert percentile(values, 99.9) == 999
    assert percentile(values, 100) == 1000
    assert percentile(values, 0) == 1
    assert percentile([7.0], 99.9) == 7.0
    assert percentile([1.0, 2.0], 50) == 1.0
    assert percentile([1.0, 2.0], 51) == 2.0


def test_percentile_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_spread() -> None:
    spread = Spread.of([3.0, 1.0, 2.0, 4.0])
    assert (spread.count, spread.min, spread.p50, spread.max, spread.mean) == (4, 1.0, 2.0, 4.0, 2.5)


def test_pacer_is_steady_and_capped() -> None:
    pacer = Pacer(5000, total=50_000)
    assert pacer.due(0) == 0
    assert pacer.due(-1) == 0
    # Every 10 ms tick owes 50 more records.
    ticks = [pacer.due(i * 0.01) for i in range(1, 101)]
    assert [b - a for a, b in zip([0, *ticks], ticks, strict=False)] == [50] * 100
    assert pacer.due(1.0) == 5000
    assert pacer.due(0.0123) == 61  # a late tick catches up at once
    assert pacer.due(3600) == 50_000
    with pytest.raises(ValueError):
        Pacer(0, 1)


def test_values_carry_their_produce_time() -> None:
    values = [encode_value(1_712_345_678_123_456, b"x" * 8), encode_value(12, memoryview(b"abc"))]
    assert values[0][:TIME_DIGITS] == b"1712345678123456"
    assert len(values[0]) == TIME_DIGITS + 8
    assert produce_times_us(pa.chunked_array([pa.array(values, pa.binary())])) == [1_712_345_678_123_456, 12]


def test_parse_flush() -> None:
    fields = {
        "ts": "2025-01-02T03:04:05.678Z",
        "from": "10",
        "to": "19",
        "count": "10",
        "bytes": "1234",
        "elapsed_ms": "12",
        "interval_ms": "1003",
        "trigger": "max-time",
    }
    flush = parse_flush(fields)
    assert (flush.first, flush.last, flush.elapsed_ms, flush.interval_ms, flush.trigger) == (
        10,
        19,
        12,
        1003,
        "max-time",
    )
    assert flush.logged_at == pytest.approx(1735787045.678)


def read(began: float, rows: int) -> SparkRead:
    return SparkRead(began, began + 0.05, began + 0.2, began + 0.25, rows)


def test_read_ranges_follow_the_order_reads_began() -> None:
    ranges = read_ranges([read(2.0, 5), read(1.0, 100), read(3.0, 0), read(4.0, 1)])
    assert [(first, last, r.began) for first, last, r in ranges] == [(0, 99, 1.0), (100, 104, 2.0), (105, 105, 4.0)]


def event(kind: str, **fields: object) -> str:
    return json.dumps({"Event": kind, **fields})


def task_end(stage: int, rows: int) -> str:
    accumulables = [
        {"ID": 1, "Name": "number of output rows", "Update": str(rows)},
        {"ID": 2, "Name": "number of output rows", "Update": str(rows)},  # the same rows, counted twice
        {"ID": 3, "Name": "duration", "Update": "5"},
    ]
    return event("SparkListenerTaskEnd", **{"Stage ID": stage, "Task Info": {"Accumulables": accumulables}})


def test_spark_reads_from_an_event_log() -> None:
    sql = "org.apache.spark.sql.execution.ui.SparkListenerSQLExecution"
    lines = [
        event("SparkListenerApplicationStart"),
        event(sql + "Start", executionId=0, rootExecutionId=0, time=10_000),
        event(sql + "Start", executionId=1, rootExecutionId=0, time=10_010),  # planning, no job
        event(sql + "End", executionId=1, time=10_020),
        event(
            "SparkListenerJobStart",
            **{"Job ID": 0, "Submission Time": 10_100, "Stage IDs": [0], "Properties": {"spark.sql.execution.id": "0"}},
        ),
        task_end(0, 30),
        task_end(0, 12),  # two tasks
        event("SparkListenerJobEnd", **{"Job ID": 0, "Completion Time": 10_400}),
        event(sql + "End", executionId=0, time=10_450),
        event(sql + "Start", executionId=2, rootExecutionId=2, time=11_000),
        event(
            "SparkListenerJobStart",
            **{"Job ID": 1, "Submission Time": 11_050, "Stage IDs": [1], "Properties": {"spark.sql.execution.id": "2"}},
        ),
        task_end(1, 7),
        event("SparkListenerJobEnd", **{"Job ID": 1, "Completion Time": 11_200}),
        event(sql + "End", executionId=2, time=11_210),
    ]
    reads = spark_reads(lines)
    assert reads == [SparkRead(10.0, 10.1, 10.4, 10.45, 42), SparkRead(11.0, 11.05, 11.2, 11.21, 7)]
    assert reads[0].seconds == pytest.approx(0.45)


def test_latency_slices_group_by_produce_time() -> None:
    start = 1_000_000_000
    produced = [start, start + 9_999_999, start + 10_000_000, start + 35_000_000]
    slices = latency_slices(produced, [1.0, 2.0, 3.0, 4.0], start, 40)
    assert [(at, spread.count, spread.max) for at, spread in slices] == [(0.0, 2, 2.0), (10.0, 1, 3.0), (30.0, 1, 4.0)]
    # A record of the final tick, just past a 30 s window, counts in its last slice.
    slices = latency_slices(produced, [1.0, 2.0, 3.0, 4.0], start, 30)
    assert [(at, spread.count) for at, spread in slices] == [(0.0, 2), (10.0, 1), (20.0, 1)]
