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


class _Tally:
    def __init__(self, max_differences: int) -> None:
        self.counts = dict.fromkeys(("equal", "different", "missing", "extra"), 0)
        self.differences: list[Difference] = []
        self._max = max_differences
        self.covered = 0  # offsets of the range held by either side

    def note(self, kind: str, offset: int, fields: tuple[str, ...] = ()) -> None:
        self.counts["extra" if kind == "duplicate" else kind] += 1
        if kind != "equal" and len(self.differences) < self._max:
            self.differences.append(Difference(offset, kind, fields))


def _in_order(records: Iterable[Record], first: int, end: int, tally: _Tally, side: str) -> Iterator[Record]:
    """The side's records of [first, end), each offset once; a repeated or backwards offset of the destination is a
    duplicate (extra), of the source an error (a consumer never repeats an offset)."""
    last = first - 1
    for record in records:
        if not first <= record.offset < end:
            continue
        if record.offset <= last:
            if side == "source":
                raise SourceOrderError(record.offset, last)
            tally.note("duplicate", record.offset)
            continue
        last = record.offset
        yield record


def compare_range(
    source: Iterable[Record],
    destination: Iterable[Record],
    first: int,
    end: int,
    max_differences: int = 100,
    compared: tuple[str, ...] = COMPARED_FIELDS,
) -> Comparison:
    """Compare the two sides over [first, end) on the `compared` fields; records outside the range are ignored."""
    tally = _Tally(max_differences)
    theirs = _in_order(source, first, end, tally, "source")
    ours = _in_order(destination, first, end, tally, "destination")
    want, have = next(theirs, None), next(ours, None)
    while want is not None or have is not None:
        tally.covered += 1
        if have is None or (want is not None and want.offset < have.offset):
            assert want is not None
            tally.note("missing", want.offset)
            want = next(theirs, None)
        elif want is None or have.offset < want.offset:
            tally.note("extra", have.offset)
            have = next(ours, None)
        else:
            fields = differing_fields(want, have, compared)
            tally.note("different" if fields else "equal", want.offset, fields)
            want, have = next(theirs, None), next(ours, None)
    counts = tally.counts
    return Comparison(
        first,
        end,
        counts["equal"],
        counts["different"],
        counts["missing"],
        counts["extra"],
        (end - first) - tally.covered,
        tuple(sorted(tally.differences, key=lambda d: d.offset)),
    )
