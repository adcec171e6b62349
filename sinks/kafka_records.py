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
    for key, value in headers or ():
        if key == SOURCE_OFFSET_HEADER and value is not None:
            try:
                return int(value.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                return None
    return None
