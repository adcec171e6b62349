"""Record by record: how one offset range of the destination compares with the same range of the source.

`compare_range` merges two streams of records, each in offset order: what the source holds in [first, end) and
what the destination holds for that range (its offsets already mapped back to source offsets where it renumbers).
Every offset of the range ends up in exactly one count:
- equal: both hold it, and key, value, headers (order, duplicates, nulls), timestamp and timestamp type match;
- different: both hold it, and some of those fields differ (the difference names them);
- missing: the source holds it, the destination does not;
- extra: the destination holds it, the source does not (a record the source never had there, or a second copy
  of an offset: `duplicate`);
- holes: neither holds it (compaction, transaction markers, aborted records: legal).

Frozen data in and out; no I/O, no clock. Cost: one pass over both streams, O(n + m) time, memory bounded by the
number of differences kept (`max_differences`, the first ones by offset); the counts are always complete.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from core.errors import MirrorV3Error

Headers = tuple[tuple[str, bytes | None], ...] | None


class SourceOrderError(MirrorV3Error):
    """The source side gave `offset` after `previous`: a consumer never repeats or reorders offsets, so the
    reader is broken and no count would be true."""

    def __init__(self, offset: int, previous: int) -> None:
        self.offset, self.previous = offset, previous
        super().__init__(f"source offsets must increase: {offset} after {previous}")


class RangesApartError(MirrorV3Error):
    """Two comparisons joined as consecutive that are not: [.., `end`) and [`following_first`, ..)."""

    def __init__(self, end: int, following_first: int) -> None:
        self.end, self.following_first = end, following_first
        super().__init__(f"compared ranges do not meet: one ends before {end}, the next starts at {following_first}")


class WindowOutOfPlaceError(MirrorV3Error):
    """A window counted equal that is not the next part of the range: it starts at or below `last` (what was
    compared already) or reaches `end`. The caller's own check of its window was wrong; no count would be true."""

    def __init__(self, first_offset: int, last_offset: int, last: int, end: int) -> None:
        self.first_offset, self.last_offset, self.last, self.end = first_offset, last_offset, last, end
        super().__init__(f"window [{first_offset}, {last_offset}] is not after {last} and before {end}")


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers  # None: the record has no header list at all (Spark's Kafka source gives null)
    timestamp_ms: int
    timestamp_type: int  # Kafka's ids: 0 CreateTime, 1 LogAppendTime (-1: none)


COMPARED_FIELDS = ("key", "value", "headers", "timestamp", "timestamp_type")
# A Kafka destination stamps its own timestamp type (its topic's message.timestamp.type): the producer sets
# the source's timestamp, never its type, so a LogAppendTime source arrives as CreateTime.
KAFKA_DESTINATION_FIELDS = ("key", "value", "headers", "timestamp")


@dataclass(frozen=True)
class Difference:
    offset: int
    # different | missing | extra | duplicate | unmapped (a renumbered record without its header: offset is the
    # destination's)
    kind: str
    fields: tuple[str, ...] = ()  # different: the fields that differ


