"""Arrow rows -> Kafka record batches: byte-for-byte content, batch splitting, the renumber header."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
import pytest
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch

from sinks.kafka_records import (
    SOURCE_OFFSET_HEADER,
    PreparedBatch,
    build_batches,
    first_hole,
    parse_source_offset,
)
from sinks.records import KAFKA_SCHEMA, conform

EPOCH_MS = 1_700_000_000_000


def table(rows: list[dict[str, Any]]) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in KAFKA_SCHEMA.names}
    for row in rows:
        columns["key"].append(row.get("key"))
        columns["value"].append(row.get("value"))
        columns["topic"].append("t")
        columns["partition"].append(0)
        columns["offset"].append(row["offset"])
        millis = row.get("ts", EPOCH_MS)
        columns["timestamp"].append(dt.datetime.fromtimestamp(millis / 1000, tz=dt.UTC))
        columns["timestampType"].append(0)
        columns["headers"].append([{"key": k, "value": v} for k, v in row.get("headers", [])])
    return conform(pa.table(columns))


def decode(batches: list[PreparedBatch]) -> list[tuple[Any, ...]]:
    out = []
    for batch in batches:
        builder = batch.builder
        assert isinstance(builder, BatchBuilder)
        builder._set_producer_state(1, 0, 0)
        for record in DefaultRecordBatch(builder._build()):
            out.append((record.key, record.value, list(record.headers), record.timestamp))
    return out


def new_builder(size: int = 1_000_000, codec: int = 0) -> BatchBuilder:
    return BatchBuilder(size, codec)


def test_content_is_copied_byte_for_byte() -> None:
    rows: list[dict[str, Any]] = [
        {"offset": 10, "key": b"k", "value": b"v", "headers": [("h", b"\x00\xff"), ("n", None)], "ts": EPOCH_MS + 7},
        {"offset": 11, "key": None, "value": b"no key"},
        {"offset": 12, "key": b"tombstone", "value": None},
        {"offset": 13, "key": b"", "value": b"", "headers": [("dup", b"1"), ("dup", b"2")]},
    ]
    batches = build_batches(table(rows), new_builder, add_source_offset=False)
    assert [(b.first_source_offset, b.last_source_offset, b.record_count) for b in batches] == [(10, 13, 4)]
    assert decode(batches) == [
        (b"k", b"v", [("h", b"\x00\xff"), ("n", None)], EPOCH_MS + 7),
        (None, b"no key", [], EPOCH_MS),
        (b"tombstone", None, [], EPOCH_MS),
        (b"", b"", [("dup", b"1"), ("dup", b"2")], EPOCH_MS),
    ]


def test_renumber_appends_the_source_offset_header() -> None:
    rows = [{"offset": 5, "key": b"a", "value": b"1", "headers": [("x", b"y")]}, {"offset": 9, "value": b"2"}]
    decoded = decode(build_batches(table(rows), new_builder, add_source_offset=True))
    assert [headers for _, _, headers, _ in decoded] == [
        [("x", b"y"), (SOURCE_OFFSET_HEADER, b"5")],
        [(SOURCE_OFFSET_HEADER, b"9")],
    ]
    assert [parse_source_offset(headers) for _, _, headers, _ in decoded] == [5, 9]


def test_batches_split_at_the_size_limit_and_keep_order() -> None:
    rows = [{"offset": 100 + i, "key": b"%05d" % i, "value": b"x" * 300} for i in range(1_000)]
    batches = build_batches(table(rows), lambda: new_builder(16 * 1024), add_source_offset=False)
    assert len(batches) > 10
    assert all(b.builder.size() <= 16 * 1024 for b in batches)
    assert batches[0].first_source_offset == 100 and batches[-1].last_source_offset == 1_099
    for previous, current in itertools.pairwise(batches):
        assert current.first_source_offset == previous.last_source_offset + 1
    assert sum(b.record_count for b in batches) == 1_000
    assert [key for key, *_ in decode(batches)] == [b"%05d" % i for i in range(1_000)]


def test_a_record_larger_than_a_batch_gets_a_batch_of_its_own() -> None:
    rows = [{"offset": 0, "value": b"s"}, {"offset": 1, "value": b"L" * 50_000}, {"offset": 2, "value": b"s"}]
    batches = build_batches(table(rows), lambda: new_builder(4 * 1024), add_source_offset=False)
    assert [(b.first_source_offset, b.record_count) for b in batches] == [(0, 1), (1, 1), (2, 1)]
    assert [len(value) for _, value, _, _ in decode(batches)] == [1, 50_000, 1]


def test_compressed_batches_decode_to_the_same_records() -> None:
    rows = [{"offset": i, "key": b"k", "value": b"abc" * 100} for i in range(200)]
    zstd = 4
    batches = build_batches(table(rows), lambda: new_builder(1_000_000, zstd), add_source_offset=False)
    assert decode(batches) == [(b"k", b"abc" * 100, [], EPOCH_MS)] * 200
    assert batches[0].builder.size() < 200 * 300 / 10


def test_empty_table_makes_no_batches() -> None:
    assert build_batches(table([]), new_builder, add_source_offset=True) == []


@pytest.mark.parametrize(
    ("offsets", "first", "last", "hole"),
    [
        ([0, 1, 2], 0, 2, None),
        ([0, 2], 0, 2, (1, 1)),
        ([3, 4], 0, 4, (0, 2)),
        ([0, 1], 0, 5, (2, 5)),
        ([], 7, 9, (7, 9)),
    ],
)
def test_first_hole(offsets: list[int], first: int, last: int, hole: tuple[int, int] | None) -> None:
    assert first_hole(table([{"offset": o, "value": b""} for o in offsets]), first, last) == hole


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(SOURCE_OFFSET_HEADER, b"42")], 42),
        ([("other", b"1"), (SOURCE_OFFSET_HEADER, b"0")], 0),
        ([("other", b"1")], None),
        ([(SOURCE_OFFSET_HEADER, None)], None),
        ([(SOURCE_OFFSET_HEADER, b"not a number")], None),
        (None, None),
    ],
)
def test_parse_source_offset(headers: Any, expected: int | None) -> None:
    assert parse_source_offset(headers) == expected
