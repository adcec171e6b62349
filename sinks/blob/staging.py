"""Staged blobs: written in full by a Spark task, invisible until the driver commits them.

A flush is split in two so that records never pass through the driver:
- a task (on an executor) writes a blob's bytes to a *staged* place that no reader and no restart takes
  for part of the chain: a temporary file in the partition directory, or an S3 multipart upload whose
  parts are uploaded but not completed. It returns only a `StagedBlob`: the range, counts, size and
  where the bytes wait;
- the driver's actor commits staged blobs strictly in chain order (`BlobStore.commit_staged`).

A staged blob that is never committed (the process died, the drain ran out of time) is a leftover
that `BlobStore.clean_leftovers` removes on the next start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from sinks.write_target import Written


@dataclass(frozen=True, kw_only=True)
class StagedBlob(Written):
    """A blob written but not yet visible. `ref` says where its bytes wait (a temporary file's name in
    the partition directory, an S3 upload id); `parts` are an S3 upload's (number, ETag) pairs."""

    size: int  # bytes of the file
    ref: str
    sha256: str = ""
    parts: tuple[tuple[int, str], ...] = ()


class BlobOutput(Protocol):
    """One blob being written inside a task."""

    @property
    def file(self) -> pa.NativeFile:
        """Where the Parquet writer puts the bytes."""
        ...

    def finish(
        self, first: int, last: int, records: int, record_bytes: int, written_ms: int | None = None
    ) -> StagedBlob:
        """Make the written bytes durable in their staged place; the file is closed already. `written_ms`: the time
        the blob keeps as its own (a merged blob: its newest original's, `sinks.blob.merging`); None: now."""
        ...

    def abandon(self) -> None:
        """Remove what was written (best effort: leftovers are also cleaned on start)."""
        ...


@dataclass(frozen=True)
class BlobFormat:
    """How blob files are encoded (the destination's compression settings)."""

    compression: str = "zstd"
    compression_level: int | None = None


class BlobStaging(Protocol):
    """Where the tasks of one partition stage blobs, and in which format. Implementations are small
    frozen values: they travel to the executors inside the job's closure."""

    @property
    def blob_format(self) -> BlobFormat: ...

    @property
    def stages_at_once(self) -> int:
        """How many blobs (of different partitions) one task may stage at the same time: 1 where staging computes
        and writes locally, more where it mostly waits on the network."""
        ...

    def open(self, first: int) -> BlobOutput: ...
