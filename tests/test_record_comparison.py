"""The record-by-record comparison behind `verify`: every offset of a range lands in exactly one count."""

from __future__ import annotations

import dataclasses

import pytest

from workers.record_comparison import (
    Comparison,
    Difference,
    RangeComparer,
    RangesApartError,
    Record,
    SourceOrderError,
    WindowOutOfPlaceError,
    compare_range,
)


def record(offset: int, value: bytes | None = b"v", **changes: object) -> Record:
    base = Record(offset, b"k%d" % offset, value, (("h", b"1"), ("h", None)), 1_700_000_000_000 + offset, 0)
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_an_exact_copy_with_holes_is_equal() -> None:
    source = [record(o) for o in range(10, 30) if o % 4]  # holes at 12, 16, 20, 24, 28
    result = compare_range(source, list(source), 10, 30)
    assert result == Comparison(10, 30, equal=15, holes=5)
    assert result.ok


def test_each_kind_of_difference_is_counted_and_named() -> None:
    source = [record(o) for o in range(0, 10)]
    destination = [record(o) for o in range(0, 10) if o != 3]  # 3 missing
    destination[0] = record(0, value=b"changed")
    destination[1] = record(1, headers=(("h", None), ("h", b"1")))  # header order matters
    destination[4] = record(5, timestamp_ms=1, timestamp_type=1)
    destination.insert(6, record(6))  # 6 twice
    destination.append(record(12))  # beyond the source's records, inside the range
    result = compare_range(source, destination, 0, 13)
    assert (result.equal, result.different, result.missing, result.extra, result.holes) == (6, 3, 1, 2, 2)
    assert result.differences == (
        Difference(0, "different", ("value",)),
        Difference(1, "different", ("headers",)),
        Difference(3, "missing"),
        Difference(5, "different", ("timestamp", "timestamp_type")),
        Difference(6, "duplicate"),
        Difference(12, "extra"),
    )
    assert not result.ok


def test_null_headers_differ_from_an_empty_list_and_null_keys_from_empty_ones() -> None:
    source = [record(0, headers=None), record(1, key=None), record(2, value=None)]
    destination = [record(0, headers=()), record(1, key=b""), record(2, value=None)]
    result = compare_range(source, destination, 0, 3)
    assert [d.fields for d in result.differences] == [("headers",), ("key",)]
    assert result.equal == 1


def test_records_outside_the_range_are_ignored_and_differences_are_capped() -> None:
    source = [record(o) for o in range(0, 100)]
    result = compare_range(source, [], 10, 60, max_differences=3)
    assert (result.missing, result.holes) == (50, 0)
    assert [d.offset for d in result.differences] == [10, 11, 12]


def test_consecutive_ranges_join_into_one() -> None:
    source = [record(o) for o in range(0, 20)]
    left = compare_range(source, source[:10], 0, 10)
    right = compare_range(source, source[10:15], 10, 20, max_differences=2)
    joined = left.joined(right, max_differences=4)
    assert (joined.first, joined.end, joined.equal, joined.missing) == (0, 20, 15, 5)
    assert [d.offset for d in joined.differences] == [15, 16]
    with pytest.raises(RangesApartError) as caught:
        left.joined(compare_range(source, source, 11, 20), 4)
    assert (caught.value.end, caught.value.following_first) == (10, 11)


def test_a_source_that_repeats_an_offset_is_an_error() -> None:
    with pytest.raises(SourceOrderError) as caught:
        compare_range([record(0), record(1), record(1)], [], 0, 5)
    assert (caught.value.offset, caught.value.previous) == (1, 1)


def test_windows_fed_one_by_one_count_as_the_whole_range_and_a_misplaced_window_is_refused() -> None:
    source = [record(o) for o in range(0, 30) if o % 5]  # holes at 0, 5, 10, 15, 20, 25
    destination = [r for r in source if r.offset != 7] + [record(8)]  # 7 missing; 8 again, after 29: a duplicate
    comparer = RangeComparer(0, 30)
    comparer.count_equal(4, 1, 4)  # [1, 4] known equal column-wise
    comparer.merge([r for r in source if 4 < r.offset < 20], [r for r in destination if 4 < r.offset < 20])
    comparer.merge([r for r in source if r.offset >= 20], [r for r in destination if r.offset >= 20])
    whole = compare_range(source, destination, 0, 30)
    assert comparer.result() == whole
    assert (whole.equal, whole.missing, whole.extra, whole.holes) == (23, 1, 1, 6)
    with pytest.raises(WindowOutOfPlaceError) as refused:
        comparer.count_equal(2, 28, 29)  # at or below what was compared already
    assert (refused.value.first_offset, refused.value.last) == (28, 29)
