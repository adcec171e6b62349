"""`verify` of a restore: each row's verdict, and how a short partition and a moved group read in the table."""

from __future__ import annotations

from commands.restore_verify import (
    GroupCheck,
    PartitionCheck,
    RestoreVerification,
    TopicCheck,
    compared,
    render_table,
)


def test_a_committed_offset_is_compared_with_the_expected_one() -> None:
    assert [compared(100, found) for found in (100, 101, 99, None)] == ["equal", "ahead", "behind", "missing"]


def test_only_equal_rows_pass_and_a_group_with_members_is_not_held_against_the_restore() -> None:
    topic = TopicCheck("orders", "orders", 6, 6, [])
    whole = PartitionCheck("orders/0", "orders", 0, 0, 1_000, 1_000, None)
    equal = GroupCheck("billing", "orders", 0, 500, 500, "equal")
    members = GroupCheck("live", "orders", 0, None, None, "not-compared")
    assert RestoreVerification(None, [topic], [whole], [equal, members]).ok
    for bad in (
        RestoreVerification(
            None, [TopicCheck("orders", "orders", 3, 6, ["3 partitions, the archived topic 6"])], [], []
        ),
        RestoreVerification(None, [TopicCheck("orders", "orders", None, 6, ["missing on the destination"])], [], []),
        RestoreVerification(None, [], [PartitionCheck("orders/0", "orders", 0, 0, 1_000, 600, None)], []),
        RestoreVerification(None, [], [PartitionCheck("orders/0", "orders", 0, 0, 1_000, None, "no such topic")], []),
        RestoreVerification(None, [], [], [GroupCheck("billing", "orders", 0, 500, 650, "ahead")]),
    ):
        assert not bad.ok


def test_the_table_says_what_is_short_and_by_how_much() -> None:
    report = RestoreVerification(
        "2026-11-26T03:00:00.000Z",
        [TopicCheck("orders", "orders", 6, 6, ["cleanup.policy delete, archived compact"])],
        [
            PartitionCheck("orders/0", "orders", 0, 0, 1_000, 1_000, None),
            PartitionCheck("orders/1", "orders", 1, 200, 1_000, 600, None),
            PartitionCheck("orders/2", "orders", 2, 0, 10, 0, None),
        ],
        [GroupCheck("billing", "orders", 1, 500, None, "missing")],
    )
    lines = render_table(report).splitlines()
    assert lines[0] == "as of 2026-11-26T03:00:00.000Z"
    assert lines[2].endswith("cleanup.policy delete, archived compact")
    assert lines[5].endswith("whole")
    assert lines[6].endswith("restored up to 599: 400 offsets missing")
    assert lines[7].endswith("nothing restored: 10 offsets missing")
    assert lines[-1].split() == ["billing", "orders", "1", "500", "-", "missing"]
