"""A run of a chain's blobs merged into one staged blob, inside a Spark task (`commands.compact` plans and commits).

The merged blob holds the run's rows in order, row group by row group as they were (no record is decoded into
Python), written with the destination's encoding. It keeps what `restore --as-of` needs of the blobs it replaces:
their ranges and when each was committed, in its footer's key-value metadata (MERGED_FROM_KEY: a JSON list of
[first, last, written_ms], oldest first; a merged blob merged again passes its own list on), and its own time is
its newest original's (filesystem: the file's modification time; S3: object metadata), so that a chain's blob
times still grow with its offsets.

Cost: each blob of the run is read whole (a run is at most the compaction's target size) and its row groups are
copied through Arrow; the task holds one blob's bytes and its decoded table at a time, and at most a row group's
rows waiting to be written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.file_statistics import file_statistics
from core.records import conform, parquet_writer
from sinks.base import DestinationError
from sinks.blob.reading import BlobReader
from sinks.blob.staging import BlobOutput, BlobStaging, StagedBlob
from sinks.blob.writer import ROW_GROUP_BYTES, ROW_GROUP_ROWS

MERGED_FROM_KEY = "mirror-v3.merged-from"


@dataclass(frozen=True)
class MergeSource:
    """One blob of a run: its name and range, and when it was committed (Unix ms; a merged blob's own originals, in
    its footer, say it for it)."""

    name: str
    first: int
    last: int
    written_ms: int


def merged_from(metadata: pq.FileMetaData) -> list[tuple[int, int, int]] | None:
    """The originals a merged blob replaced ([first, last, written_ms], oldest first); None: not a merged blob."""
    found = (metadata.metadata or {}).get(MERGED_FROM_KEY.encode())
    if found is None:
        return None
    return [(int(first), int(last), int(written)) for first, last, written in json.loads(found)]


def originals_of(reader: BlobReader, name: str) -> list[tuple[int, int, int]] | None:
    """`merged_from` of a blob read whole (blocking); None: not a merged blob."""
    return merged_from(pq.ParquetFile(pa.BufferReader(reader.read(name))).metadata)


_DAY_US = 86_400_000_000


def blob_day(rows: pa.Table) -> int | None:
    """The UTC day of a daily blob's records (all that have a timestamp share it: `sinks.blob.writer`), by the
    first that has one; None: none has."""
    stamps = rows.column("timestamp").cast(pa.int64()).drop_null()
    stamps = stamps.filter(pc.greater_equal(stamps, 0))
    return int(stamps[0].as_py()) // _DAY_US if len(stamps) else None


class _MergedOutput:
    """One merged blob being written: rows gathered into row groups of a flush's size (small blobs make one group,
    not one each)."""

    def __init__(self, staging: BlobStaging) -> None:
        self._staging = staging
        self._output: BlobOutput | None = None
        self._writer: pq.ParquetWriter | None = None
        self.run: list[MergeSource] = []  # the blobs merged so far
        self.originals: list[tuple[int, int, int]] = []
        self.day: int | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = self._records = self._record_bytes = 0

    def add(self, source: MergeSource, inner: list[tuple[int, int, int]] | None, groups: list[pa.Table]) -> None:
        if self._output is None:
            self._output = self._staging.open(source.first)
            blob_format = self._staging.blob_format
            self._writer = parquet_writer(self._output.file, blob_format.compression, blob_format.compression_level)
        self.run.append(source)
        self.originals += inner if inner is not None else [(source.first, source.last, source.written_ms)]
        for rows in groups:
            if self._pending_rows + len(rows) > ROW_GROUP_ROWS or self._pending_bytes + rows.nbytes > ROW_GROUP_BYTES:
                self._write_pending()
            self._pending.append(rows)
            self._pending_rows += len(rows)
            self._pending_bytes += rows.nbytes
            self._records += len(rows)
            self._record_bytes += sum(rows.column(name).nbytes for name in ("key", "value"))

    def _write_pending(self) -> None:
        assert self._writer is not None
        if self._pending:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
            self._pending.clear()
            self._pending_rows = self._pending_bytes = 0

    def finish(self) -> StagedBlob | None:
        """The merged blob staged; None (nothing staged) for fewer than two blobs: nothing to merge."""
        if len(self.run) < 2:
            self.abandon()
            return None
        assert self._writer is not None and self._output is not None
        self._write_pending()
        self._writer.add_key_value_metadata({MERGED_FROM_KEY: json.dumps(self.originals, separators=(",", ":"))})
        self._writer.close()
        first, last = self.run[0].first, self.run[-1].last
        written_ms = max(w for _, _, w in self.originals)
        staged = self._output.finish(first, last, self._records, self._record_bytes, written_ms=written_ms)
        return dataclasses.replace(staged, statistics=file_statistics(self._writer.writer.metadata, staged.size))

    def abandon(self) -> None:
        # The writer first: left to the garbage collector, it would write its footer into the abandoned file.
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        if self._output is not None:
            self._output.abandon()


def merge_blobs(
    reader: BlobReader, staging: BlobStaging, run: Sequence[MergeSource], daily: bool = False
) -> list[StagedBlob]:
    """The run's rows staged as one blob covering its whole range, with its originals noted (see the module). With
    `daily` (flush.daily: each blob holds one UTC day), a merged blob never holds two days: the run is cut where the
    day changes, into one merged blob per day of two blobs or more (a day of one blob stays as it is)."""
    staged: list[StagedBlob] = []
    current = _MergedOutput(staging)
    try:
        for source in run:
            blob = pq.ParquetFile(pa.BufferReader(reader.read(source.name)))
            groups = [conform(blob.read_row_group(group)) for group in range(blob.num_row_groups)]
            offsets = [offset for rows in groups if len(rows) for offset in (rows["offset"][0], rows["offset"][-1])]
            if offsets and not (source.first <= offsets[0].as_py() and offsets[-1].as_py() <= source.last):
                raise DestinationError(f"{reader.location(source.name)}: holds offsets outside its name's range")
            day = next((found for rows in groups if (found := blob_day(rows)) is not None), None) if daily else None
            if day is not None and current.day is not None and day != current.day:
                done = current.finish()
                staged += [done] if done is not None else []
                current = _MergedOutput(staging)
            if day is not None:
                current.day = day
            current.add(source, merged_from(blob.metadata), groups)
        done = current.finish()
        return staged + ([done] if done is not None else [])
    except BaseException:
        current.abandon()
        raise
