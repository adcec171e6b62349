"""Reading an archived chain back: records of a range as producible messages, the survey's counts and first hole,
and files that are not what their names promise."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.records import KAFKA_SCHEMA
from sinks.filesystem.reading import FilesystemBlobReader
from tests.fakes import FakePartitionSource
from tests.test_verify_task import archive
from workers.archive_records import (
    ArchiveReadError,
    first_stamped_at_or_after,
    read_archived,
    records_of_batch,
    survey_archived,
)


def test_a_range_across_blobs_comes_back_in_order_with_every_field(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300, holes_every=7)
    source.records[3].headers = [("h", None), ("h", b"1")]
    blobs = archive(source, tmp_path, 300, 100)
    messages = [m for batch in read_archived(FilesystemBlobReader(str(tmp_path)), blobs, 50, 250) for m in batch]
    assert [m.offset() for m in messages] == [o for o in range(50, 250) if o in source.records]
    first = read_archived(FilesystemBlobReader(str(tmp_path)), blobs, 3, 4)
    (only,) = next(first)
    record = source.records[3]
    assert (only.key(), only.value(), only.headers()) == (record.key, record.value, [("h", None), ("h", b"1")])
    assert only.timestamp() == (1, record.timestamp_ms)  # CreateTime, in librdkafka's numbering


def test_the_survey_counts_records_and_finds_the_first_hole(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300, holes_every=50)  # holes at 49, 99, ...
    blobs = archive(source, tmp_path, 300, 100)
    reader = FilesystemBlobReader(str(tmp_path))
    found = survey_archived(reader, blobs, 10, 260)
    assert (found.records, found.holes, found.first_hole) == (245, 5, 49)
    assert survey_archived(reader, blobs, 0, 49).first_hole is None
    assert survey_archived(reader, blobs, 100, 149).holes == 0


def test_the_survey_notes_each_schema_id_the_records_carry_with_its_first_offset(tmp_path: Path) -> None:
    """What a restore with `schemas` must find documents of before it writes: read column-wise, keys and values
    apart; null, short and unframed data carry none."""
    source = FakePartitionSource()
    source.append(300)
    for offset, record in source.records.items():
        framed = b"\x00" + (7 if offset < 150 else 9).to_bytes(4, "big") + b"payload"
        value = framed if offset % 10 else (None if offset % 20 else b"\x00\x00")  # every tenth: null or short
        source.records[offset] = dataclasses.replace(
            record, key=b"\x00\x00\x00\x00\x03" if offset == 42 else b"k", value=value
        )
    blobs = archive(source, tmp_path, 300, 100)
    reader = FilesystemBlobReader(str(tmp_path))
    found = survey_archived(reader, blobs, 0, 300, ("key", "value"))
    assert found.schema_ids == (("key", 3, 42), ("value", 7, 1), ("value", 9, 151))
    assert survey_archived(reader, blobs, 160, 300, ("value",)).schema_ids == (("value", 9, 161),)
    assert survey_archived(reader, blobs, 0, 300).schema_ids == ()  # without `schemas`: not read


def test_holes_at_the_end_of_a_range_are_found(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300)
    for offset in range(295, 300):  # the range ends in transaction markers, say
        del source.records[offset]
    blobs = archive(source, tmp_path, 300, 100)
    found = survey_archived(FilesystemBlobReader(str(tmp_path)), blobs, 200, 300)
    assert (found.records, found.holes, found.first_hole) == (95, 5, 295)


def test_times_become_the_first_offsets_stamped_at_or_after_them(tmp_path: Path) -> None:
    source = FakePartitionSource()
    source.append(300, holes_every=50)
    for offset, record in source.records.items():
        record.timestamp_ms = 1_000 * offset
    source.records[120].timestamp_ms = 999_000  # stamped out of order: offsets-for-times finds it first
    blobs = archive(source, tmp_path, 300, 100)
    reader = FilesystemBlobReader(str(tmp_path))
    assert first_stamped_at_or_after(reader, blobs, 0, 300, (47_500, 200_000, None)) == (48, 120, None)
    assert first_stamped_at_or_after(reader, blobs, 0, 300, (49_000,)) == (50,)  # 49 is a hole
    assert first_stamped_at_or_after(reader, blobs, 130, 300, (200_000, 1_000_000)) == (200, None)
    assert first_stamped_at_or_after(reader, blobs, 0, 100, (150_000,)) == (None,)  # found only outside the range


@pytest.mark.parametrize(
    ("misplaced", "problem"),
    [
        ({5: 7}, "holds offset 7, outside its name's range"),  # 7 belongs to the first blob
        ({5: 104, 9: 150}, "offset 104 comes after 104"),  # 104 twice, then one out of order: the first is named
    ],
)
def test_a_file_whose_offsets_are_out_of_place_is_named_at_the_first(
    tmp_path: Path, misplaced: dict[int, int], problem: str
) -> None:
    source = FakePartitionSource()
    source.append(200)
    blobs = archive(source, tmp_path, 200, 100)
    path = tmp_path / blobs[1].name
    rows = pq.read_table(path).to_pylist()
    for row, offset in misplaced.items():
        rows[row]["offset"] = offset
    pq.write_table(pa.Table.from_pylist(rows, schema=KAFKA_SCHEMA), path)
    reader = FilesystemBlobReader(str(tmp_path))
    for read in (lambda: list(read_archived(reader, blobs, 0, 200)), lambda: survey_archived(reader, blobs, 0, 200)):
        with pytest.raises(ArchiveReadError) as caught:
            read()
        assert caught.value.location == str(path) and caught.value.problem == problem


def test_only_the_rows_inside_the_range_become_messages_as_verify_reads_the_rows(tmp_path: Path) -> None:
    """restore's messages (built column-wise) and verify's records (`records_of_batch`) of the same rows agree."""
    source = FakePartitionSource()
    source.append(300, holes_every=50)
    for offset in (96, 150, 204):
        source.records[offset].headers = [("h", None), ("k", b"v")]
    blobs = archive(source, tmp_path, 300, 100)
    reader = FilesystemBlobReader(str(tmp_path))
    messages = [m for batch in read_archived(reader, blobs, 95, 205) for m in batch]
    rows = [
        record
        for blob in blobs
        for batch in pq.ParquetFile(tmp_path / blob.name).iter_batches()
        for record in records_of_batch(batch)
        if 95 <= record.offset < 205
    ]
    assert (
        [m.offset() for m in messages] == [r.offset for r in rows] == [o for o in range(95, 205) if o in source.records]
    )
    for message, row in zip(messages, rows, strict=True):
        assert (message.key(), message.value()) == (row.key, row.value)
        assert message.headers() == (None if row.headers is None else list(row.headers))
        assert message.timestamp() == (row.timestamp_type + 1, row.timestamp_ms)
    assert messages[1].headers() == [("h", None), ("k", b"v")]
