"""The flush scheduler: small flushes that fall due together share one Spark job (each waits a share of its max-time
for company), each mirror gets exactly its own outcome, a backlog's flush runs as a job of its own, and cancelling
a mirror touches only its own work."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from core.errors import SourceUnavailableError
from sinks.write_target import BlobLimits, TaskRange, Written
from source.range_reader import OffsetsDeletedError, ReadStalledError, SourcePartition
from telemetry.metrics import MetricFamilies
from tests.fakes import fresh_metrics
from workers.flush_scheduler import (
    GATHER_MAX_S,
    HELD_AFTER_S,
    SHARED_POOL,
    SHARED_WRITE_BYTES,
    SHARED_WRITE_OFFSETS,
    ClusterReadsStalled,
    FlushScheduler,
    SchedulerLimits,
    _Queued,
    gather_window,
)
from workers.range_job import JobCancelled, JobSpec, Outcome, SparkGoneError, WriteItem

LIMITS = SchedulerLimits(task_bytes=1_000, task_offsets=1_000, job_bytes=10_000)
SOURCE = SourcePartition("fake:9092", "t", 0, "read_committed", "g", 5.0)


@dataclass(frozen=True)
class Target:
    """Stands for a destination's target: the scheduler never calls it (the fake job below answers instead)."""

    name: str
    ordered: bool = False
    writes_at_once: int = 1
    abandons_cleanly: bool = True

    def write(self, records: Any, task: TaskRange, limits: BlobLimits) -> list[Written]:
        raise AssertionError("the fake job writes nothing")


def item(owner: str, first: int, end: int) -> WriteItem:
    return WriteItem(SOURCE, TaskRange(first, first, end), BlobLimits(10**9, 10**9), Target(owner))


@dataclass
class FakeSpark:
    """Runs jobs in the scheduler's worker thread: records each job, answers each item with a write covering its
    range (or the error `failing` names for its owner), and may hold a job until released."""

    jobs: list[tuple[JobSpec, list[str], list[list[int]]]] = field(default_factory=list)
    failing: dict[str, Exception] = field(default_factory=dict)
    job_failure: Exception | None = None
    hold: threading.Event | None = None
    started: threading.Event = field(default_factory=threading.Event)
    cancelled: list[str] = field(default_factory=list)

    def run_job(
        self, items: Sequence[WriteItem], packs: Sequence[Sequence[int]], spec: JobSpec
    ) -> list[Outcome[list[Written]]]:
        self.jobs.append((spec, [i.target.name for i in items], [list(p) for p in packs]))  # type: ignore[attr-defined]
        self.started.set()
        if self.hold is not None:
            self.hold.wait(10)
        if self.job_failure is not None:
            raise self.job_failure
        outcomes: list[Outcome[list[Written]]] = []
        for each in items:
            owner = each.target.name  # type: ignore[attr-defined]
            if owner in self.failing:
                outcomes.append(Outcome(error=self.failing[owner]))  # type: ignore[arg-type]
                continue
            task = each.task
            outcomes.append(Outcome(result=[Written(first=task.first, last=task.end - 1, records=1, record_bytes=9)]))
        return outcomes

    def cancel_job(self, job_group: str) -> None:
        self.cancelled.append(job_group)


async def two_cores() -> int:
    return 2


def scheduler(spark: FakeSpark, metrics: MetricFamilies | None = None) -> FlushScheduler:
    return FlushScheduler(spark.run_job, spark.cancel_job, two_cores, LIMITS, metrics)


async def submit_all(flushes: FlushScheduler, owners: list[str], found: dict[str, Any]) -> None:
    async def one(owner: str, first: int) -> None:
        try:
            found[owner] = await flushes.submit(owner, [item(owner, first, first + 10)], [100])
        except Exception as exc:
            found[owner] = exc

    async with anyio.create_task_group() as submits:
        for index, owner in enumerate(owners):
            submits.start_soon(one, owner, index * 100)


