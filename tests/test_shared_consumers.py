"""One consumer per cluster per task: the small ranges a task announced are fetched together, each read stays
exact (holes, the end by position, deleted offsets), and one partition's failure is its own."""

from __future__ import annotations

from typing import Any

import pytest

from source.range_reader import PREFETCH_BYTES, OffsetsDeletedError, SharedConsumers
from tests.fakes import FakeClusterConsumer, FakePartitionSource


def partitions(count: int, records: int, holes_every: int = 0) -> list[FakePartitionSource]:
    found = []
    for partition in range(count):
        source = FakePartitionSource(partition=partition)
        source.append(records, holes_every=holes_every)
        found.append(source)
    return found


def offsets(consumers: SharedConsumers, source: FakePartitionSource, first: int, end: int) -> list[int]:
    return [m.offset() for batch in consumers.read(source.partition_spec(), first, end) for m in batch]


def test_announced_ranges_are_fetched_together_and_each_read_is_exact() -> None:
    sources = partitions(3, 100, holes_every=7)
    made: list[FakeClusterConsumer] = []

    def consumer(_: Any) -> FakeClusterConsumer:
        made.append(FakeClusterConsumer(sources, batch=5))
        return made[-1]

    consumers = SharedConsumers(consumer)
    ranges = [(sources[0], 10, 42), (sources[1], 0, 100), (sources[2], 50, 97)]  # 97: ends after a hole (96)
    for source, first, end in ranges:
        consumers.announce(source.partition_spec(), first, end, 1_000)
    for source, first, end in ranges:
        assert offsets(consumers, source, first, end) == [o for o in range(first, end) if o in source.records]
    assert len(made) == 1 and made[0].assignments == 1  # one consumer, one assignment for all three
    # Read again (a renumber transaction run again reads its range again): streamed, and as exact.
    assert offsets(consumers, sources[1], 0, 100) == [o for o in range(100) if o in sources[1].records]


def test_one_partitions_deleted_offsets_fail_only_its_read() -> None:
    sources = partitions(3, 50)
    sources[1].delete_before(20)
    consumers = SharedConsumers(lambda _: FakeClusterConsumer(sources))
    for source in sources:
        consumers.announce(source.partition_spec(), 0, 50, 500)
    assert offsets(consumers, sources[0], 0, 50) == list(range(50))
    with pytest.raises(OffsetsDeletedError) as caught:
        offsets(consumers, sources[1], 0, 50)
    assert (caught.value.position, caught.value.log_start) == (0, 20)
    assert offsets(consumers, sources[2], 0, 50) == list(range(50))


def test_a_range_larger_than_a_prefetch_streams_and_unannounced_ranges_are_read_alone() -> None:
    sources = partitions(2, 200)
    consumers = SharedConsumers(lambda _: FakeClusterConsumer(sources, batch=7))
    consumers.announce(sources[0].partition_spec(), 0, 200, PREFETCH_BYTES + 1)
    batches = list(consumers.read(sources[0].partition_spec(), 0, 200))
    assert len(batches) > 1 and [m.offset() for b in batches for m in b] == list(range(200))
    assert offsets(consumers, sources[1], 5, 15) == list(range(5, 15))
