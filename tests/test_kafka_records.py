"""The renumber-mode source-offset header: written as decimal ASCII, read back tolerating foreign headers."""

from __future__ import annotations

from typing import Any

import pytest

from core.kafka_records import (
    SOURCE_OFFSET_HEADER,
    copied_from,
    parse_source_offset,
    source_cluster_header,
    source_offset_header,
    split_source_offset,
)


def test_the_header_round_trips() -> None:
    assert source_offset_header(1234) == (SOURCE_OFFSET_HEADER, b"1234")
    assert parse_source_offset([source_offset_header(1234)]) == 1234


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(SOURCE_OFFSET_HEADER, b"42")], 42),
        ([("other", b"1"), (SOURCE_OFFSET_HEADER, b"0")], 0),
        ([(SOURCE_OFFSET_HEADER, b"7"), ("other", b"1"), (SOURCE_OFFSET_HEADER, b"42")], 42),  # mirrored twice
        ([("other", b"1")], None),
        ([(SOURCE_OFFSET_HEADER, None)], None),
        ([(SOURCE_OFFSET_HEADER, b"not a number")], None),
        (None, None),
    ],
)
def test_parse_source_offset(headers: Any, expected: int | None) -> None:
    assert parse_source_offset(headers) == expected


def test_the_mirrors_own_header_is_split_from_the_records_headers() -> None:
    upstream = (SOURCE_OFFSET_HEADER, b"7")  # written by the mirror before this one (A to B, then B to C)
    assert split_source_offset([upstream, ("k", None), ("k", b"v"), source_offset_header(42)]) == (
        42,
        (upstream, ("k", None), ("k", b"v")),
    )
    assert split_source_offset([source_offset_header(3)]) == (3, None)  # a record without headers of its own
    assert split_source_offset([("k", b"v")]) == (None, (("k", b"v"),))


def test_this_mirrors_cluster_header_goes_with_its_offset_header_and_names_where_a_record_came_from() -> None:
    upstream = [source_offset_header(5), source_cluster_header("C")]  # an earlier hop's
    headers = [("k", b"v"), *upstream, source_offset_header(42), source_cluster_header("A")]
    assert split_source_offset(headers) == (42, (("k", b"v"), *upstream))
    assert copied_from(headers, "C") and copied_from(headers, "A") and not copied_from(headers, "B")
    assert not copied_from(None, "A")
