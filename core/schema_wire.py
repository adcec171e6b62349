"""The schema registry's wire format of a record key or value: a zero magic byte, the schema's ID as 4 bytes (big
endian), then the serialized data. Anything else (a shorter value, another first byte, null) is not in the format
and is copied as it is. Pure; each call looks at the first five bytes only."""

from __future__ import annotations

MAGIC = 0
HEADER = 5  # the magic byte and the ID


def schema_id(data: bytes | None) -> int | None:
    """The schema ID `data` carries, or None when it is not in the wire format."""
    if data is None or len(data) < HEADER or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:HEADER], "big")


def with_schema_id(data: bytes, new_id: int) -> bytes:
    """`data` (in the wire format) carrying `new_id` instead of its own ID; the serialized data is unchanged."""
    return b"\0" + new_id.to_bytes(4, "big") + data[HEADER:]
