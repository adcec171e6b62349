"""The contract between a mirror's actor and its destination.

The actor decides which source ranges become which destination writes; Spark tasks do the reading
and, where the sink can stage (`staging()`), write the bytes too. The sink commits each staged write
(or, for the Kafka destination, each chunk of records the tasks brought to the driver) in offset
order, and on start tells the actor where the destination ends. Sinks know nothing of flush policy,
metrics or signals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from sinks.staging import BlobStaging, RecordsToDriver, StagedBlob


class DestinationError(Exception):
    """The destination is unusable as found (corrupt chain, foreign writer, misaligned offsets)."""


@dataclass(frozen=True)
class Chunk:
    """Every source offset in [first_offset, last_offset] was read; `records` holds those that exist.

    Offsets in the range with no row are holes (compaction, transaction markers, aborted records).
    Rows are in the Kafka-source layout of `sinks.records.KAFKA_SCHEMA`, sorted by offset.
    """

    first_offset: int
    last_offset: int
    records: pa.Table

    @property
    def offset_count(self) -> int:
        return self.last_offset - self.first_offset + 1


@dataclass(frozen=True)
class Inspection:
    """What a read-only look at the destination found (for `status`)."""

    next_offset: int | None  # None: the destination holds nothing for this partition yet
    last_write: float | None = None  # Unix time of the newest durable write, where the destination records it


@dataclass(frozen=True)
class Committed:
    """What a durable write produced: where it went and how many bytes it took."""

    location: str
    bytes_written: int


class Sink(Protocol):
    @property
    def description(self) -> str:
        """Human-readable destination, free of secrets (for logs and status)."""
        ...

    async def open(self) -> int | None:
        """Inspect the destination and return the next source offset it expects.

        None means the destination holds nothing for this partition yet. Raises DestinationError
        when what is there cannot be continued safely.
        """
        ...

    async def inspect(self, deep: bool = False) -> Inspection:
        """Like open(), but read-only (for `status`): changes nothing at the destination. `deep`
        validates the whole destination instead of its tail."""
        ...

    def staging(self) -> BlobStaging | RecordsToDriver:
        """How Spark tasks hand this sink a range: staged blobs, or the records themselves."""
        ...

    async def commit(self, item: StagedBlob | Chunk) -> Committed:
        """Make a staged blob (or a chunk of records) durable and visible. Its first offset is always
        the offset open()/the previous commit left as next. Either all of it is durable afterwards or
        an exception is raised and nothing of it is visible."""
        ...

    async def discard(self, item: StagedBlob | Chunk) -> None:
        """Drop a staged write that will not be committed (best effort; never raises)."""
        ...

    async def close(self) -> None: ...
