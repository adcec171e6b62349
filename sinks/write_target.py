"""The contract between a Spark task and a destination: a reader of records, a range, and where they go.

A task is "this reader, this range, that target". The reader yields a partition's records in offset order (a live
source partition for `run`, archived blobs for `restore`); the target writes them and reports what it wrote:
- `WriteTarget` is a small frozen value the destination's sink hands the job (it travels to the executors
  inside the job's closure). `ordered` says whether a range's records must be written by one task in order
  (the Kafka destination: a partition's records must keep their order) or may be cut into several tasks of
  whole blobs (filesystem, S3);
- `Written` is what a task reports of one write: the source range it covers and its counts. Each destination
  extends it with what its sink needs to commit (a staged blob's place, the destination offsets a range got).
Only these small values come back to the driver; records never do.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from core.errors import MirrorV3Error
from core.file_statistics import FileStatistics
from core.record_times import RecordTimes


class RecordSource(Protocol):
    """Records of one partition, read inside a task. `read` yields lists of librdkafka messages (or anything with
    their methods) in strictly increasing offset order within [read_from, end); offsets with no record are holes."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def name(self) -> str:
        """`<topic>-<partition>`, for messages."""
        ...

    def read(self, read_from: int, end: int) -> Iterator[list[Any]]: ...


@dataclass(frozen=True)
class TaskRange:
    """What one write covers: source offsets [first, end), read from `read_from` (above `first` only when the
    offsets in between were lost and are skipped: they stay inside the write's range so nothing has a gap)."""

    first: int
    read_from: int
    end: int  # exclusive

    @property
    def offset_count(self) -> int:
        return self.end - self.first


@dataclass(frozen=True)
class BlobLimits:
    """Where a blob destination cuts a range into blobs (a Kafka destination has no blobs and ignores them)."""

    max_bytes: int
    max_offsets: int
    daily: bool = False  # never a blob with records of two UTC days (record timestamps)


# No size or day limit cuts the range: a claimed blob written whole, or a target without blobs (Kafka).
UNCUT = BlobLimits(max_bytes=2**62, max_offsets=2**62)


@dataclass(frozen=True, kw_only=True)
class Written:
    """Source offsets [first, last] written by a task. Offsets of the range with no record were holes at the
    source, or records deliberately left out (`skipped`)."""

    first: int
    last: int
    records: int
    record_bytes: int  # keys, values and headers as read from the source: what flush.max-bytes counts
    retries: int = 0  # transient failures the task retried while writing
    skipped: int = 0  # records read but deliberately not written (a two-way mirror's records copied back)
    unframed: int = 0  # schemas: records whose key or value was not in the registry's wire format (copied as is)
    schema_ids: tuple[int, ...] = ()  # schemas, blob destinations: the source schema IDs its records carry (sorted)
    cut: str = ""  # why the write ended before its limits: "daily" at a UTC day boundary
    times: RecordTimes | None = None  # the records' timestamps, for latency metrics (None: not measured)
    statistics: FileStatistics | None = None  # blob destinations: the file's, for its table (None: not a file)

    @property
    def offset_count(self) -> int:
        return self.last - self.first + 1


W_co = TypeVar("W_co", bound=Written, covariant=True)


class WriteTarget(Protocol[W_co]):
    """How the tasks of one partition write records to its destination."""

    @property
    def ordered(self) -> bool:
        """True: a range's records must be written by one task, in offset order (never split over tasks)."""
        ...

    @property
    def writes_at_once(self) -> int:
        """How many of this target's writes one task may run at the same time: 1 for a write that computes (a
        blob is compressed), more for one that mostly waits on the network (a Kafka transaction's round trips)."""
        ...

    @property
    def abandons_cleanly(self) -> bool:
        """True: a write that fails midway (its source read given up) leaves nothing behind, so it may simply be
        run again (staged blobs are removed, a transaction is aborted); False: records it sent may be in the
        destination already (Kafka preserve mode), and only the destination can say where to go on."""
        ...

    def write(self, records: RecordSource, task: TaskRange, limits: BlobLimits) -> Sequence[W_co]:
        """Read [task.read_from, task.end) from `records` and write it; what was written covers exactly
        [task.first, task.end), in offset order. Raises a MirrorV3Error for the user's failures (lost offsets,
        a destination that refuses, another writer); nothing it wrote is visible until its sink commits it."""
        ...


class RangeCoverageError(MirrorV3Error):
    """A task's writes do not tile its range [first, end): `reached` is where they stopped tiling it. A bug, and
    what was written is never committed."""

    def __init__(self, partition: str, first: int, end: int, reached: int) -> None:
        self.partition, self.first, self.end, self.reached = partition, first, end, reached
        super().__init__(f"{partition}: the writes of offsets [{first}, {end}) do not tile them (offset {reached})")


def check_coverage(partition: str, task: TaskRange, written: Sequence[Written]) -> None:
    """A task's writes must cover its range exactly and in order; anything else must never be committed.
    Raises RangeCoverageError."""
    expected = task.first
    for item in written:
        if item.first != expected or item.last < item.first:
            raise RangeCoverageError(partition, task.first, task.end, expected)
        expected = item.last + 1
    if expected != task.end:
        raise RangeCoverageError(partition, task.first, task.end, expected)
