"""Micro benchmarks of the mirror's hot pure functions, timed by pytest-benchmark.

`python -m bench` runs them (the test suite does not: pyproject's testpaths leave bench/ out). Each records in
`extra_info` how many items (records, flushes planned, blob names) one call handles, for the time per item.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

import pyarrow as pa
import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from core.messages import RecordColumns, message_bytes
from core.records import KAFKA_SCHEMA, conform, encode_parquet
from sinks.blob.chain import BlobRange, blob_name, find_tail
from sinks.blob.staging import StagedBlob
from workers.flush_planner import Backlog, FlushLimits, FlushPlanner

T = TypeVar("T")
ROWS = 20_000
SIZES = [pytest.param(100, id="100B"), pytest.param(1024, id="1KiB")]


def records(rows: int, value_size: int, first: int = 0) -> pa.Table:
    """`rows` records as the mirror holds them: random values, 8-byte keys, no headers."""
    payload = os.urandom(rows * value_size)
    return pa.table(
        {
            "key": [b"%08x" % i for i in range(rows)],
            "value": [payload[i * value_size : (i + 1) * value_size] for i in range(rows)],
            "topic": ["bench"] * rows,
            "partition": [0] * rows,
            "offset": range(first, first + rows),
            "timestamp": pa.array(range(rows), pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "timestampType": [0] * rows,
            "headers": [[]] * rows,
        },
        schema=KAFKA_SCHEMA,
    )


def test_flush_planning(benchmark: BenchmarkFixture) -> None:
    """Planning and learning from 10,000 consecutive flushes through a backlog whose record size drifts."""
    limits = FlushLimits(1_000_000, 128 * 1024 * 1024, 10.0, 500_000, 64 * 1024 * 1024, 2_000_000, 256 * 1024 * 1024)

    def plan_all() -> int:
        planner, first = FlushPlanner(limits), 0
        for i in range(10_000):
            backlog = Backlog(first, first, first + 5_000_000, 0.0, float(i), i % 7 == 0, 2)
            plan = planner.plan(backlog)
            assert plan is not None
            planner.observe(plan.end - first, (plan.end - first) * (100 + i % 900), plan.end - first)
            first = plan.end
        return first

    benchmark.extra_info["items"] = 10_000
    benchmark(plan_all)


class Message:
    """The parts of a librdkafka message the task's column builder reads."""

    def __init__(self, offset: int, key: bytes, value: bytes) -> None:
        self._offset, self._key, self._value = offset, key, value

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000 + self._offset)

    def headers(self) -> list[tuple[str, bytes]] | None:
        return [("trace-id", self._key)] if self._offset % 2 else None


@pytest.mark.parametrize("value_size", SIZES)
def test_record_columns(benchmark: BenchmarkFixture, value_size: int) -> None:
    """A task's one-pass Arrow build: 20,000 messages (half with a header) into one record batch."""
    payload = os.urandom(ROWS * value_size)
    messages = [Message(i, b"%08x" % i, payload[i * value_size : (i + 1) * value_size]) for i in range(ROWS)]

    def build() -> int:
        columns = RecordColumns("bench", 0)
        for message in messages:
            columns.add(message, message_bytes(message))
        return int(columns.take().num_rows)

    benchmark.extra_info["items"] = ROWS
    assert benchmark(build) == ROWS


@pytest.mark.parametrize("value_size", SIZES)
def test_conform(benchmark: BenchmarkFixture, value_size: int) -> None:
    """A read's Arrow table, columns in another order and with schema metadata, brought to KAFKA_SCHEMA."""
    table = records(ROWS, value_size)
    shuffled = table.select(list(reversed(table.column_names))).replace_schema_metadata({"spark": "x"})
    benchmark.extra_info["items"] = ROWS
    assert benchmark(conform, shuffled).schema.equals(KAFKA_SCHEMA)


@pytest.mark.parametrize("value_size", SIZES)
def test_encode_parquet(benchmark: BenchmarkFixture, value_size: int) -> None:
    """A chunk encoded as the blob the mirror writes (zstd, the destination's default codec)."""
    table = records(ROWS, value_size)
    benchmark.extra_info["items"] = ROWS
    benchmark(encode_parquet, table, "zstd", None)


class SortedStore:
    """A BlobStore over a sorted list of names whose listing is a bisect: the benchmark times find_tail."""

    checks_for_foreign_blobs = False

    def __init__(self, names: list[str]) -> None:
        self.names, self.listings = names, 0

    def location(self, name: str) -> str:
        return f"mem://{name}"

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        self.listings += 1
        first = 0 if start_after is None else bisect.bisect_right(self.names, start_after)
        return self.names[first : first + max_keys], first + max_keys < len(self.names)

    async def modified_at(self, name: str) -> float | None:
        return None

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        raise NotImplementedError

    async def discard_staged(self, staged: StagedBlob) -> None:
        raise NotImplementedError

    async def interrupted_commit(self, after: str | None) -> str | None:
        return None

    async def clean_leftovers(self) -> list[str]:
        return []

    async def close(self) -> None:
        pass


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the store answers at once) without an event loop's overhead."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    raise RuntimeError("the coroutine suspended")


@pytest.mark.parametrize("blobs", [pytest.param(10_000, id="10k"), pytest.param(1_000_000, id="1M")])
def test_find_tail(benchmark: BenchmarkFixture, blobs: int) -> None:
    """The tail of a chain of `blobs` one-record blobs, found with a bounded number of listings."""
    store = SortedStore([blob_name(offset, offset) for offset in range(blobs)])
    assert run_sync(find_tail(store))[-1] == BlobRange(blobs - 1, blobs - 1)
    benchmark.extra_info.update(items=blobs, listings=store.listings)
    benchmark(lambda: run_sync(find_tail(store)))
