"""The in-memory batch an actor accumulates between flushes."""

from __future__ import annotations

import time

import pyarrow as pa

from sinks.base import Chunk
from sinks.records import empty_records, record_bytes


class RangeBuffer:
    """Contiguous source offsets read but not yet durable, and the records among them."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.first_offset: int | None = None
        self.last_offset = -1
        self._tables: list[pa.Table] = []
        self.record_count = 0
        self.byte_count = 0
        # Monotonic time from which the oldest buffered record counts as waiting (see `add`).
        self.started_at: float | None = None

    @property
    def empty(self) -> bool:
        return self.first_offset is None

    @property
    def offset_count(self) -> int:
        return 0 if self.first_offset is None else self.last_offset - self.first_offset + 1

    def add(self, first: int, last: int, records: pa.Table, waiting_since: float | None = None) -> None:
        """Append the read of [first, last]; it must start right after what is buffered.

        `waiting_since` (monotonic) is when these records may first have been readable on the source; the
        buffer's age counts from there when it was empty, and from now when it is not given.
        """
        if self.first_offset is None:
            self.first_offset = first
            self.started_at = time.monotonic() if waiting_since is None else waiting_since
        elif first != self.last_offset + 1:
            raise ValueError(f"buffer ends at {self.last_offset}, cannot append {first}-{last}")
        self.last_offset = last
        if records.num_rows:
            self._tables.append(records)
            self.record_count += records.num_rows
            self.byte_count += record_bytes(records)

    def age(self, now: float | None = None) -> float:
        if self.started_at is None:
            return 0.0
        return (time.monotonic() if now is None else now) - self.started_at

    def take(self) -> Chunk:
        """Hand the buffered range over as one chunk and start empty."""
        if self.first_offset is None:
            raise ValueError("take() on an empty buffer")
        records = pa.concat_tables(self._tables) if self._tables else empty_records()
        chunk = Chunk(first_offset=self.first_offset, last_offset=self.last_offset, records=records)
        self._reset()
        return chunk
