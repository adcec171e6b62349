"""verify's window-by-window comparison of an archive with its source (`workers.archive_comparison`): whatever the
archive holds, its counts and differences are exactly those of the record-by-record comparison of the whole range,
and an exact archive is compared column-wise, without a record built in Python."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.messages import RecordColumns
from core.records import KAFKA_SCHEMA
from sinks.blob.chain import BlobRange, blob_name
from sinks.filesystem.reading import FilesystemBlobReader
from tests.fakes import FakeConsumer, FakeMessage, FakePartitionSource, FakeRecord
from workers import record_comparison
from workers.archive_records import records_of_batch
from workers.record_comparison import Comparison, Record, compare_range, records_of_messages
from workers.verify_task import check_slice

HEADERS: list[list[tuple[str, bytes | None]]] = [
    [],
    [("h", b"1")],
    [("h", b"1"), ("h", None)],
    [("a", b""), ("b", b"x")],
]


def varied_source(rng: random.Random, count: int) -> FakePartitionSource:
    """Null keys and values, headers with duplicates and nulls, both timestamp types, holes."""
    source = FakePartitionSource()
    for offset in range(count):
        if rng.random() < 0.1:
            continue
        source.records[offset] = FakeRecord(
            offset,
            None if rng.random() < 0.1 else b"k%d" % rng.randrange(50),
            None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 40)),
            list(rng.choice(HEADERS)),
            1_700_000_000_000 + rng.randrange(10**6),
            rng.choice((1, 2)),
        )
    source.end = count
    return source


def archive(
    source: FakePartitionSource, directory: Path, per_blob: int, rng: random.Random, tampered: bool = True
) -> list[BlobRange]:
    """The source's records as blobs of `per_blob` offsets, written as a mirror writes them (RecordColumns), each
    row as a dict so that (`tampered`) the rows can be changed at random before the files are written."""
    blobs = []
    for first in range(0, source.end, per_blob):
        last = min(first + per_blob, source.end) - 1
        columns = RecordColumns(source.topic, source.partition)
        for offset in range(first, last + 1):
            if offset in source.records:
                columns.add(FakeMessage(source.records[offset]), 0)
        blobs.append((BlobRange(first, last), columns.take().to_pylist()))
    if tampered:
        tamper(rng, blobs)
    for blob, rows in blobs:
        table = pa.Table.from_pylist(rows, schema=KAFKA_SCHEMA)
        pq.write_table(table, directory / blob_name(blob.first, blob.last), row_group_size=rng.choice((3, 7, 50)))
    return [blob for blob, _ in blobs]


def tamper(rng: random.Random, blobs: list[tuple[BlobRange, list[dict[str, Any]]]]) -> None:
    for _ in range(rng.choice((0, 0, 1, 3, 8))):
        blob, rows = rng.choice(blobs)
        if not rows:
            continue
        at = rng.randrange(len(rows))
        row = rows[at]
        match rng.randrange(11):
            case 0:
                row["value"] = b"tampered"
            case 1:
                row["key"] = None if row["key"] is not None else b"k"
            case 2:
                row["headers"] = None if row["headers"] else []
            case 3:
                row["headers"] = [{"key": "h", "value": None}, *(row["headers"] or [])]
            case 4:
                row["timestamp"] = row["timestamp"].replace(microsecond=(row["timestamp"].microsecond + 1000) % 10**6)
            case 5:
                row["timestampType"] = 1 - row["timestampType"]
            case 6:
                del rows[at]
            case 7:
                rows.insert(at, dict(row))  # twice
            case 8:
                if at + 1 < len(rows):
                    rows[at], rows[at + 1] = rows[at + 1], rows[at]
            case 9:
                row["offset"] = blob.last + 1 + rng.randrange(5)  # outside the name's range
            case 10:
                row["timestamp"] = row["timestamp"].replace(
                    microsecond=(row["timestamp"].microsecond // 1000) * 1000 + 7
                )


def reference(source: FakePartitionSource, directory: Path, blobs: list[BlobRange], first: int, end: int) -> Comparison:
    """The record-by-record comparison of the whole range: every archived row, in the chain's order."""
    archived: list[Record] = []
    for blob in blobs:
        for batch in pq.ParquetFile(directory / blob_name(blob.first, blob.last)).iter_batches():
            archived.extend(records_of_batch(batch))
    messages = [FakeMessage(source.records[o]) for o in sorted(source.records) if first <= o < end]
    return compare_range(records_of_messages([messages]), archived, first, end, max_differences=10**6)


@pytest.mark.parametrize("seed", range(40))
def test_every_window_counts_as_the_record_comparison_of_the_whole_range(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    source = varied_source(rng, rng.randrange(1, 400))
    blobs = archive(source, tmp_path, rng.choice((10, 64, 500)), rng)
    check_from = rng.choice((0, 0, rng.randrange(source.end)))
    source.delete_before(check_from)
    consumer = FakeConsumer(source, batch=rng.choice((1, 5, 64, 1000)))
    reader = FilesystemBlobReader(str(tmp_path))
    found = check_slice(source.partition_spec(), tuple(blobs), reader, check_from, source.end, 10**6, consumer)
    first = min(max(blobs[0].first, check_from), blobs[-1].last + 1)
    assert found.comparison == reference(source, tmp_path, blobs, first, blobs[-1].last + 1)


def test_an_exact_archive_is_compared_without_a_record_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    source = varied_source(rng, 2_000)
    blobs = []
    for first in range(0, 2_000, 500):
        columns = RecordColumns(source.topic, source.partition)
        for offset in range(first, first + 500):
            if offset in source.records:
                columns.add(FakeMessage(source.records[offset]), 0)
        pq.write_table(
            pa.Table.from_batches([columns.take()]), tmp_path / blob_name(first, first + 499), row_group_size=64
        )
        blobs.append(BlobRange(first, first + 499))
    built: list[int] = []
    real = record_comparison.Record

    def counted(*args: Any) -> record_comparison.Record:
        built.append(1)
        return real(*args)

    monkeypatch.setattr(record_comparison, "Record", counted)
    found = check_slice(
        source.partition_spec(), tuple(blobs), FilesystemBlobReader(str(tmp_path)), 0, 2_000, 10, FakeConsumer(source)
    )
    assert found.comparison.ok and found.comparison.equal == len(source.records) and found.problems == ()
    assert built == []


def test_the_schema_ids_the_archive_carries_are_noted_at_their_first_offset(tmp_path: Path) -> None:
    """Values in the registry's wire format (a zero byte, the ID in 4 bytes): each ID with the first offset that
    carries it, files below the compared range included; a value not in the format notes nothing."""
    source = FakePartitionSource()
    for offset in range(300):
        value = b"\x00" + (7 if offset < 150 else 9).to_bytes(4, "big") + b"avro" if offset % 4 else b"plain"
        source.records[offset] = FakeRecord(offset, None, value)
    source.end = 300
    blobs = archive(source, tmp_path, 100, random.Random(0), tampered=False)
    found = check_slice(
        source.partition_spec(),
        tuple(blobs),
        FilesystemBlobReader(str(tmp_path)),
        120,
        300,
        10,
        FakeConsumer(source),
        schema_fields=("value",),
    )
    assert found.schema_ids == ((7, 1), (9, 150))
