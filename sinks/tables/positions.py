"""Which blobs a table adds next, and where its commits say each chain is: pure, no I/O, no clock.

Every table commit records, for each chain it follows, the chain's next offset the table holds (`NEXT_KEY`: in
an Iceberg snapshot's summary). A later commit carries the positions of every chain its process follows, so the
newest commit of this process answers for all of them; a snapshot without them (someone's maintenance: a
compaction, an expiry) is walked past. What follows a position is exactly the chain's blobs from that offset on,
consecutive: a blob that does not start there is a gap (or another writer), and nothing after it is added.

Cost: reading positions walks the snapshots back from the newest until every chain is found (one, usually);
choosing blobs is linear in the names listed after the position.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from core.file_statistics import FileStatistics
from sinks.blob.chain import BlobRange, blob_name, parse_blob_name, without_redundant

NEXT_KEY = "mirror-v3.next-offset."  # + "<dest-name>/<partition>": the chain's next offset the table holds


def position_key(chain: str) -> str:
    return NEXT_KEY + chain


def positions_of(summary: Mapping[str, str]) -> dict[str, int]:
    """The chain positions one commit's summary records (none: not a commit of mirror-v3)."""
    found = {}
    for key, value in summary.items():
        if key.startswith(NEXT_KEY) and value.isdigit():
            found[key[len(NEXT_KEY) :]] = int(value)
    return found


@dataclass(frozen=True)
class TablePositions:
    """Where the table is, per chain, as its commits say; `unknown`: chains no commit of the walked history names
    although the history does not reach the table's beginning (expired snapshots): nothing is added to those, or a
    blob could be added twice."""

    next_offsets: dict[str, int]
    unknown: frozenset[str] = frozenset()


def walk_positions(
    summaries_newest_first: Iterable[Mapping[str, str]], chains: Iterable[str], history_complete: bool
) -> TablePositions:
    """The position of each of `chains` from the newest commit that names it. A chain no commit names is at its
    beginning (0: the table holds none of it) when the walked history is the table's whole history; otherwise its
    position is unknown."""
    wanted, found = set(chains), {}
    for summary in summaries_newest_first:
        for chain, offset in positions_of(summary).items():
            if chain in wanted and chain not in found:
                found[chain] = offset
        if len(found) == len(wanted):
            break
    missing = wanted - set(found)
    if history_complete:
        return TablePositions({**found, **dict.fromkeys(missing, 0)})
    return TablePositions(found, frozenset(missing))


def list_after(position: int) -> str | None:
    """The name a chain listing starts after so that the first name listed is the blob starting at `position`:
    past every name of a blob that starts below it (`~` sorts after the `-` that follows a blob's first offset)."""
    return None if position == 0 else f"{blob_name(position - 1, position - 1)[:20]}~"


@dataclass(frozen=True)
class TableFile:
    """A blob as a table adds it: its address as the table's file IO reads it (a local path, `s3://bucket/key`),
    its source partition (its chain's: the table's partition, known without its statistics), and its path under its
    chain name's directory (`<partition>/<blob>`: a Delta table rooted there)."""

    uri: str
    partition: int
    name: str
    statistics: FileStatistics | None = None  # its writer's (None: the table reads its footer)

    @property
    def relative(self) -> str:
        return f"{self.partition}/{self.name}"


@dataclass(frozen=True)
class NextBlobs:
    blobs: tuple[BlobRange, ...]  # consecutive, the first starting at the position
    next_offset: int  # the position after them
    gap_at: BlobRange | None = None  # the first listed blob that does not continue (nothing from it on is added)
    # first offset -> the blob's file statistics, where its writer's are at hand (the others' footers are read)
    statistics: Mapping[int, FileStatistics] = field(default_factory=dict)


def next_blobs(
    position: int, names: Sequence[str], durable_end: int | None = None, limit: int | None = None
) -> NextBlobs:
    """The blobs that continue a chain from `position`, in order, from the names listed after it (`list_after`),
    up to `durable_end` (the chain's next offset as its mirror knows it: blobs beyond are not the mirror's yet), at
    most `limit` of them. A run of blobs a compaction merged (`sinks.blob.chain.without_redundant`) is taken as the
    merged blob."""
    ranges, _ = without_redundant(blob for blob in map(parse_blob_name, names) if blob is not None)
    return next_ranges(position, ranges, durable_end, limit)


def next_ranges(
    position: int, ranges: Iterable[BlobRange], durable_end: int | None = None, limit: int | None = None
) -> NextBlobs:
    """`next_blobs` of blob ranges in chain order."""
    taken: list[BlobRange] = []
    at = position
    for blob in ranges:
        if (durable_end is not None and blob.last >= durable_end) or (limit is not None and len(taken) >= limit):
            break
        if blob.first != at:
            return NextBlobs(tuple(taken), at, blob)
        taken.append(blob)
        at = blob.last + 1
    return NextBlobs(tuple(taken), at)


class CommittedLog:
    """The blob ranges one process committed to one chain, newest last, at most `kept` of them: what its table
    needs next, known without listing the chain (a filesystem listing reads the whole directory, which grows by a
    blob per flush). The table keeper forgets what its table holds; a log that does not reach back to a table's
    position (a new process, more flushes than `kept` between two table commits) answers None, and the chain is
    listed instead."""

    def __init__(self, kept: int) -> None:
        self._ranges: deque[tuple[int, int, FileStatistics | None]] = deque(maxlen=kept)

    def add(self, first: int, last: int, statistics: FileStatistics | None = None) -> None:
        self._ranges.append((first, last, statistics))

    def after(self, position: int, durable_end: int) -> NextBlobs | None:
        """The committed blobs that continue the chain from `position` up to `durable_end`; None when this log does
        not reach back to `position`."""
        ranges = self._ranges
        start = bisect.bisect_left([first for first, _, _ in ranges], position)
        if start == len(ranges) or ranges[start][0] != position:
            return None
        # The log may have grown since `durable_end` was read (the mirror flushed meanwhile): what is beyond waits.
        later = list(itertools.islice(ranges, start, None))
        found = next_ranges(position, (BlobRange(first, last) for first, last, _ in later), durable_end)
        if found.gap_at is None and found.next_offset != durable_end:
            return None  # the mirror is further than what it committed here says (a skip): the chain says
        known = {first: statistics for first, _, statistics in later[: len(found.blobs)] if statistics is not None}
        return dataclasses.replace(found, statistics=known)

    def forget_below(self, position: int) -> None:
        """Drop the ranges below `position` (the table holds them)."""
        while self._ranges and self._ranges[0][1] < position:
            self._ranges.popleft()
