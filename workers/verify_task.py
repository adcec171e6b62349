"""What one Spark task of `verify` does for a blob destination: read consecutive blobs of a chain, check each file
as a file, and compare their records with the source's, record by record.

A task covers whole blobs, so no file is read twice. Each file must be valid Parquet with exactly the records'
schema, and its rows' offsets must increase strictly and stay inside the range its name gives; what breaks that
is a chain problem naming the file. The records are then compared with what the source holds for the same
offsets (`workers.record_comparison`), from `check_from` on: below it the source holds nothing any more, so only
the file checks apply there. Memory: one blob's bytes and one row group's records at a time, one consumer batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core.records import KAFKA_SCHEMA
from core.schema_wire import schema_id
from sinks.blob.chain import BlobRange
from sinks.blob.reading import BlobReader
from source.range_reader import SourcePartition, consume_range
from workers.archive_records import records_of_batch
from workers.record_comparison import Comparison, Record, compare_range


@dataclass(frozen=True)
class SliceCheck:
    comparison: Comparison  # over [max(check_from, first blob's first), last blob's last + 1)
    problems: tuple[str, ...]  # files that are not what their names promise
    schema_ids: tuple[tuple[int, int], ...] = ()  # schemas: (schema ID, first offset carrying it), by ID


def records_of_messages(batches: Iterable[list[Any]]) -> Iterator[Record]:
    """librdkafka messages as records (timestamp types in Kafka's numbering, as the blobs hold them)."""
    for messages in batches:
        for message in messages:
            timestamp_type, timestamp = message.timestamp()
            headers = message.headers()
            yield Record(
                message.offset(),
                message.key(),
                message.value(),
                None if headers is None else tuple(headers),
                timestamp,
                timestamp_type - 1,
            )


class _BlobRecords:
    """The records of consecutive blobs, in order, with each file checked as it is read."""

    def __init__(
        self,
        reader: BlobReader,
        blobs: tuple[BlobRange, ...],
        schema_fields: tuple[str, ...],
        schema_ids: dict[int, int],
    ) -> None:
        self._reader = reader
        self._blobs = blobs
        self._keys, self._values = "key" in schema_fields, "value" in schema_fields
        self.problems: list[str] = []
        self.schema_ids = schema_ids  # schema ID -> the first offset carrying it (shared by a slice's readers)

    def __iter__(self) -> Iterator[Record]:
        for blob in self._blobs:
            yield from self._one(blob)

    def _one(self, blob: BlobRange) -> Iterator[Record]:
        where = self._reader.location(blob.name)
        try:
            parquet = pq.ParquetFile(pa.BufferReader(self._reader.read(blob.name)))
            schema = parquet.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            self.problems.append(f"{where}: not a readable Parquet file ({exc})")
            return
        if not schema.remove_metadata().equals(KAFKA_SCHEMA):
            self.problems.append(f"{where}: schema differs from the records' ({schema.remove_metadata()})")
            return
        last = blob.first - 1
        for batch in parquet.iter_batches():
            for record in records_of_batch(batch):
                if not blob.first <= record.offset <= blob.last:
                    self.problems.append(f"{where}: holds offset {record.offset}, outside its name's range")
                elif record.offset <= last:
                    self.problems.append(f"{where}: offset {record.offset} comes after {last}")
                else:
                    last = record.offset
                if self._keys or self._values:
                    self._note_schemas(record)
                yield record

    def _note_schemas(self, record: Record) -> None:
        for wanted, data in ((self._keys, record.key), (self._values, record.value)):
            found = schema_id(data) if wanted else None
            if found is not None and found not in self.schema_ids:
                self.schema_ids[found] = record.offset


def check_slice(
    source: SourcePartition,
    blobs: tuple[BlobRange, ...],
    reader: BlobReader,
    check_from: int,
    source_end: int,
    max_differences: int,
    consumer: Any = None,
    schema_fields: tuple[str, ...] = (),
) -> SliceCheck:
    """Check the blobs as files and compare their records with the source's from `check_from` on. The source is
    read up to `source_end` (what it holds now): records the blobs hold beyond it are extra. `schema_fields`: the
    keys or values whose schema IDs are noted (the driver checks the archive holds each one's schema)."""
    first, end = blobs[0].first, blobs[-1].last + 1
    compared_from = min(max(first, check_from), end)
    schema_ids: dict[int, int] = {}
    # Blobs wholly below the compared range are read for the file checks only.
    only_checked = _BlobRecords(reader, tuple(b for b in blobs if b.last < compared_from), schema_fields, schema_ids)
    for _ in only_checked:
        pass
    stored = _BlobRecords(reader, tuple(b for b in blobs if b.last >= compared_from), schema_fields, schema_ids)
    source_records = records_of_messages(consume_range(source, compared_from, min(end, source_end), consumer))
    comparison = compare_range(source_records, stored, compared_from, end, max_differences)
    return SliceCheck(comparison, tuple(only_checked.problems + stored.problems), tuple(sorted(schema_ids.items())))
