"""A run of a chain's blobs merged into one staged blob, inside a Spark task (`commands.compact` plans and commits).

The merged blob holds the run's rows in order, row group by row group as they were (no record is decoded into
Python), written with the destination's encoding. It keeps what `restore --as-of` needs of the blobs it replaces:
their ranges and when each was committed, in its footer's key-value metadata (MERGED_FROM_KEY: a JSON list of
[first, last, written_ms], oldest first; a merged blob merged again passes its own list on), and its own time is
its newest original's (filesystem: the file's modification time; S3: object metadata), so that a chain's blob
times still grow with its offsets.

Cost: each blob of the run is read whole (a run is at most the compaction's target size) and its row groups are
copied through Arrow; the task holds one blob's bytes and its decoded table at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from core.file_statistics import file_statistics
from core.records import conform, parquet_writer
from sinks.base import DestinationError
from sinks.blob.reading import BlobReader
from sinks.blob.staging import BlobStaging, StagedBlob
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


def merge_blobs(reader: BlobReader, staging: BlobStaging, run: Sequence[MergeSource]) -> StagedBlob:
    """The run's rows staged as one blob covering its whole range, with its originals noted (see the module). Rows
    are gathered into row groups of the size a flush writes (small blobs make one group, not one each)."""
    first, last = run[0].first, run[-1].last
    output = staging.open(first)
    blob_format = staging.blob_format
    writer = parquet_writer(output.file, blob_format.compression, blob_format.compression_level)
    originals: list[tuple[int, int, int]] = []
    pending: list[pa.Table] = []
    pending_rows = pending_bytes = records = record_bytes = 0

    def write_pending() -> None:
        nonlocal pending_rows, pending_bytes
        if pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=ROW_GROUP_ROWS)
            pending.clear()
            pending_rows = pending_bytes = 0

    try:
        for source in run:
            blob = pq.ParquetFile(pa.BufferReader(reader.read(source.name)))
            inner = merged_from(blob.metadata)
            originals += inner if inner is not None else [(source.first, source.last, source.written_ms)]
            for group in range(blob.num_row_groups):
                rows = conform(blob.read_row_group(group))
                offsets = rows.column("offset")
                if len(rows) and not (source.first <= offsets[0].as_py() and offsets[-1].as_py() <= source.last):
                    raise DestinationError(f"{reader.location(source.name)}: holds offsets outside its name's range")
                if pending_rows + len(rows) > ROW_GROUP_ROWS or pending_bytes + rows.nbytes > ROW_GROUP_BYTES:
                    write_pending()
                pending.append(rows)
                pending_rows, pending_bytes = pending_rows + len(rows), pending_bytes + rows.nbytes
                records += len(rows)
                record_bytes += sum(rows.column(name).nbytes for name in ("key", "value"))
        write_pending()
        writer.add_key_value_metadata({MERGED_FROM_KEY: json.dumps(originals, separators=(",", ":"))})
        writer.close()
        staged = output.finish(first, last, records, record_bytes, written_ms=max(w for _, _, w in originals))
    except BaseException:
        # The writer first: left to the garbage collector, it would write its footer into the abandoned file.
        with contextlib.suppress(Exception):
            writer.close()
        output.abandon()
        raise
    return dataclasses.replace(staged, statistics=file_statistics(writer.writer.metadata, staged.size))
