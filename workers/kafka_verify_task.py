"""What one Spark task of `verify` does for a Kafka destination: read a slice of the destination partition and
the source range it stands for, and compare them record by record.

preserve: a destination offset is its source offset, so the slice is one offset range read on both sides.

renumber: the slice is a range of destination offsets [dest_first, dest_end); each record names its source
offset in its last `mirror-v3.source-offset` header, which is taken off before comparing. The driver has found
the source range the slice stands for, [first, end), from the first mapped record at or after each slice's start
(so consecutive slices meet exactly). A destination record that maps outside that range is out of order, so it
is a copy too many (extra); one without the header is `unmapped` (extra, named by its destination offset).

A source record that a mirror copied from the destination cluster (its `mirror-v3.source-cluster` header names
it) is left out of a renumbered copy on purpose, so two-way mirrors never copy records back: it counts as a hole.

Timestamp types are not compared: a destination topic stamps its own (`KAFKA_DESTINATION_FIELDS`). Below
`check_from` (the source's log start) nothing can be compared, and such destination records are passed over.
Memory: one consumer batch per side at a time, and the first `max_differences` differences.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from core.kafka_records import copied_from, split_source_offset
from sinks.schemas.rewrite import SchemaRewrite, rewriter_for
from source.range_reader import SourcePartition, consume_range
from workers.record_comparison import (
    KAFKA_DESTINATION_FIELDS,
    Difference,
    Record,
    compare_range,
    records_of_messages,
)
from workers.verify_task import SliceCheck


@dataclass(frozen=True)
class KafkaSlice:
    """One task's share of a Kafka destination. Source offsets [first, end) are compared (from `check_from` on);
    destination offsets [dest_first, dest_end) are read (the same range in preserve mode)."""

    source: SourcePartition
    destination: SourcePartition  # the destination partition, read with read_committed
    renumbered: bool
    dest_first: int
    dest_end: int
    first: int
    end: int
    check_from: int  # the source's log start
    source_end: int  # what the source holds now (exclusive)
    max_differences: int
    # renumber: the destination cluster's id; source records a mirror copied from there were left out on
    # purpose (two-way mirrors), so they count as holes.
    skip_cluster: str | None = None
    ignore_unmapped: bool = False  # renumber: records without the header are the destination's own, not extra
    schemas: SchemaRewrite | None = None  # the mirror gave keys and values the destination registry's schema IDs

    def check(self) -> SliceCheck:
        return check_kafka_slice(self)


class _MappedRecords:
    """Renumbered destination records as source records, in destination order; strays noted on the way."""

    def __init__(
        self,
        records: Iterable[Record],
        first: int,
        compared_from: int,
        end: int,
        max_differences: int,
        ignore_unmapped: bool = False,
    ):
        self._records = records
        self._ignore_unmapped = ignore_unmapped
        self._first, self._compared_from, self._end = first, compared_from, end
        self._max = max_differences
        self.stray = 0
        self.differences: list[Difference] = []

    def __iter__(self) -> Iterator[Record]:
        for record in self._records:
            offset, headers = split_source_offset(record.headers)
            if offset is None:
                if not self._ignore_unmapped:
                    self._note(Difference(record.offset, "unmapped"))
            elif self._compared_from <= offset < self._end:
                yield replace(record, offset=offset, headers=headers)
            elif not self._first <= offset < self._compared_from:  # (inside it: below the source's log start)
                self._note(Difference(offset, "extra"))

    def _note(self, difference: Difference) -> None:
        self.stray += 1
        if len(self.differences) < self._max:
            self.differences.append(difference)


def check_kafka_slice(work: KafkaSlice, source_consumer: Any = None, destination_consumer: Any = None) -> SliceCheck:
    """Compare the slice; the consumers replace the real ones in tests."""
    compared_from = max(work.first, work.check_from)
    end = max(work.end, compared_from)
    source = records_of_messages(consume_range(work.source, compared_from, min(end, work.source_end), source_consumer))
    if work.schemas is not None:  # compared as the mirror writes them: with the destination's schema IDs
        source = map(rewriter_for(work.schemas).as_written, source)
    skip = work.skip_cluster
    if work.renumbered and skip is not None:
        source = (record for record in source if not copied_from(record.headers, skip))
    if not work.renumbered:
        stored = records_of_messages(consume_range(work.destination, compared_from, end, destination_consumer))
        comparison = compare_range(source, stored, compared_from, end, work.max_differences, KAFKA_DESTINATION_FIELDS)
        return SliceCheck(comparison, ())
    mapped = _MappedRecords(
        records_of_messages(consume_range(work.destination, work.dest_first, work.dest_end, destination_consumer)),
        work.first,
        compared_from,
        end,
        work.max_differences,
        work.ignore_unmapped,
    )
    comparison = compare_range(source, mapped, compared_from, end, work.max_differences, KAFKA_DESTINATION_FIELDS)
    differences = sorted(comparison.differences + tuple(mapped.differences), key=lambda d: d.offset)
    return SliceCheck(
        replace(
            comparison,
            extra=comparison.extra + mapped.stray,
            differences=tuple(differences[: work.max_differences]),
        ),
        (),
    )
