"""What a table records of a blob file: its size, rows, bytes per column, row-group starts and the bounds of the
columns the blob keeps statistics of (`partition`, `offset`, `timestamp`: what engines skip files by).

Taken once from the Parquet footer: by the Spark task that wrote the blob (its writer holds the footer after
closing), so a table commit reads no file; or from a footer read back, for a blob whose writer's statistics are not
at hand (an archive joining a table, a table catching up after a restart). Either way the same function, so a blob
gets the same statistics whichever way it comes.

Cost: one pass over row groups × columns of the footer (an archive's blob: 8 columns, one row group per 32 MiB).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

BOUNDED_COLUMNS = ("partition", "offset", "timestamp")  # the columns whose bounds a table records
_PHYSICAL_INTEGERS = {"INT32", "INT64"}
_MICROS_PER_UNIT = {"milliseconds": 1000, "microseconds": 1}


@dataclass(frozen=True)
class ColumnBounds:
    """One column's statistics over the whole file: lowest and highest value (integers; a timestamp in
    microseconds since 1970-01-01 UTC) and how many of its values are null."""

    column: str
    low: int
    high: int
    nulls: int


@dataclass(frozen=True)
class FileStatistics:
    size: int  # bytes of the file
    records: int
    column_sizes: tuple[tuple[str, int], ...]  # Parquet column path -> its compressed bytes over all row groups
    split_offsets: tuple[int, ...]  # where each row group starts
    bounds: tuple[ColumnBounds, ...]  # of BOUNDED_COLUMNS that the file keeps statistics of and has rows in

    def bound(self, column: str) -> ColumnBounds | None:
        return next((found for found in self.bounds if found.column == column), None)


def file_statistics(footer: pq.FileMetaData, size: int) -> FileStatistics:
    """The statistics of a Parquet file from its footer. A column's bounds are kept only when every row group has
    them (a file partly without cannot be bounded), and only for integer columns and microsecond or millisecond
    timestamps (no other kind is an archive's)."""
    sizes: dict[str, int] = {}
    splits: list[int] = []
    lows: dict[str, int] = {}
    highs: dict[str, int] = {}
    nulls: dict[str, int] = {}
    scale: dict[str, int | None] = {}  # bounded column -> microseconds per value (1: an integer); None: unbounded
    for index in range(footer.num_row_groups):
        group = footer.row_group(index)
        first = group.column(0)
        dictionary = first.dictionary_page_offset
        starts_with_dictionary = first.has_dictionary_page and dictionary < first.data_page_offset
        splits.append(dictionary if starts_with_dictionary else first.data_page_offset)
        for position in range(group.num_columns):
            chunk = group.column(position)
            name = chunk.path_in_schema
            sizes[name] = sizes.get(name, 0) + chunk.total_compressed_size
            if name not in BOUNDED_COLUMNS or scale.get(name, 1) is None:
                continue
            stats = chunk.statistics if chunk.is_stats_set else None
            if stats is None or not stats.has_min_max or not stats.has_null_count:
                scale[name] = None  # a row group without: the file's bounds are unknown
                continue
            factor = scale.get(name) or scale.setdefault(name, _micros_per_value(stats))
            if factor is None:
                continue
            low, high = stats.min_raw * factor, stats.max_raw * factor
            lows[name] = min(lows.get(name, low), low)
            highs[name] = max(highs.get(name, high), high)
            nulls[name] = nulls.get(name, 0) + stats.null_count
    bounds = tuple(
        ColumnBounds(name, lows[name], highs[name], nulls[name])
        for name in BOUNDED_COLUMNS
        if name in lows and scale.get(name) is not None
    )
    return FileStatistics(size, footer.num_rows, tuple(sizes.items()), tuple(splits), bounds)


def _micros_per_value(stats: Any) -> int | None:
    """1 for an integer column, the unit's microseconds for a timestamp; None: no bounds of it are kept."""
    if stats.physical_type not in _PHYSICAL_INTEGERS:
        return None
    logical = stats.logical_type
    if logical.type == "TIMESTAMP":
        return _MICROS_PER_UNIT.get(json.loads(logical.to_json()).get("timeUnit", ""))
    return 1 if logical.type in {"NONE", "INT"} else None
