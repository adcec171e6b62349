"""A verify task over a filesystem chain staged by the real task code, against a fake source: file checks and the
record comparison."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.records import KAFKA_SCHEMA
from sinks.blob.chain import BlobRange, blob_name
from sinks.blob.writer import stage_blobs
from sinks.filesystem.reading import FilesystemBlobReader
from sinks.filesystem.store import FilesystemStaging
from sinks.write_target import BlobLimits, TaskRange
from tests.fakes import FakeConsumer, FakePartitionSource
from workers.verify_task import SliceCheck, check_slice


def archive(source: FakePartitionSource, directory: Path, end: int, per_blob: int) -> tuple[BlobRange, ...]:
    """Stage [0, end) as blobs of `per_blob` offsets and publish them under their names."""
    staging = FilesystemStaging(str(directory))
    staged = stage_blobs(source.reader(), TaskRange(0, 0, end), BlobLimits(10**12, per_blob), staging)
    for blob in staged:
        (directory / blob.ref).rename(directory / blob_name(blob.first, blob.last))
    return tuple(BlobRange(b.first, b.last) for b in staged)


def check(
    source: FakePartitionSource, directory: Path, blobs: tuple[BlobRange, ...], check_from: int = 0
) -> SliceCheck:
    reader = FilesystemBlobReader(str(directory))
    return check_slice(source.partition_spec(), blobs, reader, check_from, source.end, 10, FakeConsumer(source))


def test_an_exact_archive_with_holes_is_equal_and_its_files_are_sound(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300, holes_every=7)
    blobs = archive(source, tmp_path, 300, 100)
    result = check(source, tmp_path, blobs)
    assert result.problems == ()
    assert result.comparison.ok and result.comparison.equal == len(source.records)
    assert result.comparison.holes == 300 - len(source.records)


def test_a_changed_value_a_removed_and_a_duplicated_record_are_named(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300)
    blobs = archive(source, tmp_path, 300, 100)
    path = tmp_path / blobs[1].name
    table = pq.read_table(path)
    rows = table.to_pylist()
    rows[5]["value"] = b"tampered"  # offset 105
    del rows[10]  # offset 110
    rows.insert(20, dict(rows[20]))  # offset 121, twice
    pq.write_table(pa.Table.from_pylist(rows, schema=KAFKA_SCHEMA), path)
    result = check(source, tmp_path, blobs)
    assert [(d.offset, d.kind, d.fields) for d in result.comparison.differences] == [
        (105, "different", ("value",)),
        (110, "missing", ()),
        (121, "duplicate", ()),
    ]
    assert any(f"{path}: offset 121 comes after 121" in p for p in result.problems), result.problems


def test_files_below_the_source_log_start_are_checked_but_not_compared(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300)
    blobs = archive(source, tmp_path, 300, 100)
    (tmp_path / blobs[0].name).write_bytes(b"not parquet")
    source.delete_before(150)
    result = check(source, tmp_path, blobs, check_from=150)
    assert (result.comparison.first, result.comparison.equal) == (150, 150)
    assert len(result.problems) == 1 and "not a readable Parquet file" in result.problems[0]
