"""An archive's records compared with the source's, window by window, for `verify` of a blob destination.

The archive side comes as row groups of KAFKA_SCHEMA (Arrow columns), the source side as lists of librdkafka
messages. Each row group is one window: its rows inside the compared range, and every source message below the
window's end (its last offset + 1). Where both sides hold the same offsets and every compared column is equal
(whole-array comparisons in Arrow and numpy), the window counts as equal with no Python object per record;
otherwise it is compared record by record (`RangeComparer.merge`), which names each difference. Either way the
counts are those of `compare_range` over the whole range: a window called equal column-wise is one the record
comparison calls equal, because each column is built from the very values a `Record` holds (timestamps in ms on
both sides, headers as lists of (key, value) with a null list apart from an empty one, keys and values as bytes).

Cost per record: five method calls on the source message and their conversion into Arrow and numpy arrays; a
window that differs pays the record comparison. Measured in-process on one partition of 300 000 x 1 KiB records (a real
broker, a filesystem archive): 7.3-7.6 µs of CPU per record for the whole verify task, librdkafka's consume 38 % of
it, against 16-18 µs with every record built and compared in Python. Memory: one row group and one consumer batch.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from core.messages import headers_column
from workers.archive_records import records_of_batch
from workers.record_comparison import Comparison, RangeComparer, records_of_messages


class SourceWindows:
    """The source's messages of a range (`consume_range`: only the range's, their offsets strictly increasing, or
    the read fails), handed out in consecutive windows (`below`)."""

    def __init__(self, batches: Iterable[list[Any]]) -> None:
        self._batches = iter(batches)
        self._messages: list[Any] = []
        self._offsets: list[int] = []
        self._taken = 0  # of the held messages

    def below(self, end: int) -> tuple[list[Any], list[int]]:
        """The next messages whose offsets are below `end`, and their offsets."""
        messages: list[Any] = []
        offsets: list[int] = []
        while True:
            cut = bisect_left(self._offsets, end, self._taken)
            messages += self._messages[self._taken : cut]
            offsets += self._offsets[self._taken : cut]
            self._taken = cut
            if cut < len(self._offsets) or not self._hold_next():
                return messages, offsets

    def _hold_next(self) -> bool:
        for batch in self._batches:
            if batch:
                self._messages, self._offsets, self._taken = batch, [m.offset() for m in batch], 0
                return True
        return False


def _headers_array(listed: list[Any]) -> pa.Array:
    """Header lists as KAFKA_SCHEMA's headers column (None stays a null list, as the archive writes it). List
    comprehensions and numpy rather than one loop appending per header (half the time)."""
    lengths = np.fromiter((0 if headers is None else len(headers) for headers in listed), np.int32, len(listed))
    ends = np.zeros(len(listed) + 1, dtype=np.int32)
    np.cumsum(lengths, out=ends[1:])
    pairs = [pair for headers in listed if headers for pair in headers]
    nulls = np.fromiter((headers is None for headers in listed), bool, len(listed))
    return headers_column([name for name, _ in pairs], [data for _, data in pairs], ends, nulls)


def columns_equal(messages: list[Any], rows: pa.RecordBatch) -> bool:
    """Whether the messages and the rows (same offsets, same order) are equal on every compared field."""
    if not pa.array([m.key() for m in messages], pa.binary()).equals(rows.column("key")):
        return False
    if not pa.array([m.value() for m in messages], pa.binary()).equals(rows.column("value")):
        return False
    stamps, kinds = rows.column("timestamp"), rows.column("timestampType")
    if stamps.null_count or kinds.null_count:
        return False  # (the record comparison says what that is)
    # librdkafka's (type, ms); its type ids are one above Kafka's, which the archive keeps. fromiter over the flat
    # pairs: np.array over a list of tuples inspects each tuple as a sequence (measured 4x the time).
    pairs = chain.from_iterable([m.timestamp() for m in messages])
    source_stamps = np.fromiter(pairs, dtype=np.int64, count=2 * len(messages)).reshape(-1, 2)
    if not np.array_equal(source_stamps[:, 1], stamps.cast(pa.int64()).to_numpy() // 1000):
        return False
    if not np.array_equal(source_stamps[:, 0] - 1, kinds.to_numpy()):
        return False
    listed = [m.headers() for m in messages]
    headers = rows.column("headers")
    if headers.null_count == len(headers):
        return all(h is None for h in listed)
    return bool(_headers_array(listed).equals(headers))


class WindowedComparison:
    """Compare [first, end) of the source with the archive's row groups, fed in the chain's order (`row_group`),
    then `result`."""

    def __init__(self, source: SourceWindows, first: int, end: int, max_differences: int) -> None:
        self._source = source
        self._comparer = RangeComparer(first, end, max_differences)

    def row_group(self, rows: pa.RecordBatch, offsets: np.ndarray, offsets_sound: bool) -> None:
        """The next row group of the archive. `offsets`: its offset column; `offsets_sound`: whether they passed the
        file checks (strictly increasing, inside the blob's name), which the column-wise comparison relies on."""
        first, end = self._comparer.first, self._comparer.end
        inside = (offsets >= first) & (offsets < end)
        if not inside.any():
            return
        window_end = max(int(offsets[inside].max()) + 1, self._comparer.last["destination"] + 1)
        messages, source_offsets = self._source.below(window_end)
        if offsets_sound:
            low, high = (int(i) for i in np.searchsorted(offsets, (first, end)))
            within = rows.slice(low, high - low)
            held = offsets[low:high]
            if (
                held[0] > self._comparer.last["destination"]
                and len(source_offsets) == len(held)
                and np.array_equal(np.asarray(source_offsets, dtype=np.int64), held)
                and columns_equal(messages, within)
            ):
                self._comparer.count_equal(len(held), int(held[0]), int(held[-1]))
                return
        self._comparer.merge(records_of_messages([messages]), records_of_batch(rows))

    def result(self) -> Comparison:
        messages, _ = self._source.below(self._comparer.end)  # what no row group reached: missing
        self._comparer.merge(records_of_messages([messages]), ())
        return self._comparer.result()
