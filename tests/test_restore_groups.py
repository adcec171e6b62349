"""A restore's group positions: the selected groups' archived offsets on the restored partitions, clipped to what
was restored, from every source cluster's newest document."""

from __future__ import annotations

from commands.restore_groups import RestoredRange, plan_positions
from config.model import GroupSelection
from sinks.archive.group_positions import ArchivedPositions


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
