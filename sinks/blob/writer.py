"""Records of a range staged as blobs, inside a Spark task: the write target of the filesystem and S3 destinations.

A task covers [first, end) of one partition. It reads from `read_from` (above `first` only when the
offsets in between were lost and the mirror skips them; they stay inside the first blob's range so the
chain has no gap). Blob boundaries are decided here, from the records themselves:
- a blob holds at most `max_bytes` of record bytes (keys, values, headers); a record larger than that
  is a blob of its own;
- a blob spans at most `max_offsets` offsets (records and holes);
- the last blob ends at end-1, whatever its size.
Rows are written in row groups as they arrive, so a task holds one row group in memory, not a blob.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from core.file_statistics import file_statistics
from core.messages import RecordColumns, message_bytes
from core.record_times import SMALL, RecordTimes
from core.records import parquet_writer
from core.schema_wire import schema_id
from sinks.blob.staging import BlobOutput, BlobStaging, StagedBlob
from sinks.write_target import BlobLimits, RecordSource, TaskRange

# A row group is written when either is reached: bounds a task's memory and keeps groups large
# enough for compression and for readers' column chunks.
ROW_GROUP_BYTES = 32 * 1024 * 1024
ROW_GROUP_ROWS = 131_072

_DAY_MS = 86_400_000


@dataclass(frozen=True)
class BlobTarget:
    """The write target of a blob destination: the records of a range become consecutive staged blobs, cut by
    the limits; a range may be split over tasks at any offset (each task's blobs start where its range does)."""

    staging: BlobStaging
    schema_fields: tuple[str, ...] = ()  # "key", "value": in the registry's wire format, their IDs are noted

    @property
    def ordered(self) -> bool:
        return False

    @property
    def writes_at_once(self) -> int:
        return self.staging.stages_at_once

    @property
    def abandons_cleanly(self) -> bool:
        return True  # a failed write removes what it staged (stage_blobs)

    def write(self, records: RecordSource, task: TaskRange, limits: BlobLimits) -> list[StagedBlob]:
        return stage_blobs(records, task, limits, self.staging, self.schema_fields)


def stage_blobs(
    records: RecordSource,
    task: TaskRange,
    limits: BlobLimits,
    staging: BlobStaging,
    schema_fields: tuple[str, ...] = (),
) -> list[StagedBlob]:
    """Read the task's range and stage it as consecutive blobs covering exactly [first, end); each notes the schema
    IDs of its records' `schema_fields` (their schemas are archived before it is committed: `sinks.schemas.archive`)."""
    writer = _BlobWriter(records, staging, limits, schema_fields)
    try:
        writer.start(task.first)
        for messages in records.read(task.read_from, task.end):
            for message in messages:
                writer.add(message)
        writer.close(task.end - 1)
    except BaseException:
        writer.abandon()
        raise
    return writer.staged


class _BlobWriter:
    def __init__(
        self, records: RecordSource, staging: BlobStaging, limits: BlobLimits, schema_fields: tuple[str, ...]
    ) -> None:
        self._staging = staging
        self._limits = limits
        self._keys, self._values = "key" in schema_fields, "value" in schema_fields
        self._schema_ids: set[int] = set()
        self._unframed = 0
        self._columns = RecordColumns(records.topic, records.partition)
        self._output: BlobOutput | None = None
        self._parquet: pq.ParquetWriter | None = None
        self._first = 0
        self._records = 0
        self._bytes = 0
        self._day: int | None = None  # UTC day of the blob's first record (daily limits)
        # The blob's timestamps per row group, for RecordTimes: a few as the list they came in, more as an array.
        self._timestamps: list[list[int] | np.ndarray[Any, np.dtype[np.int64]]] = []
        self.staged: list[StagedBlob] = []

    def start(self, first: int) -> None:
        self._first, self._records, self._bytes, self._day = first, 0, 0, None
        self._timestamps = []
        self._schema_ids, self._unframed = set(), 0
        self._output = self._staging.open(first)
        blob_format = self._staging.blob_format
        self._parquet = parquet_writer(self._output.file, blob_format.compression, blob_format.compression_level)

    def add(self, message: Any) -> None:
        offset = message.offset()
        limits = self._limits
        while offset >= self._first + limits.max_offsets:
            cut = self._first + limits.max_offsets
            self.close(cut - 1)
            self.start(cut)
        size = message_bytes(message)
        if self._records and self._bytes + size > limits.max_bytes:
            self.close(offset - 1)
            self.start(offset)
        if limits.daily:
            timestamp = message.timestamp()[1]
            day = timestamp // _DAY_MS if timestamp >= 0 else self._day  # no timestamp: no day of its own
            if self._records and day != self._day:
                self.close(offset - 1, cut="daily")
                self.start(offset)
            self._day = day
        if self._keys or self._values:
            self._note_schemas(message)
        self._columns.add(message, size)
        self._records += 1
        self._bytes += size
        if len(self._columns) >= ROW_GROUP_ROWS or self._columns.byte_count >= ROW_GROUP_BYTES:
            self._write_row_group()

    def _note_schemas(self, message: Any) -> None:
        """Per record: a look at the first five bytes of its key and value."""
        framed = True
        for wanted, data in ((self._keys, message.key()), (self._values, message.value())):
            if wanted:
                found = schema_id(data)
                if found is None:
                    framed = False
                else:
                    self._schema_ids.add(found)
        if not framed:
            self._unframed += 1

    def _write_row_group(self) -> None:
        assert self._parquet is not None
        if len(self._columns):
            stamps = self._columns.timestamps
            self._timestamps.append(stamps if len(stamps) <= SMALL else np.array(stamps, dtype=np.int64))
            self._parquet.write_batch(self._columns.take())

    def close(self, last: int, cut: str = "") -> None:
        assert self._parquet is not None and self._output is not None
        self._write_row_group()
        self._parquet.close()
        staged = self._output.finish(self._first, last, self._records, self._bytes)
        # The footer just written, for the blob's table: its commit then reads no file (core.file_statistics).
        statistics = file_statistics(self._parquet.writer.metadata, staged.size)
        chunks = self._timestamps
        if sum(len(chunk) for chunk in chunks) <= SMALL:
            stamps: list[int] | np.ndarray[Any, np.dtype[np.int64]] = [t for chunk in chunks for t in chunk]
        else:
            stamps = np.concatenate([np.asarray(chunk, dtype=np.int64) for chunk in chunks])
        times = RecordTimes.measure(stamps, round(time.time() * 1000))
        self.staged.append(
            dataclasses.replace(
                staged,
                cut=cut,
                times=times,
                schema_ids=tuple(sorted(self._schema_ids)),
                unframed=self._unframed,
                statistics=statistics,
            )
        )
        self._parquet = self._output = None

    def abandon(self) -> None:
        # The Parquet writer is closed first: left to the garbage collector, it would write its footer into the
        # abandoned (closed) file and print the failure into the worker's log.
        parquet, self._parquet = self._parquet, None
        if parquet is not None:
            with contextlib.suppress(Exception):
                parquet.close()
        if self._output is not None:
            self._output.abandon()