async def test_flushes_due_together_share_one_job_and_each_mirror_gets_its_own_writes() -> None:
    spark = FakeSpark()
    families, _ = fresh_metrics()
    flushes = scheduler(spark, families)
    found: dict[str, Any] = {}
    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        await submit_all(flushes, [f"m{n}" for n in range(6)], found)
        running.cancel_scope.cancel()
    assert len(spark.jobs) == 1
    spec, owners, packs = spark.jobs[0]
    assert spec.pool == SHARED_POOL and sorted(owners) == [f"m{n}" for n in range(6)]
    assert len(packs) == 2 and sorted(i for p in packs for i in p) == list(range(6))  # two cores, balanced
    for n in range(6):
        (written,) = found[f"m{n}"]
        assert (written[0].first, written[0].last) == (n * 100, n * 100 + 9)
    registry = families.registry
    assert registry.get_sample_value("mirror_v3_spark_jobs_total", {"lane": "shared"}) == 1
    assert registry.get_sample_value("mirror_v3_spark_job_partitions_sum", {"lane": "shared"}) == 6
    assert registry.get_sample_value("mirror_v3_flush_wait_seconds_count", {"lane": "shared"}) == 6


async def test_one_partitions_failure_is_its_own_and_never_its_neighbours() -> None:
    lost = OffsetsDeletedError("t-0", 5, 7)
    spark = FakeSpark(failing={"m1": lost})
    flushes = scheduler(spark)
    found: dict[str, Any] = {}
    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        await submit_all(flushes, ["m0", "m1", "m2"], found)
        running.cancel_scope.cancel()
    assert len(spark.jobs) == 1
    assert found["m1"] is lost and (found["m1"].position, found["m1"].log_start) == (5, 7)
    assert [w[0].first for (w,) in (found["m0"], found["m2"])] == [0, 200]


async def test_a_failed_job_fails_every_flush_in_it() -> None:
    spark = FakeSpark(job_failure=SparkGoneError())
    flushes = scheduler(spark)
    found: dict[str, Any] = {}
    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        await submit_all(flushes, ["m0", "m1"], found)
        running.cancel_scope.cancel()
    assert all(isinstance(found[m], SparkGoneError) for m in ("m0", "m1"))


async def behind_a_running_job(
    owners: list[str], meanwhile: Callable[[FlushScheduler, FakeSpark], None]
) -> tuple[FakeSpark, dict[str, Any]]:
    """A first flush's job is held while `owners` submit theirs; then `meanwhile`, then the job is let go."""
    spark = FakeSpark(hold=threading.Event())
    flushes = scheduler(spark)
    found: dict[str, Any] = {}
    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        running.start_soon(submit_all, flushes, ["first"], found)
        await anyio.to_thread.run_sync(spark.started.wait, 10)
        done = anyio.Event()

        async def queued() -> None:
            await submit_all(flushes, owners, found)
            done.set()

        running.start_soon(queued)
        await anyio.sleep(0.1)
        meanwhile(flushes, spark)
        spark.hold.set()  # type: ignore[union-attr]
        await done.wait()
        running.cancel_scope.cancel()
    return spark, found


async def test_flushes_that_fall_due_while_a_job_runs_go_into_the_next_one() -> None:
    def one_job_at_a_time(_: FlushScheduler, spark: FakeSpark) -> None:
        assert len(spark.jobs) == 1

    spark, _ = await behind_a_running_job(["m1", "m2", "m3"], one_job_at_a_time)
    assert [sorted(owners) for _, owners, _ in spark.jobs] == [["first"], ["m1", "m2", "m3"]]


async def test_a_job_takes_queued_flushes_up_to_its_byte_bound() -> None:
    spark = FakeSpark()
    flushes = scheduler(spark)
    found: dict[str, Any] = {}

    async def one(owner: str) -> None:
        found[owner] = await flushes.submit(owner, [item(owner, 0, 10)], [900])

    async with anyio.create_task_group() as running:
        async with anyio.create_task_group() as submits:
            for n in range(25):  # 22 500 estimated bytes: three jobs of at most 10 000
                submits.start_soon(one, f"m{n}")
            running.start_soon(flushes.run)
        running.cancel_scope.cancel()
    assert [len(owners) for _, owners, _ in spark.jobs] == [11, 11, 3]
    assert len(found) == 25


