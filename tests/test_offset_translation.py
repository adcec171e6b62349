"""Renumber mode's translation of a source offset into a destination offset (group offset sync): the first
record at or above it, across holes, markers and records produced by hand, in O(log n) reads."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from core.kafka_records import source_offset_header
from kafka_clients.clients import KafkaClients, KafkaRecord
from sinks.kafka.sink import destination_offset_for
from tests.fakes import FakeClients

TP = TopicPartition("orders", 0)


class RenumberedPartition(FakeClients):
    """Destination offsets → the source offset in each record's header (None: a record without one); offsets
    missing from the map are transaction markers or aborted records, invisible to read_committed."""

    def __init__(self, mapped: dict[int, int | None], log_start: int, end: int) -> None:
        super().__init__()
        self.mapped, self.log_start, self.end = mapped, log_start, end
        self.reads = 0

    async def watermarks(self, tp: TopicPartition, isolation: str) -> tuple[int, int]:
        return self.log_start, self.end

    async def records(self, tp: TopicPartition, first: int, end: int, isolation: str) -> list[KafkaRecord]:
        self.reads += 1
        found = []
        for offset in range(first, min(end, self.end)):
            if offset in self.mapped:
                source = self.mapped[offset]
                headers = () if source is None else (source_offset_header(source),)
                found.append(KafkaRecord(offset, b"k", b"v", headers, 0, create_time=True))
        return found


async def test_an_offset_maps_to_the_first_record_at_or_above_it() -> None:
    # Source offsets 0..9 at destination 0..9; a commit marker at 10; source 12, 13 (11 was a hole) at 11, 12;
    # a record produced by hand at 13; source 14 at 14.
    mapped: dict[int, int | None] = {**{d: d for d in range(10)}, 11: 12, 12: 13, 13: None, 14: 14}
    partition = RenumberedPartition(mapped, log_start=0, end=15)
    assert [await destination_offset_for(partition, TP, s) for s in (0, 5, 9, 10, 11, 12, 14, 15, 99)] == [
        0,
        5,
        9,
        11,  # source 10 was never a record: continue at the next one, source 12
        11,
        11,
        14,
        15,  # everything is there: continue at the end, where the next record will land
        15,
    ]


async def test_the_search_reads_a_logarithmic_number_of_times_and_starts_at_the_log_start() -> None:
    partition = RenumberedPartition({d: 2 * d for d in range(5_000, 100_000)}, log_start=5_000, end=100_000)
    assert await destination_offset_for(partition, TP, 150_001) == 75_001
    assert partition.reads <= 2 * 17 + 2
    assert await destination_offset_for(partition, TP, 0) == 5_000


def _first_at_or_above(mapped: dict[int, int | None], end: int, source_offset: int) -> int:
    """The answer by reading every record: what the search must agree with."""
    for offset in sorted(mapped):
        found = mapped[offset]
        if found is not None and found >= source_offset:
            return offset
    return end


async def test_a_range_restored_without_holes_is_found_in_a_few_reads() -> None:
    # 250 000 records, a transaction marker after each 10 000 (a restore's renumber writes): a binary search read 18
    # or 19 times for each of these; the records found say where the answer lies (2 to 9 reads).
    mapped: dict[int, int | None] = {}
    destination = 0
    for source in range(250_000):
        mapped[destination] = source
        destination += 2 if source % 10_000 == 9_999 else 1
    end = destination
    for source_offset in (0, 1, 62_500, 125_000, 187_501, 249_999, 250_000):
        partition = RenumberedPartition(mapped, log_start=0, end=end)
        assert await destination_offset_for(partition, TP, source_offset) == _first_at_or_above(
            mapped, end, source_offset
        )
        assert partition.reads <= 10, (source_offset, partition.reads)


async def test_any_partition_is_searched_right_in_at_most_about_twice_a_binary_searchs_reads() -> None:
    rng = random.Random(7)
    for _ in range(200):
        # Runs of records mapped one to one, source holes, markers, records produced by hand, in random lengths.
        mapped: dict[int, int | None] = {}
        destination, source = rng.randrange(0, 50), rng.randrange(0, 50)
        log_start = destination
        for _ in range(rng.randrange(1, 40)):
            kind = rng.random()
            run = rng.choice((1, 3, 50, 700))
            for _ in range(run):
                if kind < 0.6:
                    mapped[destination] = source
                    source += 1
                elif kind < 0.75:
                    source += rng.choice((1, 100, 5_000))  # a hole in the source
                    continue
                elif kind < 0.9:
                    pass  # a marker or an aborted record: an offset read_committed never shows
                else:
                    mapped[destination] = None  # produced by hand, without a source offset
                destination += 1
        end = destination
        for source_offset in (0, rng.randrange(0, source + 2), source, source + 1):
            partition = RenumberedPartition(mapped, log_start=log_start, end=end)
            assert await destination_offset_for(partition, TP, source_offset) == _first_at_or_above(
                mapped, end, source_offset
            )
            # Each search step reads a window or a few growing ones (past markers and hand-made records).
            steps = 2 * max(1, end - log_start).bit_length() + 3
            assert partition.reads <= 6 * steps, (partition.reads, steps)


class OneConsumerPartition(KafkaClients):
    """The real `one_partition` over consumers that read a dict of records (aiokafka's calls, in memory),
    counting how many consumers the reads make."""

    def __init__(self, mapped: dict[int, int], end: int) -> None:
        super().__init__("fake:9092", {}, 1_000)
        self.mapped, self.end, self.made = mapped, end, 0
        self.records_made = 0  # record objects the consumers returned

    def consumer(self, isolation: str, group_id: str | None = None) -> Any:
        self.made += 1
        return _started_consumer(self)


class _Consumer:
    def __init__(self, partition: OneConsumerPartition) -> None:
        self._partition, self._position = partition, 0

    def assign(self, tps: list[TopicPartition]) -> None:
        assert tps == [TP]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._position = offset

    async def position(self, tp: TopicPartition) -> int:
        return self._position

    async def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {TP: 0}

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {TP: self._partition.end}

    async def getmany(
        self, tp: TopicPartition, timeout_ms: int, max_records: int | None = None
    ) -> dict[TopicPartition, list[Any]]:
        # A fetch brings 5 records; like aiokafka, at most `max_records` of them are made into records and returned.
        fetched = min(self._position + 5, self._partition.end)
        returned = fetched if max_records is None else min(fetched, self._position + max_records)
        batch = [
            SimpleNamespace(
                offset=o,
                key=b"k",
                value=b"v",
                headers=[source_offset_header(self._partition.mapped[o])],
                timestamp=0,
                timestamp_type=0,
            )
            for o in range(self._position, returned)
        ]
        self._partition.records_made += len(batch)
        self._position = returned
        return {TP: batch}


@contextlib.asynccontextmanager
async def _started_consumer(partition: OneConsumerPartition) -> AsyncIterator[_Consumer]:
    yield _Consumer(partition)


async def test_a_search_reads_through_one_consumer() -> None:
    partition = OneConsumerPartition({d: 3 * d for d in range(2_000)}, end=2_000)
    assert await destination_offset_for(partition, TP, 3_000) == 1_000
    assert await destination_offset_for(partition, TP, 3_001) == 1_001
    assert partition.made == 2
    before = partition.records_made
    assert await partition.records(TP, 10, 13, "read_committed") == [
        KafkaRecord(o, b"k", b"v", (source_offset_header(3 * o),), 0, create_time=True) for o in (10, 11, 12)
    ]
    assert partition.records_made - before == 3, "a read makes no more records than its range holds"
