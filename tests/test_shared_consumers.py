"""One consumer per cluster per task: the small ranges a task announced are fetched together, each read stays
exact (holes, the end by position, deleted offsets), and one partition's failure is its own."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from core.errors import SourceUnavailableError
from source.range_reader import (
    CONSUME_WAIT_S,
    PREFETCH_BYTES,
    STALLED_CLUSTER_PATIENCE_S,
    OffsetsDeletedError,
    ReadStalledError,
    SharedConsumers,
)
from tests.fakes import FakeClusterConsumer, FakeKafkaError, FakePartitionSource


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


class Ticks:
    """A monotonic clock that moves only by what the fake consumer says it waited."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def wait(self, seconds: float) -> None:
        self.now += seconds


def test_a_partition_whose_broker_stops_answering_is_given_up_after_its_stall_timeout_alone() -> None:
    """One silent partition among three read together: the others' records come whole, it fails with the facts of
    where it stood, after its stall timeout (5 s) of waiting and no longer."""
    sources = partitions(3, 40)
    ticks = Ticks()
    consumers = SharedConsumers(
        lambda _: FakeClusterConsumer(sources, batch=8, silent=[("t", 1)], waited=ticks.wait), ticks
    )
    for source in sources:
        consumers.announce(source.partition_spec(), 0, 40, 400)
    assert offsets(consumers, sources[0], 0, 40) == list(range(40))
    waited = ticks.now
    assert 5.0 < waited <= 5.0 + 2 * CONSUME_WAIT_S
    with pytest.raises(ReadStalledError) as caught:
        offsets(consumers, sources[1], 0, 40)
    stalled = caught.value
    assert (stalled.source, stalled.offset, stalled.end, stalled.stalled_s, stalled.streamed) == (
        "t-1",
        0,
        40,
        5.0,
        False,
    )
    assert isinstance(stalled, SourceUnavailableError)  # unavailability: its mirror asks again
    assert offsets(consumers, sources[2], 0, 40) == list(range(40))
    assert ticks.now == waited  # the others were read in the same fetches: no more waiting


def test_after_one_stall_the_tasks_later_reads_of_that_cluster_wait_a_moment_not_a_stall_timeout_each() -> None:
    sources = partitions(4, 30)
    ticks = Ticks()
    silent = [("t", 0), ("t", 2), ("t", 3)]
    consumers = SharedConsumers(lambda _: FakeClusterConsumer(sources, silent=silent, waited=ticks.wait), ticks)
    for source in sources:  # each range a prefetch of its own: four fetches one after the other
        consumers.announce(source.partition_spec(), 0, 30, PREFETCH_BYTES // 2 + 1)
    with pytest.raises(ReadStalledError):
        offsets(consumers, sources[0], 0, 30)
    first_stall = ticks.now
    assert offsets(consumers, sources[1], 0, 30) == list(range(30))  # its broker answers: read at once
    for source in sources[2:]:
        with pytest.raises(ReadStalledError) as caught:
            offsets(consumers, source, 0, 30)
        assert caught.value.stalled_s == STALLED_CLUSTER_PATIENCE_S
    assert ticks.now - first_stall <= 2 * (STALLED_CLUSTER_PATIENCE_S + 2 * CONSUME_WAIT_S)


def test_a_streamed_read_has_its_own_stall_timeout_and_says_it_streamed() -> None:
    """A range larger than a prefetch streams into its write; one whose write cannot be given up midway (Kafka
    preserve) waits out the longer `stream_stall_timeout_s`."""
    sources = partitions(1, 50)
    ticks = Ticks()
    consumers = SharedConsumers(lambda _: FakeClusterConsumer(sources, silent=[("t", 0)], waited=ticks.wait), ticks)
    spec = dataclasses.replace(sources[0].partition_spec(), stream_stall_timeout_s=30.0)
    with pytest.raises(ReadStalledError) as caught:
        list(consumers.read(spec, 0, 50))
    assert caught.value.streamed and caught.value.stalled_s == 30.0
    assert 30.0 < ticks.now <= 30.0 + 2 * CONSUME_WAIT_S


class BrokersDown(FakeClusterConsumer):
    """Every broker of the cluster refuses its connections: librdkafka serves its client-level error to the
    error_cb inside consume, and sends nothing."""

    consumers: SharedConsumers

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        found = super().consume(num_messages, timeout)
        source = FakePartitionSource().partition_spec()  # the cluster's (every fake partition shares it)
        self.consumers.client_error(source, FakeKafkaError(-187, "1/1 brokers are down"))
        return found


def test_when_every_broker_is_down_reads_are_given_up_at_once_unless_their_write_cannot_be() -> None:
    sources = partitions(2, 20)
    ticks = Ticks()

    def down(silent: list[tuple[str, int]]) -> SharedConsumers:
        made: list[SharedConsumers] = []

        def make(_: Any) -> BrokersDown:
            consumer = BrokersDown(sources, silent=silent, waited=ticks.wait)
            consumer.consumers = made[0]
            return consumer

        made.append(SharedConsumers(make, ticks))
        return made[0]

    consumers = down([("t", 0), ("t", 1)])
    for source in sources:
        consumers.announce(source.partition_spec(), 0, 20, 200)
    for source in sources:
        with pytest.raises(ReadStalledError) as caught:
            offsets(consumers, source, 0, 20)
        assert caught.value.last_error == "1/1 brokers are down" and caught.value.stalled_s < 1.0
        assert caught.value.brokers_down
    assert ticks.now < 1.0  # not a stall timeout
    preserve = dataclasses.replace(sources[0].partition_spec(), stream_stall_timeout_s=30.0)
    with pytest.raises(ReadStalledError) as waited:
        list(down([("t", 0)]).read(preserve, 0, 20))
    assert waited.value.stalled_s == 30.0  # a Kafka preserve backlog read waits the outage out