async def gathered(submits: list[tuple[float, str, int, float]]) -> tuple[FakeSpark, list[float]]:
    """Flushes submitted at (seconds from the start, owner, estimated bytes, how long each may wait); the jobs,
    and when each started (seconds from the start)."""
    spark = FakeSpark()
    flushes = scheduler(spark)
    started: list[float] = []
    begin = time.monotonic()
    run_job = spark.run_job

    def timed(*args: Any) -> list[Outcome[list[Written]]]:
        started.append(time.monotonic() - begin)
        return run_job(*args)

    flushes._run_job = timed  # type: ignore[method-assign]

    async def one(at_s: float, owner: str, weight: int, may_wait_s: float) -> None:
        await anyio.sleep(at_s)
        await flushes.submit(owner, [item(owner, 0, 10)], [weight], may_wait_s)

    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        async with anyio.create_task_group() as all_submitted:
            for each in submits:
                all_submitted.start_soon(one, *each)
        running.cancel_scope.cancel()
    return spark, started


async def test_a_flush_waits_its_window_for_company_then_goes() -> None:
    spark, started = await gathered([(0.0, "m0", 100, 0.4), (0.15, "m1", 100, 0.4), (0.9, "m2", 100, 0.4)])
    assert [sorted(owners) for _, owners, _ in spark.jobs] == [["m0", "m1"], ["m2"]]
    assert started[0] >= 0.39  # m0's window, not m1's (which ends later) and not at once
    assert started[1] >= 1.29


async def test_a_flush_with_less_patience_starts_the_job_sooner() -> None:
    spark, started = await gathered([(0.0, "m0", 100, 30.0), (0.1, "m1", 100, 0.05)])
    assert [sorted(owners) for _, owners, _ in spark.jobs] == [["m0", "m1"]]
    assert 0.14 <= started[0] < 5


async def test_a_jobs_worth_of_flushes_goes_without_waiting() -> None:
    spark, started = await gathered([(0.0, f"m{n}", 1_000, 30.0) for n in range(10)])  # 10 000 bytes: a job's worth
    assert [len(owners) for _, owners, _ in spark.jobs] == [10]
    assert started[0] < 5


def test_a_flushs_window_is_a_share_of_its_max_time_and_bounded() -> None:
    assert gather_window(1.0) == pytest.approx(0.2)
    assert gather_window(0.1) == pytest.approx(0.02)
    assert gather_window(10.0) == gather_window(600.0) == GATHER_MAX_S == 0.5


async def test_a_backlogs_flush_runs_as_a_job_of_its_own_in_its_mirrors_pool() -> None:
    spark = FakeSpark()
    flushes = scheduler(spark)
    # No shared-lane loop runs: a flush of several tasks, or of one write above a task's bytes or offsets, does
    # not need it.
    written = await flushes.submit("big", [item("big", 0, 10), item("big", 10, 20)], [500, 500])
    assert [w[0].first for w in written] == [0, 10]
    alone = await flushes.submit("large", [item("large", 0, 10)], [LIMITS.task_bytes + 1])
    assert alone[0][0].last == 9
    long = await flushes.submit("long", [item("long", 0, LIMITS.task_offsets + 1)], [1])
    assert long[0][0].last == LIMITS.task_offsets
    assert [(spec.pool, packs) for spec, _, packs in spark.jobs] == [
        ("mirror-v3.big", [[0], [1]]),
        ("mirror-v3.large", [[0]]),
        ("mirror-v3.long", [[0]]),
    ]


def test_a_write_joins_a_shared_job_up_to_a_bound_of_its_own_or_a_task() -> None:
    # Default-sized tasks (64 MiB, 500 000 offsets) are far larger than the shared lane's bound.
    spark = FakeSpark()
    big_tasks = FlushScheduler(
        spark.run_job, spark.cancel_job, two_cores, SchedulerLimits(64 << 20, 500_000, 256 << 20)
    )
    assert big_tasks.joins_shared_job([item("m", 0, SHARED_WRITE_OFFSETS)], SHARED_WRITE_BYTES)
    assert not big_tasks.joins_shared_job([item("m", 0, SHARED_WRITE_OFFSETS + 1)], 1)
    assert not big_tasks.joins_shared_job([item("m", 0, 10)], SHARED_WRITE_BYTES + 1)
    assert not big_tasks.joins_shared_job([item("m", 0, 10), item("m", 10, 20)], 2)
    small_tasks = scheduler(FakeSpark())  # tasks below the bound: a task's worth is the most a shared write carries
    assert small_tasks.joins_shared_job([item("m", 0, LIMITS.task_offsets)], LIMITS.task_bytes)
    assert not small_tasks.joins_shared_job([item("m", 0, LIMITS.task_offsets + 1)], 1)


