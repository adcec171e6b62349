"""The renumber-mode header that carries each record's source offset.

Written by the tasks that produce into the Kafka destination (`workers.kafka_produce`), read back by
the sink to find its position when the group's committed offset is gone.
"""

from __future__ import annotations

from typing import Any

SOURCE_OFFSET_HEADER = "mirror-v3.source-offset"

Header = tuple[str, bytes | None]


def source_offset_header(offset: int) -> Header:
    """The renumber-mode header: the source offset in decimal ASCII (readable in any console tool)."""
    return (SOURCE_OFFSET_HEADER, str(offset).encode("ascii"))


def parse_source_offset(headers: Any) -> int | None:
    """The source offset a renumbered record carries, or None if it has no (valid) header."""
    return split_source_offset(headers)[0]


def split_source_offset(headers: Any) -> tuple[int | None, tuple[Header, ...] | None]:
    """(the source offset, the record's own headers): the header this mirror wrote is the *last* one with its
    name, since a record mirrored twice (A to B to C) carries B's too, before it. Without that header, or with
    one that is not a number, the offset is None. Own headers that are none at all are None, as librdkafka gives
    a record without headers."""
    found = list(headers or ())
    for index in range(len(found) - 1, -1, -1):
        key, value = found[index]
        if key != SOURCE_OFFSET_HEADER:
            continue
        if value is None:
            return None, _own(found)
        try:
            offset = int(value.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            return None, _own(found)
        return offset, _own(found[:index] + found[index + 1 :])
    return None, _own(found)


def _own(headers: list[Header]) -> tuple[Header, ...] | None:
    return tuple(headers) or None
