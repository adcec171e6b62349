"""How big the next Spark read is, and over how many tasks it is spread.

Reads are sized in bytes as well as offsets: Spark collects a read into the driver as Arrow, so a
range of large records sized only by offsets can exhaust the JVM heap. The planner learns the
partition's bytes per offset from each read and keeps every read under `max_bytes_per_read`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Until the first read tells us how big records are, read little.
FIRST_READ_OFFSETS = 20_000
_SMOOTHING = 0.5


@dataclass(frozen=True)
class ReadLimits:
    max_offsets_per_read: int
    max_bytes_per_read: int
    offsets_per_task: int
    bytes_per_task: int


@dataclass(frozen=True)
class ReadPlan:
    end: int  # exclusive
    tasks: int


class ReadPlanner:
    def __init__(self, limits: ReadLimits) -> None:
        self._limits = limits
        self.bytes_per_offset: float | None = None

    def plan(self, start: int, end_limit: int, byte_room: int | None = None) -> ReadPlan:
        """A read from `start`, ending at most at `end_limit`, holding at most `byte_room` bytes."""
        limits = self._limits
        offsets = min(end_limit - start, limits.max_offsets_per_read)
        bytes_cap = limits.max_bytes_per_read if byte_room is None else min(limits.max_bytes_per_read, byte_room)
        if self.bytes_per_offset is None:
            offsets = min(offsets, FIRST_READ_OFFSETS)
        elif self.bytes_per_offset > 0:
            offsets = min(offsets, max(1, int(bytes_cap / self.bytes_per_offset)))
        offsets = max(1, offsets)
        estimated_bytes = offsets * (self.bytes_per_offset or 0.0)
        tasks = max(
            1,
            math.ceil(offsets / limits.offsets_per_task),
            math.ceil(estimated_bytes / limits.bytes_per_task),
        )
        return ReadPlan(end=start + offsets, tasks=min(tasks, offsets))

    def observe(self, offsets: int, byte_count: int) -> None:
        if offsets <= 0:
            return
        measured = byte_count / offsets
        if self.bytes_per_offset is None:
            self.bytes_per_offset = measured
        else:
            # Follow changes in record size without letting one odd range swing the next read.
            self.bytes_per_offset = max(measured, _SMOOTHING * self.bytes_per_offset + (1 - _SMOOTHING) * measured)