@dataclass(frozen=True)
class Comparison:
    first: int
    end: int  # exclusive
    equal: int = 0
    different: int = 0
    missing: int = 0
    extra: int = 0  # includes duplicates
    holes: int = 0
    differences: tuple[Difference, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return self.different == 0 and self.missing == 0 and self.extra == 0

    def joined(self, following: Comparison, max_differences: int) -> Comparison:
        """This range and the one right after it, as one (tasks compare consecutive ranges)."""
        if following.first != self.end:
            raise RangesApartError(self.end, following.first)
        return Comparison(
            self.first,
            following.end,
            self.equal + following.equal,
            self.different + following.different,
            self.missing + following.missing,
            self.extra + following.extra,
            self.holes + following.holes,
            (self.differences + following.differences)[:max_differences],
        )


def records_of_messages(batches: Iterable[list[Any]]) -> Iterator[Record]:
    """librdkafka messages as records (timestamp types in Kafka's numbering, as the blobs hold them)."""
    for messages in batches:
        for message in messages:
            timestamp_type, timestamp = message.timestamp()
            headers = message.headers()
            yield Record(
                message.offset(),
                message.key(),
                message.value(),
                None if headers is None else tuple(headers),
                timestamp,
                timestamp_type - 1,
            )


def differing_fields(
    source: Record, destination: Record, compared: tuple[str, ...] = COMPARED_FIELDS
) -> tuple[str, ...]:
    found = []
    if source.key != destination.key:
        found.append("key")
    if source.value != destination.value:
        found.append("value")
    if source.headers != destination.headers:
        found.append("headers")
    if source.timestamp_ms != destination.timestamp_ms:
        found.append("timestamp")
    if source.timestamp_type != destination.timestamp_type:
        found.append("timestamp_type")
    return tuple(f for f in found if f in compared)


class RangeComparer:
    """`compare_range` fed in consecutive windows: each `merge` takes both sides' records of the next window (every
    source record below the window's end, and the destination records that came with it), so a caller that reads
    both sides in pieces never holds the whole range. Duplicates and order are judged across windows, as over one
    stream. `count_equal` takes a window already known equal on both sides (compared column-wise by the caller)."""

    def __init__(
        self, first: int, end: int, max_differences: int = 100, compared: tuple[str, ...] = COMPARED_FIELDS
    ) -> None:
        self.first, self.end = first, end
        self._compared = compared
        self._max = max_differences
        self._counts = dict.fromkeys(("equal", "different", "missing", "extra"), 0)
        self._differences: list[Difference] = []
        self._covered = 0  # offsets of the range held by either side
        self.last = {"source": first - 1, "destination": first - 1}  # each side's last offset taken

    def _note(self, kind: str, offset: int, fields: tuple[str, ...] = ()) -> None:
        self._counts["extra" if kind == "duplicate" else kind] += 1
        if kind != "equal" and len(self._differences) < self._max:
            self._differences.append(Difference(offset, kind, fields))

    def _in_order(self, records: Iterable[Record], side: str) -> Iterator[Record]:
        """The side's records of [first, end), each offset once; a repeated or backwards offset of the destination
        is a duplicate (extra), of the source an error (a consumer never repeats an offset)."""
        first, end = self.first, self.end
        for record in records:
            if not first <= record.offset < end:
                continue
            last = self.last[side]
            if record.offset <= last:
                if side == "source":
                    raise SourceOrderError(record.offset, last)
                self._note("duplicate", record.offset)
                continue
            self.last[side] = record.offset
            yield record

    def merge(self, source: Iterable[Record], destination: Iterable[Record]) -> None:
        """The next window, record by record."""
        theirs = self._in_order(source, "source")
        ours = self._in_order(destination, "destination")
        want, have = next(theirs, None), next(ours, None)
        while want is not None or have is not None:
            self._covered += 1
            if have is None or (want is not None and want.offset < have.offset):
                assert want is not None
                self._note("missing", want.offset)
                want = next(theirs, None)
            elif want is None or have.offset < want.offset:
                self._note("extra", have.offset)
                have = next(ours, None)
            else:
                fields = differing_fields(want, have, self._compared)
                self._note("different" if fields else "equal", want.offset, fields)
                want, have = next(theirs, None), next(ours, None)

    def count_equal(self, count: int, first_offset: int, last_offset: int) -> None:
        """The next window: `count` records, both sides holding the same offsets from `first_offset` to
        `last_offset` (strictly increasing, inside the range, above both sides' last) and equal on every compared
        field."""
        if count <= 0:
            return
        last = max(self.last.values())
        if first_offset <= last or last_offset >= self.end:
            raise WindowOutOfPlaceError(first_offset, last_offset, last, self.end)
        self._covered += count
        self._counts["equal"] += count
        self.last = {"source": last_offset, "destination": last_offset}

    def result(self) -> Comparison:
        counts = self._counts
        return Comparison(
            self.first,
            self.end,
            counts["equal"],
            counts["different"],
            counts["missing"],
            counts["extra"],
            (self.end - self.first) - self._covered,
            tuple(sorted(self._differences, key=lambda d: d.offset)),
        )


def compare_range(
    source: Iterable[Record],
    destination: Iterable[Record],
    first: int,
    end: int,
    max_differences: int = 100,
    compared: tuple[str, ...] = COMPARED_FIELDS,
) -> Comparison:
    """Compare the two sides over [first, end) on the `compared` fields; records outside the range are ignored."""
    comparer = RangeComparer(first, end, max_differences, compared)
    comparer.merge(source, destination)
    return comparer.result()