async def test_cancelling_a_mirror_withdraws_its_queued_flush_and_leaves_the_others() -> None:
    spark, found = await behind_a_running_job(["stays", "goes"], lambda flushes, _: flushes.cancel("goes"))
    assert isinstance(found["goes"], JobCancelled)
    assert [owners for _, owners, _ in spark.jobs] == [["first"], ["stays"]]


async def test_cancelling_a_mirror_interrupts_its_own_job() -> None:
    spark = FakeSpark(hold=threading.Event())
    flushes = scheduler(spark)
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.2):
            async with anyio.create_task_group() as running:

                async def cancel_when_started() -> None:
                    await anyio.to_thread.run_sync(spark.started.wait, 10)
                    flushes.cancel("big")

                running.start_soon(cancel_when_started)
                await flushes.submit("big", [item("big", 0, 10), item("big", 10, 20)], [1, 1])
    spark.hold.set()  # type: ignore[union-attr]
    assert spark.cancelled == [spark.jobs[0][0].job_group]


def item_of(owner: str, cluster: str) -> WriteItem:
    source = dataclasses.replace(SOURCE, bootstrap_servers=cluster)
    return WriteItem(source, TaskRange(0, 0, 10), BlobLimits(10**9, 10**9), Target(owner))


async def test_a_cluster_whose_read_stalled_is_probed_by_one_flush_while_its_others_wait_for_the_outcome() -> None:
    """A stall in a shared job makes the cluster suspect: its flushes join no shared job; one at a time runs alone
    (the probe) while the others of that cluster wait for its outcome, not for a backoff: a probe that stalls again
    hands the turn to the next, one that reads makes the cluster healthy and everyone goes on in shared jobs. Another
    cluster is never held."""
    stalled = ReadStalledError("c-0", 0, 10, 5.0, "")
    spark = FakeSpark(failing={"c0": stalled})
    flushes = scheduler(spark)
    found: dict[str, Any] = {}

    async def flush(owner: str, cluster: str) -> None:
        try:
            found[owner] = await flushes.submit(owner, [item_of(owner, cluster)], [100], 0.0, cluster=cluster)
        except Exception as exc:
            found[owner] = exc

    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        await flush("c0", "C")  # stalls in a shared job: C is suspect now
        assert found["c0"] is stalled and spark.jobs[-1][0].pool == SHARED_POOL
        spark.hold = threading.Event()
        spark.started.clear()
        running.start_soon(flush, "c0", "C")  # the probe: alone, and it stalls again
        await anyio.to_thread.run_sync(spark.started.wait, 10)
        async with anyio.create_task_group() as waiting:
            waiting.start_soon(flush, "c1", "C")
            waiting.start_soon(flush, "c2", "C")
            waiting.start_soon(flush, "a0", "A")
            await anyio.wait_all_tasks_blocked()
            started = sorted((spec.pool, owners) for spec, owners, _ in spark.jobs[1:])
            assert started == [("mirror-v3.c0", ["c0"]), (SHARED_POOL, ["a0"])], started  # c1, c2 wait; a0 not
            spark.hold.set()  # c0's probe stalls again; C's other flushes read
        running.cancel_scope.cancel()
    assert found["c0"] is stalled
    pools = [(spec.pool, owners) for spec, owners, _ in spark.jobs[3:]]
    assert pools[0] in (("mirror-v3.c1", ["c1"]), ("mirror-v3.c2", ["c2"])), pools  # the next probe
    assert pools[1:] and all(pool == SHARED_POOL for pool, _ in pools[1:]), pools  # it read: the other one shares
    assert all(found[owner][0][0].first == 0 for owner in ("c1", "c2", "a0"))


