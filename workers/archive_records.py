"""Records of an archived chain, read back inside a Spark task (`restore`, `verify`).

A chain's blobs are Parquet files of KAFKA_SCHEMA rows named by their offset range. `read_archived` yields the
records of an offset range as librdkafka-like messages, so the Kafka produce path (`sinks.kafka.produce`) takes
them as it takes a consumer's. `survey_archived` counts what a range holds without producing it: records, holes
(offsets with no record: compaction, transaction markers, aborted records) and the first hole, for `restore
--dry-run` and for the preserve-mode check that must fail before anything is written. `first_stamped_at_or_after`
turns a restore's timestamp bounds into offsets.

Every row is checked as it is read: offsets strictly increasing and inside the range the file's name gives, or
the read fails naming the file. Memory: one blob's bytes and one row group at a time. Cost: each blob of the
range is read whole once (a footer alone would not show where a hole is).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.errors import MirrorV3Error
from core.records import KAFKA_SCHEMA
from sinks.blob.chain import BlobRange
from sinks.blob.reading import BlobReader
from workers.record_comparison import Record


class ArchiveReadError(MirrorV3Error):
    """A blob is not what its name promises (unreadable, another schema, offsets out of place)."""

    def __init__(self, location: str, problem: str) -> None:
        self.location, self.problem = location, problem
        super().__init__(f"{location}: {problem}")


class ArchivedMessage(tuple[int, bytes | None, bytes | None, Any, int, int]):
    """One archived record with the methods of a librdkafka message that producing it needs: (offset, key, value,
    headers, timestamp in ms, librdkafka's timestamp type).

    A tuple built in C (`messages_of_batch`: `tuple.__new__` over the zipped columns), because restore makes one per
    record: a class with an `__init__` cost about 1.5 µs of CPU per record to build (a third of reading a 1 KiB
    archived record back, measured), this about 0.1."""

    __slots__ = ()

    def offset(self) -> int:
        return self[0]

    def key(self) -> bytes | None:
        return self[1]

    def value(self) -> bytes | None:
        return self[2]

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self[3]  # type: ignore[no-any-return]

    def timestamp(self) -> tuple[int, int]:
        return self[5], self[4]


def messages_of_batch(batch: pa.RecordBatch) -> list[ArchivedMessage]:
    """Blob rows (KAFKA_SCHEMA) as messages: each column converted once (the timestamps' units and types in Arrow),
    the records built in one pass in C."""
    stamps_ms = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    # librdkafka's timestamp type ids are one higher than Kafka's, which the archive keeps.
    kinds = pc.add(batch.column("timestampType"), 1).to_pylist()
    headers = batch.column("headers")
    if headers.null_count == len(headers):
        header_lists: list[list[tuple[str, bytes | None]] | None] = [None] * len(headers)
    else:
        header_lists = [
            None if listed is None else [(h["key"], h["value"]) for h in listed] for listed in headers.to_pylist()
        ]
    columns = zip(
        batch.column("offset").to_pylist(),
        batch.column("key").to_pylist(),
        batch.column("value").to_pylist(),
        header_lists,
        stamps_ms,
        kinds,
        strict=True,
    )
    # The collector is held off while the batch's tuples are made: each collection of the youngest generation would
    # walk the tuples made since the last, about 0.6 µs of CPU per record at 131 072 rows (measured), and these hold
    # no cycles (their lists of headers neither).
    paused = gc.isenabled()
    gc.disable()
    try:
        return list(map(tuple.__new__, repeat(ArchivedMessage), columns))  # type: ignore[arg-type]
    finally:
        if paused:
            gc.enable()


def records_of_batch(batch: pa.RecordBatch) -> Iterator[Record]:
    """Blob rows (KAFKA_SCHEMA) as records."""
    columns = batch.to_pydict()
    timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for key, value, offset, timestamp_us, timestamp_type, headers in zip(
        columns["key"],
        columns["value"],
        columns["offset"],
        timestamps,
        columns["timestampType"],
        columns["headers"],
        strict=True,
    ):
        yield Record(
            offset,
            key,
            value,
            None if headers is None else tuple((h["key"], h["value"]) for h in headers),
            timestamp_us // 1000,
            timestamp_type,
        )


def _open(reader: BlobReader, blob: BlobRange) -> pq.ParquetFile:
    where = reader.location(blob.name)
    try:
        parquet = pq.ParquetFile(pa.BufferReader(reader.read(blob.name)))
        schema = parquet.schema_arrow.remove_metadata()
    except (pa.ArrowException, OSError) as exc:
        raise ArchiveReadError(where, f"not a readable Parquet file ({exc})") from None
    if not schema.equals(KAFKA_SCHEMA):
        raise ArchiveReadError(where, f"schema differs from the records' ({schema})")
    return parquet


class _OffsetCheck:
    """Offsets strictly increasing and inside the blob's range, or ArchiveReadError naming the first that is not.
    Column-wise (numpy): no Python work per record."""

    def __init__(self, location: str, blob: BlobRange) -> None:
        self._location, self._blob, self._last = location, blob, blob.first - 1

    def check(self, column: pa.Array) -> np.ndarray:
        """Check the next row group's offset column; returns it as numpy."""
        offsets: np.ndarray = np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
        if len(offsets) == 0:
            return offsets
        previous = np.concatenate(([self._last], offsets[:-1]))
        outside = (offsets < self._blob.first) | (offsets > self._blob.last)
        bad = np.flatnonzero(outside | (offsets <= previous))
        if len(bad):
            first = bad[0]
            if outside[first]:
                raise ArchiveReadError(self._location, f"holds offset {offsets[first]}, outside its name's range")
            raise ArchiveReadError(self._location, f"offset {offsets[first]} comes after {previous[first]}")
        self._last = int(offsets[-1])
        return offsets


def _overlapping(blobs: tuple[BlobRange, ...], first: int, end: int) -> Iterator[BlobRange]:
    return (blob for blob in blobs if blob.last >= first and blob.first < end)


def read_archived(
    reader: BlobReader, blobs: tuple[BlobRange, ...], read_from: int, end: int
) -> Iterator[list[ArchivedMessage]]:
    """The archived records of [read_from, end), in offset order, one list per row group (only the rows inside the
    range are converted: the offsets increase, so they are one slice of it)."""
    for blob in _overlapping(blobs, read_from, end):
        parquet = _open(reader, blob)
        offsets = _OffsetCheck(reader.location(blob.name), blob)
        for batch in parquet.iter_batches():
            checked = offsets.check(batch.column("offset"))
            low, high = (int(i) for i in np.searchsorted(checked, (read_from, end)))
            if low < high:
                yield messages_of_batch(batch.slice(low, high - low))


@dataclass(frozen=True)
class ArchiveSurvey:
    first: int
    end: int  # exclusive
    records: int
    holes: int  # offsets of [first, end) with no record
    first_hole: int | None
    # With `fields`: each schema ID the keys or values carry in the registry's wire format, and the first offset
    # carrying it: (field, schema ID, offset), sorted.
    schema_ids: tuple[tuple[str, int, int], ...] = ()


def survey_archived(
    reader: BlobReader, blobs: tuple[BlobRange, ...], first: int, end: int, fields: tuple[str, ...] = ()
) -> ArchiveSurvey:
    """What [first, end) holds, reading only the offset column of each blob (and the `fields`, "key" or "value",
    whose schema IDs it notes: the five bytes of each, compared column-wise)."""
    records, first_hole, expected = 0, None, first
    schema_ids: dict[tuple[str, int], int] = {}
    for blob in _overlapping(blobs, first, end):
        parquet = _open(reader, blob)
        offsets = _OffsetCheck(reader.location(blob.name), blob)
        for batch in parquet.iter_batches(columns=["offset", *fields]):
            column = batch.column(0)
            offsets.check(column)
            within = pc.and_(pc.greater_equal(column, first), pc.less(column, end))
            inside = pc.filter(column, within)
            if len(inside) == 0:
                continue
            for index, name in enumerate(fields, start=1):
                for schema_id, offset in carried_schema_ids(pc.filter(batch.column(index), within), inside):
                    if (name, schema_id) not in schema_ids:
                        schema_ids[name, schema_id] = offset
            records += len(inside)
            if first_hole is None:
                # The first offset of this batch that is not where a hole-free run would put it.
                positions = pa.array(range(expected, expected + len(inside)), pa.int64())
                mismatch = pc.index(pc.not_equal(inside, positions), True).as_py()
                if mismatch >= 0:
                    first_hole = expected + mismatch
            expected = inside[-1].as_py() + 1
    if first_hole is None and expected < end:
        first_hole = expected
    noted = tuple(sorted((name, schema_id, offset) for (name, schema_id), offset in schema_ids.items()))
    return ArchiveSurvey(first, end, records, (end - first) - records, first_hole, noted)


def carried_schema_ids(data: pa.Array, offsets: pa.Array) -> list[tuple[int, int]]:
    """The schema IDs `data` (keys or values) carries in the wire format (a zero byte, then the ID in 4 bytes, as
    `sinks.schemas.rewrite` reads them), each with the first of `offsets` carrying it."""
    framed = pc.and_(pc.greater_equal(pc.binary_length(data), 5), pc.equal(pc.binary_slice(data, 0, 1), b"\x00"))
    framed = pc.fill_null(framed, False)
    headers = pc.binary_slice(pc.filter(data, framed), 1, 5)
    if len(headers) == 0:
        return []
    carried = pc.filter(offsets, framed)
    found = []
    for header in pc.unique(headers).to_pylist():
        found.append((int.from_bytes(header, "big"), carried[pc.index(headers, header).as_py()].as_py()))
    return found


def first_stamped_at_or_after(
    reader: BlobReader, blobs: tuple[BlobRange, ...], first: int, end: int, times_ms: tuple[int | None, ...]
) -> tuple[int | None, ...]:
    """For each time, the first offset of [first, end) whose record is stamped at or after it (None: no such
    record, or no time), as Kafka's offsets-for-times answers. Reads the offset and timestamp columns only, and
    stops at the first blob after which every time has its offset."""
    found: list[int | None] = [None] * len(times_ms)
    wanted = [index for index, time_ms in enumerate(times_ms) if time_ms is not None]
    for blob in _overlapping(blobs, first, end):
        if not wanted:
            break
        parquet = _open(reader, blob)
        offsets = _OffsetCheck(reader.location(blob.name), blob)
        for batch in parquet.iter_batches(columns=["offset", "timestamp"]):
            column = batch.column(0)
            offsets.check(column)
            inside = pc.and_(pc.greater_equal(column, first), pc.less(column, end))
            stamps_us = batch.column(1).cast(pa.int64())
            for index in list(wanted):
                time_ms = times_ms[index]
                assert time_ms is not None
                hit = pc.index(pc.and_(inside, pc.greater_equal(stamps_us, time_ms * 1000)), True).as_py()
                if hit >= 0:
                    found[index] = column[hit].as_py()
                    wanted.remove(index)
            if not wanted:
                break
    return tuple(found)
