"""What one Spark task of `verify` does for a blob destination: read consecutive blobs of a chain, check each file
as a file, and compare their records with the source's (`workers.archive_comparison`: column-wise where equal,
record by record where not).

A task covers whole blobs, so no file is read twice. Each file must be valid Parquet with exactly the records'
schema, and its rows' offsets must increase strictly and stay inside the range its name gives; what breaks that
is a chain problem naming the file. The records are then compared with what the source holds for the same
offsets, from `check_from` on: below it the source holds nothing any more, so only
the file checks apply there. Memory: one blob's bytes and one row group at a time, one consumer batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from core.records import KAFKA_SCHEMA
from sinks.blob.chain import BlobRange
from sinks.blob.reading import BlobReader
from source.range_reader import SourcePartition, consume_range
from workers.archive_comparison import SourceWindows, WindowedComparison
from workers.archive_records import carried_schema_ids
from workers.record_comparison import Comparison


@dataclass(frozen=True)
class SliceCheck:
    comparison: Comparison  # over [max(check_from, first blob's first), last blob's last + 1)
    problems: tuple[str, ...]  # files that are not what their names promise
    schema_ids: tuple[tuple[int, int], ...] = ()  # schemas: (schema ID, first offset carrying it), by ID


class _BlobRowGroups:
    """The row groups of consecutive blobs, in order, each file checked as it is read: readable Parquet of the
    records' schema (else the blob is skipped and named), offsets strictly increasing and inside the name's range
    (else each offending offset is named). Notes the schema IDs of `schema_fields`."""

    def __init__(
        self,
        reader: BlobReader,
        blobs: tuple[BlobRange, ...],
        schema_fields: tuple[str, ...],
        schema_ids: dict[int, int],
    ) -> None:
        self._reader = reader
        self._blobs = blobs
        self._schema_fields = schema_fields
        self.problems: list[str] = []
        self.schema_ids = schema_ids  # schema ID -> the first offset carrying it (shared by a slice's readers)

    def __iter__(self) -> Iterator[tuple[pa.RecordBatch, np.ndarray, bool]]:
        """(rows, their offsets, whether the offsets passed the checks) per row group."""
        for blob in self._blobs:
            yield from self._one(blob)

    def _one(self, blob: BlobRange) -> Iterator[tuple[pa.RecordBatch, np.ndarray, bool]]:
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
            offsets = np.asarray(batch.column("offset").to_numpy(zero_copy_only=False), dtype=np.int64)
            if len(offsets) == 0:
                continue
            steps = np.diff(offsets, prepend=last)
            sound = bool((steps > 0).all() and offsets[-1] <= blob.last)
            last = int(offsets[-1]) if sound else self._name_problems(where, blob, offsets.tolist(), last)
            self._note_schemas(batch)
            yield batch, offsets, sound

    def _name_problems(self, where: str, blob: BlobRange, offsets: list[int], last: int) -> int:
        """Each offset outside the blob's name or not after the last one kept; returns the last one kept."""
        for offset in offsets:
            if not blob.first <= offset <= blob.last:
                self.problems.append(f"{where}: holds offset {offset}, outside its name's range")
            elif offset <= last:
                self.problems.append(f"{where}: offset {offset} comes after {last}")
            else:
                last = offset
        return last

    def _note_schemas(self, batch: pa.RecordBatch) -> None:
        if not self._schema_fields:
            return
        for name in self._schema_fields:
            for found, offset in carried_schema_ids(batch.column(name), batch.column("offset")):
                if found not in self.schema_ids or offset < self.schema_ids[found]:
                    self.schema_ids[found] = offset


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
    only_checked = _BlobRowGroups(reader, tuple(b for b in blobs if b.last < compared_from), schema_fields, schema_ids)
    for _ in only_checked:
        pass
    stored = _BlobRowGroups(reader, tuple(b for b in blobs if b.last >= compared_from), schema_fields, schema_ids)
    source_reads = consume_range(source, compared_from, min(end, source_end), consumer)
    comparison = WindowedComparison(SourceWindows(source_reads), compared_from, end, max_differences)
    for rows, offsets, sound in stored:
        comparison.row_group(rows, offsets, sound)
    return SliceCheck(
        comparison.result(), tuple(only_checked.problems + stored.problems), tuple(sorted(schema_ids.items()))
    )
