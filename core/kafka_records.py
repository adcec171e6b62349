"""The renumber-mode headers: each record's source offset, and the cluster it was copied from.

Written by the tasks that produce into the Kafka destination (`sinks.kafka.produce`), right after the
record's own headers: the offset, then the cluster. The sink reads the offset back to find its position
when the group's committed offset is gone; a mirror skips a record whose cluster header names its own
destination (it came from there), so two mirrors in opposite directions never copy a record back.
"""

from __future__ import annotations

from typing import Any

SOURCE_OFFSET_HEADER = "mirror-v3.source-offset"
SOURCE_CLUSTER_HEADER = "mirror-v3.source-cluster"

Header = tuple[str, bytes | None]


def source_offset_header(offset: int) -> Header:
    """The renumber-mode header: the source offset in decimal ASCII (readable in any console tool)."""
    return (SOURCE_OFFSET_HEADER, str(offset).encode("ascii"))


def source_cluster_header(cluster_id: str) -> Header:
    """The cluster a record was copied from: its Kafka cluster id (the same whatever address reaches it)."""
    return (SOURCE_CLUSTER_HEADER, cluster_id.encode("utf-8"))


def copied_from(headers: Any, cluster_id: str) -> bool:
    """Whether a mirror copied this record from cluster `cluster_id`, on any hop of its way."""
    wanted = cluster_id.encode("utf-8")
    return any(key == SOURCE_CLUSTER_HEADER and value == wanted for key, value in headers or ())


def parse_source_offset(headers: Any) -> int | None:
    """The source offset a renumbered record carries, or None if it has no (valid) header."""
    return split_source_offset(headers)[0]


def split_source_offset(headers: Any) -> tuple[int | None, tuple[Header, ...] | None]:
    """(the source offset, the record's own headers): the header this mirror wrote is the *last* one with its
    name, since a record mirrored twice (A to B to C) carries B's too, before it; the cluster header right after
    it is this mirror's too. Without that header, or with one that is not a number, the offset is None. Own
    headers that are none at all are None, as librdkafka gives a record without headers."""
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
        after = index + 1
        if after < len(found) and found[after][0] == SOURCE_CLUSTER_HEADER:
            after += 1
        return offset, _own(found[:index] + found[after:])
    return None, _own(found)


def _own(headers: list[Header]) -> tuple[Header, ...] | None:
    return tuple(headers) or None
