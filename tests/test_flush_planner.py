"""When a flush is due, which offsets it covers, and how its job is split into tasks."""

from __future__ import annotations

from config.model import FlushConfig, SparkConfig
from sinks.write_target import BlobLimits
from workers.flush_planner import START_PROBE_OFFSETS, Backlog, FlushLimits, FlushPlanner, ReadableSince

LIMITS = FlushLimits(
    max_offsets=1_000_000,
    max_bytes=1_000_000,  # 1 000 offsets of 1 000 bytes
    max_time_s=10.0,
    task_offsets=500_000,
    task_bytes=2_000_000,
    job_offsets=2_000_000,
    job_bytes=8_000_000,
)


def backlog(end: int, *, first: int = 0, waited: float = 0.0, draining: bool = False, cores: int = 2) -> Backlog:
    return Backlog(
        first=first,
        read_from=first,
        end=end,
        waiting_since=100.0,
        now=100.0 + waited,
        draining=draining,
        parallelism=cores,
    )


def learned(bytes_per_offset: float = 1_000.0) -> FlushPlanner:
    planner = FlushPlanner(LIMITS)
    planner.observe(1_000, int(1_000 * bytes_per_offset), 1_000)
    return planner


def test_the_first_flush_is_due_at_once_to_learn_the_record_size() -> None:
    plan = FlushPlanner(LIMITS).plan(backlog(10))
    assert plan is not None and plan.trigger == "start" and (plan.first, plan.end) == (0, 10)


def test_the_first_flush_of_a_long_backlog_reads_only_a_probe_of_it() -> None:
    """Without a record size no byte bound applies, so the first job must stay small whatever the backlog."""
    planner = FlushPlanner(LIMITS)
    plan = planner.plan(backlog(2_000_000))
    assert plan is not None and plan.trigger == "start"
    assert [(t.first, t.end) for t in plan.tasks] == [(0, START_PROBE_OFFSETS)]
    planner.observe(START_PROBE_OFFSETS, START_PROBE_OFFSETS * 1_000, START_PROBE_OFFSETS)
    following = planner.plan(backlog(2_000_000, first=START_PROBE_OFFSETS))
    assert following is not None and following.trigger == "max-offsets"
    assert following.end - following.first == 8_000  # the job's byte bound applies from now on


def test_less_than_a_blob_waits_for_max_time_then_goes_whole() -> None:
    planner = learned()
    assert planner.plan(backlog(999, waited=9.9)) is None
    assert planner.due_at(backlog(999)) == 110.0
    plan = planner.plan(backlog(999, waited=10.0))
    assert plan is not None and plan.trigger == "max-time" and plan.end == 999 and len(plan.tasks) == 1


def test_full_blobs_go_at_once_and_the_remainder_waits() -> None:
    plan = learned().plan(backlog(2_500))
    assert plan is not None and plan.trigger == "max-bytes"
    assert [(t.first, t.end) for t in plan.tasks] == [(0, 1_000), (1_000, 2_000)]


def test_a_long_backlog_is_split_into_jobs_of_whole_blobs_over_every_core() -> None:
    plan = learned().plan(backlog(100_000, waited=60.0))
    assert plan is not None
    # 8 MB per job = 8 blobs; 2 MB per task = 2 blobs; task boundaries on blob boundaries.
    assert [(t.first, t.end) for t in plan.tasks] == [(0, 2_000), (2_000, 4_000), (4_000, 6_000), (6_000, 8_000)]


def test_a_small_backlog_still_uses_every_core() -> None:
    plan = learned().plan(backlog(3_000, cores=4))
    assert plan is not None and [(t.first, t.end) for t in plan.tasks] == [(0, 1_000), (1_000, 2_000), (2_000, 3_000)]


def test_the_drain_takes_everything_readable() -> None:
    plan = learned().plan(backlog(1_234, draining=True))
    assert plan is not None and plan.trigger == "shutdown" and plan.end == 1_234


def test_max_offsets_counts_holes_too() -> None:
    limits = FlushLimits(**{**LIMITS.__dict__, "max_offsets": 500})
    planner = FlushPlanner(limits)
    planner.observe(10, 10, 10)
    plan = planner.plan(backlog(1_200))
    assert plan is not None and plan.trigger == "max-offsets" and plan.end == 1_000


