"""Turn a chunk's Arrow rows into Kafka record batches, byte for byte.

Keys, values (null included), headers (null values included) and timestamps are copied as read. The
timestamp is sent as the record's CreateTime: a destination topic with
`message.timestamp.type=LogAppendTime` replaces it with the broker's clock, as Kafka always does, and
a source record that carried LogAppendTime arrives as CreateTime with the same value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

SOURCE_OFFSET_HEADER = "mirror-v3.source-offset"

Header = tuple[str, bytes | None]


class RecordBatchBuilder(Protocol):
    """What aiokafka's `BatchBuilder` offers (`producer.create_batch()`)."""

    def append(self, *, timestamp: int | None, key: bytes | None, value: bytes | None, headers: Any) -> Any: ...

    def size(self) -> int: ...

    def record_count(self) -> int: ...


@dataclass
class PreparedBatch:
    builder: RecordBatchBuilder
    first_source_offset: int
    last_source_offset: int
    record_count: int


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


def first_hole(table: pa.Table, first_offset: int, last_offset: int) -> tuple[int, int] | None:
    """The first run of offsets in [first_offset, last_offset] with no row, if any."""
    expected = first_offset
    for offset in table.column("offset").to_pylist():
        if offset != expected:
            return expected, offset - 1
        expected = offset + 1
    if expected <= last_offset:
        return expected, last_offset
    return None


def build_batches(
    table: pa.Table,
    new_builder: Callable[[], RecordBatchBuilder],
    *,
    add_source_offset: bool,
) -> list[PreparedBatch]:
    """Every row of `table`, in order, packed into as few batches as the builder's size allows."""
    if table.num_rows == 0:
        return []
    offsets = table.column("offset").to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    # Spark's Kafka source keeps millisecond timestamps as microseconds.
    timestamps = pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist()
    header_lists = _headers(table)

    batches: list[PreparedBatch] = []
    builder = new_builder()
    batch_first = offsets[0]
    count = 0
    for index, offset in enumerate(offsets):
        headers = header_lists[index] if header_lists is not None else []
        if add_source_offset:
            headers = [*headers, source_offset_header(offset)]
        timestamp = timestamps[index]
        if builder.append(timestamp=timestamp, key=keys[index], value=values[index], headers=headers) is None:
            batches.append(PreparedBatch(builder, batch_first, offsets[index - 1], count))
            builder, batch_first, count = new_builder(), offset, 0
            # A fresh batch always takes its first record, however large (the broker judges its size).
            builder.append(timestamp=timestamp, key=keys[index], value=values[index], headers=headers)
        count += 1
    batches.append(PreparedBatch(builder, batch_first, offsets[-1], count))
    return batches


def _headers(table: pa.Table) -> list[list[Header]] | None:
    """Per-row header lists, or None when no row has any (the common case, and the fast one)."""
    column = table.column("headers")
    lengths = pc.list_value_length(column)
    if column.null_count == len(column) or pc.max(lengths).as_py() in (None, 0):
        return None
    return [[(h["key"], h["value"]) for h in row] if row else [] for row in column.to_pylist()]
