"""A restore's group positions: the selected groups' archived offsets on the restored partitions, clipped to what
was restored, from every source cluster's newest document; renumber's translated at once."""

from __future__ import annotations

import anyio
from aiokafka import TopicPartition

from commands.restore_groups import DestinationPositions, RestoredRange, plan_positions
from config.model import GroupSelection, KafkaDestination
from core.kafka_records import source_offset_header
from kafka_clients.clients import KafkaRecord
from sinks.archive.group_positions import ArchivedPositions
from tests.fakes import FakeClients


def positions(cluster: str, groups: dict[str, dict[str, dict[str, int]]]) -> ArchivedPositions:
    return ArchivedPositions(cluster, "2026-11-26T00:00:00.000Z", 1, groups, archived={})


RANGES = [
    RestoredRange("orders", 0, "orders-back", first=100, end=1_000),
    RestoredRange("orders", 1, "orders-back", first=0, end=500),
    RestoredRange("payments", 0, "payments", first=0, end=50),
]


def test_the_selected_groups_land_on_the_restored_partitions_clipped_to_the_restored_ranges() -> None:
    documents = [
        positions(
            "prod",
            {
                "billing": {"orders": {"0": 40, "1": 300, "2": 7}},  # 0: behind the range; 2: not restored
                "billing-test": {"orders": {"0": 500}},
                "other": {"orders": {"0": 500}},
            },
        ),
        positions("dr", {"billing-eu": {"payments": {"0": 80}}}),  # past the restored end
    ]
    selection = GroupSelection(groups=["billing.*"], groups_exclude=["billing-test"])
    assert plan_positions(documents, RANGES, selection) == {
        "billing": {("orders-back", 0): 100, ("orders-back", 1): 300},
        "billing-eu": {("payments", 0): 50},
    }
    assert plan_positions(documents, RANGES, GroupSelection(groups=["nobody"])) == {}


class SlowRenumberedPartitions(FakeClients):
    """Every partition renumbered as destination offset = source offset // 2; each read takes a moment, so reads
    that overlap show the translations running at once."""

    def __init__(self) -> None:
        super().__init__()
        self.searches: list[tuple[str, int]] = []
        self.reading = self.most_at_once = 0

    async def watermarks(self, tp: TopicPartition, isolation: str) -> tuple[int, int]:
        self.searches.append((tp.topic, tp.partition))
        return 0, 1_000

    async def records(self, tp: TopicPartition, first: int, end: int, isolation: str) -> list[KafkaRecord]:
        self.reading += 1
        self.most_at_once = max(self.most_at_once, self.reading)
        await anyio.sleep(0.001)
        self.reading -= 1
        return [KafkaRecord(o, b"k", b"v", (source_offset_header(2 * o),), 0, True) for o in range(first, end)]


async def test_renumbered_positions_are_translated_at_once_each_partition_and_offset_once() -> None:
    planned = {
        "audit": {("orders", 0): 100, ("orders", 1): 300},
        "billing": {("orders", 0): 100, ("orders", 1): 50},  # orders-0 at 100 as audit's: searched once
        "search": {("orders", 2): 999},
    }
    clients = SlowRenumberedPartitions()
    destination = KafkaDestination(bootstrap_servers="b:9092", offsets="renumber")
    translated = await DestinationPositions(destination, clients).of(planned)
    assert translated == {
        "audit": {("orders", 0): 50, ("orders", 1): 150},
        "billing": {("orders", 0): 50, ("orders", 1): 25},
        "search": {("orders", 2): 500},
    }
    assert sorted(clients.searches) == [("orders", 0), ("orders", 1), ("orders", 1), ("orders", 2)]
    assert clients.most_at_once > 1
    preserved = KafkaDestination(bootstrap_servers="b:9092", offsets="preserve")
    assert await DestinationPositions(preserved, clients).of(planned) == planned