def test_skipped_lost_offsets_are_covered_without_being_read() -> None:
    planner = learned()
    plan = planner.plan(
        Backlog(first=0, read_from=1_500, end=3_000, waiting_since=0, now=0, draining=True, parallelism=2)
    )
    assert plan is not None
    assert [(t.first, t.read_from, t.end) for t in plan.tasks] == [(0, 1_000, 1_000), (1_000, 1_500, 3_000)]


def test_a_size_swing_is_followed_without_overshooting() -> None:
    planner = learned(1_000)
    planner.observe(1_000, 4_000_000, 1_000)  # records four times larger: followed at once
    assert planner.bytes_per_offset == 4_000
    planner.observe(1_000, 1_000_000, 1_000)  # smaller again: followed halfway
    assert planner.bytes_per_offset == 2_500


def test_a_record_larger_than_max_bytes_does_not_shrink_the_next_blobs() -> None:
    planner = learned(1_000)
    planner.observe(1, 5_000_000, 1)  # a blob of its own
    assert planner.bytes_per_offset == 1_000 and planner.blob_offsets() == 1_000
    fresh = FlushPlanner(LIMITS)
    fresh.observe(1, 5_000_000, 1)  # the first thing learned: all there is to go by
    assert fresh.bytes_per_offset == 5_000_000


def test_a_remainder_that_has_waited_max_time_goes_with_the_full_blobs() -> None:
    """A backlog's tail waited as long as its head: it is written in the same job, on another core, instead of
    waiting for a job of its own. A tail that only just arrived still waits to fill its blob."""
    planner = learned()

    def backlog_of(*queries: tuple[float, int]) -> Backlog:
        readable = ReadableSince()
        for asked_at, end in queries:
            readable.observe(asked_at, end)
        end = queries[-1][1]
        return Backlog(0, 0, end, 50.0, now=100.0, draining=False, parallelism=2, readable_at=readable.points())

    overdue = planner.plan(backlog_of((50.0, 2_500)))
    assert overdue is not None and overdue.trigger == "max-bytes"
    assert [(t.first, t.end) for t in overdue.tasks] == [(0, 1_000), (1_000, 2_500)]
    fresh = planner.plan(backlog_of((50.0, 2_000), (99.8, 2_000), (99.9, 2_500)))
    assert fresh is not None and fresh.end == 2_000


def test_readable_points_agree_with_since() -> None:
    readable = ReadableSince()
    for asked_at, end in ((1.0, 10), (2.0, 10), (3.0, 25), (4.0, 40)):
        readable.observe(asked_at, end)
    backlog = Backlog(0, 0, 40, None, now=5.0, draining=False, parallelism=1, readable_at=readable.points())
    assert all(backlog.since(offset) == readable.since(offset) for offset in range(45))


def test_readable_since_is_the_last_query_that_did_not_show_the_offset() -> None:
    readable = ReadableSince()
    readable.observe(1.0, 10)
    readable.observe(2.0, 10)  # nothing new
    readable.observe(3.0, 15)
    assert readable.since(5) == 1.0  # shown by the first query: nothing earlier is known
    assert readable.since(12) == 2.0  # not there at 2.0, there at 3.0
    assert readable.since(15) is None
    readable.forget_below(12)
    assert readable.since(12) == 2.0


def test_the_flush_settings_reach_the_decisions_in_one_unit() -> None:
    flush = FlushConfig(max_time_ms=2_500, max_bytes=4096, max_offsets=300, daily=True)
    spark = SparkConfig(offsets_per_task=100, bytes_per_task=1024, max_offsets_per_job=900, max_bytes_per_job=9000)
    limits = FlushLimits.of(flush, spark)
    assert (limits.max_time_s, limits.max_offsets, limits.max_bytes, limits.daily) == (2.5, 300, 4096, True)
    assert (limits.task_offsets, limits.task_bytes, limits.job_offsets, limits.job_bytes) == (100, 1024, 900, 9000)
    assert limits.blobs == BlobLimits(max_bytes=4096, max_offsets=300, daily=True)
