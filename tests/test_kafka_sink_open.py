"""The Kafka sink's checks before it writes anything, against an in-memory destination cluster: every refusal
variant names the offsets and the way out; an aligned preserve destination continues at its end offset.

One case of each class also runs through the CLI against real brokers (e2e/test_kafka_destination.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka import TopicPartition

from kafka_clients.clients import KafkaRecord
from sinks.base import DestinationError
from sinks.kafka.sink import KafkaSink, KafkaSinkSettings
from tests.fakes import FakeClients


def record(offset: int, value: bytes, timestamp_ms: int = 1_700_000_000_000) -> KafkaRecord:
    return KafkaRecord(offset, b"k", value, (), timestamp_ms, create_time=True)


class FakeCluster(FakeClients):
    """Topics as {name: {partition: {offset: record}}} with explicit log start and end offsets."""

    def __init__(self, topics: dict[str, dict[int, dict[int, KafkaRecord]]], ends: dict[tuple[str, int], int]) -> None:
        super().__init__()
        self.topics = topics
        self.ends = ends
        self.starts: dict[tuple[str, int], int] = {}

    async def partition_count(self, topic: str) -> int | None:
        return len(self.topics[topic]) if topic in self.topics else None

    async def watermarks(self, tp: TopicPartition, isolation: str) -> tuple[int, int]:
        key = (tp.topic, tp.partition)
        return self.starts.get(key, 0), self.ends.get(key, 0)

    async def record_at(self, tp: TopicPartition, offset: int, isolation: str) -> KafkaRecord | None:
        return self.topics[tp.topic][tp.partition].get(offset)


class FakeSource:
    def __init__(self, log_start: int = 0, records: dict[int, KafkaRecord] | None = None) -> None:
        self._log_start = log_start
        self._records = records or {}

    async def log_start(self) -> int:
        return self._log_start

    async def record_at(self, offset: int) -> KafkaRecord | None:
        return self._records.get(offset)


def sink(cluster: FakeCluster, source: FakeSource, partition: int = 0, offsets: Any = "preserve") -> KafkaSink:
    settings = KafkaSinkSettings(
        bootstrap_servers="fake:9092",
        client={},
        offsets=offsets,
        compression=None,
        max_batch_bytes=1 << 20,
        request_timeout_ms=1_000,
        transaction_id_prefix="mirror-v3",
    )
    return KafkaSink(settings, "orders", partition, source, "orders-0", clients=cluster)


async def refusal(cluster: FakeCluster, source: FakeSource, partition: int = 0) -> str:
    with pytest.raises(DestinationError) as caught:
        await sink(cluster, source, partition).open()
    return str(caught.value)


async def test_a_missing_topic_names_the_partitions_to_create() -> None:
    message = await refusal(FakeCluster({}, {}), FakeSource(), partition=2)
    assert "destination topic 'orders' does not exist on fake:9092" in message
    assert "create it with at least 3 partition(s)" in message


async def test_too_few_partitions_name_the_one_needed() -> None:
    message = await refusal(FakeCluster({"orders": {0: {}, 1: {}}}, {}), FakeSource(), partition=2)
    assert "has 2 partition(s); partition 2 is needed: add partitions to it" in message


async def test_an_empty_destination_cannot_take_a_source_that_starts_above_zero() -> None:
    message = await refusal(FakeCluster({"orders": {0: {}}}, {}), FakeSource(log_start=40))
    assert "is empty (end offset 0) but source orders-0 begins at offset 40" in message
    assert "use offsets: renumber" in message


async def test_a_destination_with_other_data_is_refused() -> None:
    cluster = FakeCluster({"orders": {0: {4: record(4, b"foreign")}}}, {("orders", 0): 5})
    message = await refusal(cluster, FakeSource(records={4: record(4, b"ours")}))
    assert "ends at offset 5, but its record at offset 4 differs from source orders-0 offset 4" in message


async def test_a_destination_ending_in_a_hole_is_refused() -> None:
    message = await refusal(FakeCluster({"orders": {0: {}}}, {("orders", 0): 5}), FakeSource())
    assert "ends at offset 5 but holds no record at offset 4" in message


async def test_a_source_hole_where_the_destination_ends_cannot_be_verified() -> None:
    cluster = FakeCluster({"orders": {0: {4: record(4, b"ours")}}}, {("orders", 0): 5})
    message = await refusal(cluster, FakeSource())
    assert "source orders-0 has no record at offset 4 to compare it with" in message
    assert "use offsets: renumber" in message


async def test_an_aligned_destination_continues_at_its_end() -> None:
    cluster = FakeCluster({"orders": {0: {4: record(4, b"ours")}}}, {("orders", 0): 5})
    assert await sink(cluster, FakeSource(records={4: record(4, b"ours")})).open() == 5
    empty = FakeCluster({"orders": {0: {}}}, {})
    assert await sink(empty, FakeSource()).open() is None  # nothing yet: the first record must land at 0
