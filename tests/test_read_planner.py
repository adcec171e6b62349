"""Reads are sized by bytes as well as offsets, and spread over tasks."""

from __future__ import annotations

from supervisor.read_planner import FIRST_READ_OFFSETS, ReadLimits, ReadPlanner

MiB = 1024 * 1024
LIMITS = ReadLimits(
    max_offsets_per_read=200_000, max_bytes_per_read=64 * MiB, offsets_per_task=50_000, bytes_per_task=32 * MiB
)


def test_first_read_is_small_until_record_size_is_known() -> None:
    plan = ReadPlanner(LIMITS).plan(1_000, 10_000_000)
    assert plan.end == 1_000 + FIRST_READ_OFFSETS and plan.tasks == 1


def test_large_records_shrink_the_range_and_add_tasks() -> None:
    planner = ReadPlanner(LIMITS)
    planner.observe(1_000, 1_000 * 10_240)  # 10 KiB per offset
    plan = planner.plan(0, 10_000_000)
    assert plan.end == (64 * MiB) // 10_240
    assert plan.tasks == 2  # 64 MiB over 32 MiB tasks


def test_small_records_are_capped_by_offsets() -> None:
    planner = ReadPlanner(LIMITS)
    planner.observe(10_000, 10_000 * 100)
    plan = planner.plan(0, 10_000_000)
    assert plan.end == 200_000 and plan.tasks == 4  # 200k offsets over 50k-offset tasks


def test_never_past_the_end_and_never_empty() -> None:
    planner = ReadPlanner(LIMITS)
    planner.observe(10, 10 * 100 * MiB)  # absurdly large records: still read one offset
    assert planner.plan(5, 6).end == 6
    assert planner.plan(5, 1_000).end == 6
    assert planner.plan(5, 1_000).tasks == 1


def test_byte_room_limits_the_read() -> None:
    planner = ReadPlanner(LIMITS)
    planner.observe(1_000, 1_000 * 1_000)
    assert planner.plan(0, 10_000_000, byte_room=100_000).end == 100


def test_growing_records_are_followed_at_once_shrinking_ones_gradually() -> None:
    planner = ReadPlanner(LIMITS)
    planner.observe(100, 100 * 100)
    planner.observe(100, 100 * 5_000)
    assert planner.bytes_per_offset == 5_000
    planner.observe(100, 100 * 100)
    assert planner.bytes_per_offset is not None and 100 < planner.bytes_per_offset < 5_000