async def test_a_partition_whose_read_stalled_joins_no_shared_job_until_a_read_of_it_succeeds() -> None:
    """Its cluster may read again (another partition's probe), yet a partition that stalled (a leaderless one) reads
    alone until its own read succeeds: it never holds a shared job twice."""
    stalled = ReadStalledError("c-0", 0, 10, 5.0, "")
    spark = FakeSpark(failing={"p": stalled})
    flushes = scheduler(spark)

    async def flush(owner: str) -> Any:
        try:
            return await flushes.submit(owner, [item_of(owner, "C")], [100], 0.0, cluster="C")
        except Exception as exc:
            return exc

    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        assert await flush("p") is stalled  # in a shared job: C suspect, p stalled
        assert (await flush("q"))[0][0].first == 0  # q probes alone and reads: C is healthy again
        assert await flush("p") is stalled  # alone, though C is healthy
        assert (await flush("r"))[0][0].first == 0  # and C stays healthy: r shares a job, no probe waits on p
        del spark.failing["p"]
        assert (await flush("p"))[0][0].first == 0  # alone, and it reads
        assert (await flush("p"))[0][0].first == 0  # shared again
        running.cancel_scope.cancel()
    assert [spec.pool for spec, _, _ in spark.jobs] == [
        SHARED_POOL,
        "mirror-v3.q",
        "mirror-v3.p",
        SHARED_POOL,
        "mirror-v3.p",
        SHARED_POOL,
    ]


async def test_a_flush_queued_for_a_shared_job_when_its_cluster_turns_suspect_is_handed_back_unread() -> None:
    flushes = scheduler(FakeSpark())
    flushes._suspect["C"] = anyio.Event()  # as a stall in the job before would leave it
    waiting = _Queued("c1", "C", item_of("c1", "C"), 100, time.monotonic(), 0.0)
    flushes._queue.append(waiting)
    assert flushes._take() == [] and isinstance(waiting.failure, ClusterReadsStalled)
    assert waiting.failure.cluster == "C" and isinstance(waiting.failure, SourceUnavailableError)


async def test_load_says_how_many_jobs_run_how_full_they_are_and_how_long_flushes_wait() -> None:
    spark = FakeSpark()
    flushes = scheduler(spark)
    assert flushes.load().jobs_per_second == 0 and flushes.load().flush_wait_p50_seconds is None
    found: dict[str, Any] = {}
    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)
        await submit_all(flushes, ["m0", "m1", "m2", "m3"], found)
        running.cancel_scope.cancel()
    await flushes.submit("big", [item("big", 0, 10), item("big", 10, 20)], [1, 1])
    load = flushes.load()
    assert load.partitions_per_job == 2.5  # (4 + 1) flushes in 2 jobs
    assert load.jobs_per_second == 2.0 and load.shared_jobs_per_second == 1.0  # within the first second
    assert load.flush_wait_p50_seconds is not None and 0 <= load.flush_wait_p50_seconds < 5
    later = flushes.load(now=time.monotonic() + 120)
    assert later.jobs_per_second == 0 and later.flush_wait_max_seconds is None  # older than the window


async def test_a_flush_held_in_a_shared_job_past_a_second_says_what_holds_it_and_for_how_long() -> None:
    spark = FakeSpark(hold=threading.Event())
    flushes = scheduler(spark)
    found: dict[str, Any] = {}
    async with anyio.create_task_group() as running:
        running.start_soon(flushes.run)

        async def flush(owner: str, cluster: str) -> None:
            found[owner] = await flushes.submit(owner, [item(owner, 0, 10)], [100], 0.0, cluster=cluster)

        running.start_soon(flush, "a0", "a")
        running.start_soon(flush, "b0", "b")
        await anyio.to_thread.run_sync(spark.started.wait, 10)
        now = time.monotonic()
        assert flushes.held("a0", now) is None and flushes.job_seconds("a0", now) < HELD_AFTER_S
        later = now + 3.0
        assert flushes.job_seconds("a0", later) == pytest.approx(3.0, abs=0.5)
        why = flushes.held("a0", later)
        assert why is not None and "shared Spark job of 2 flushes still reading (source clusters a, b" in why, why
        spark.hold.set()  # type: ignore[union-attr]
        await anyio.wait_all_tasks_blocked()
        while len(found) < 2:
            await anyio.sleep(0.01)
        running.cancel_scope.cancel()
    assert flushes.held("a0", later) is None and flushes.job_seconds("b0") == 0.0
