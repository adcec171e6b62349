"""A command's Spark job progress: the tasks a job group has done (from Spark's status tracker), shown as a bar on a
terminal or an INFO line otherwise, every interval until the job ends."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import anyio
import anyio.from_thread
import pytest

from commands.job_progress import JobProgress, JobTasks, report_until_cancelled, reported, tracked_tasks
from commands.restore_progress import restored_so_far


@dataclass
class Stage:
    numTasks: int  # pyspark's SparkStageInfo names
    numCompletedTasks: int


@dataclass
class Job:
    stageIds: list[int]


class Tracker:
    """pyspark's StatusTracker as a verify job's group looks in it: one job of two stages."""

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return [7] if group == "mirror-v3.verify.x" else []

    def getJobInfo(self, job: int) -> Job | None:
        return Job([1, 2])

    def getStageInfo(self, stage: int) -> Stage | None:
        return {1: Stage(4, 4), 2: None}.get(stage)  # stage 2 not planned yet


def test_a_groups_tasks_are_summed_over_its_jobs_and_stages() -> None:
    assert tracked_tasks(Tracker(), "mirror-v3.verify.x") == JobTasks(4, 4)
    assert tracked_tasks(Tracker(), "another") == JobTasks(0, 0)


def test_a_terminal_gets_a_bar_redrawn_in_place_with_an_eta_once_a_task_ended() -> None:
    now = [100.0]
    stream = io.StringIO()
    progress = JobProgress("verifying 40 slices", "verifying", tty=True, stream=stream, clock=lambda: now[0])
    now[0] = 110.0
    progress.show(JobTasks(0, 2))
    now[0] = 120.0
    progress.show(JobTasks(1, 2))
    progress.finish()
    first, second = stream.getvalue().split("\r")[1:]
    assert first.startswith("verifying 40 slices: [" + " " * 30 + "] 0/2 tasks, 10s, ETA -")
    assert second.startswith("verifying 40 slices: [" + "#" * 15 + " " * 15 + "] 1/2 tasks, 20s, ETA 20s")
    assert stream.getvalue().endswith("\n")


def test_elsewhere_each_interval_is_an_info_line(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    progress = JobProgress("reading 3 mirrors", "verify reading", "mirrors", tty=False, clock=lambda: now[0])
    now[0] = 5.0
    with caplog.at_level(logging.INFO, logger="mirror_v3.progress"):
        progress.show(JobTasks(2, 3))
    (record,) = caplog.records
    assert record.getMessage() == "verify reading"
    fields = record.mirror_v3_fields  # type: ignore[attr-defined]
    assert fields == {"what": "reading 3 mirrors", "done": 2, "of": 3, "unit": "mirrors", "elapsed_s": 5, "eta_s": 2}


async def test_the_report_goes_on_until_the_job_ends() -> None:
    stream = io.StringIO()
    progress = JobProgress("verifying", "verifying", tty=True, stream=stream, clock=lambda: 0.0)
    reads = [JobTasks(0, 2), JobTasks(1, 2), JobTasks(2, 2)]
    async with anyio.create_task_group() as job:

        def read() -> JobTasks:
            if len(reads) == 1:  # the job ended (read runs in a worker thread)
                anyio.from_thread.run_sync(job.cancel_scope.cancel)
            return reads.pop(0)

        progress.every_s = 0
        job.start_soon(report_until_cancelled, progress, read)
    assert stream.getvalue().count("\r") == 2 and stream.getvalue().endswith("\n")


def test_moved_records_add_their_count_and_rates(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    stream = io.StringIO()
    bar = JobProgress("restoring 4 partitions", "restoring", "offsets", tty=True, stream=stream, clock=lambda: now[0])
    line = JobProgress("restoring 4 partitions", "restoring", "offsets", tty=False, clock=lambda: now[0])
    now[0] = 10.0
    moved = JobTasks(250, 1000, records=240, record_bytes=2_000_000)
    bar.show(moved)
    with caplog.at_level(logging.INFO, logger="mirror_v3.progress"):
        line.show(moved)
    assert stream.getvalue().startswith(
        "\rrestoring 4 partitions: ["
        + "#" * 7
        + " " * 23
        + "] 250/1000 offsets, 240 records 24/s 0.2 MB/s, 10s, ETA 30s"
    )
    fields = caplog.records[0].mirror_v3_fields  # type: ignore[attr-defined]
    assert fields == {
        "what": "restoring 4 partitions",
        "done": 250,
        "of": 1000,
        "unit": "offsets",
        "elapsed_s": 10,
        "eta_s": 30,
        "records": 240,
        "records_per_s": 24,
        "mb_per_s": 0.2,
    }


@dataclass
class Part:
    """A restored partition's numbers as `restored_so_far` reads them (`RestoreState`)."""

    first: int
    end: int
    position: int | None
    records: int = 0
    record_bytes: int = 0
    name: str = "t/0"
    archived: str = "t"
    partition: int = 0
    topic: str = "t"


def test_a_restore_counts_the_offsets_left_when_it_started() -> None:
    """A rerun's total is what was left; a partition not yet opened counts from its range's first offset."""
    parts = [Part(first=0, end=100, position=40), Part(first=10, end=60, position=None)]
    read = restored_so_far(parts)
    assert read() == JobTasks(0, 110, 0, 0)
    parts[0].position, parts[0].records, parts[0].record_bytes = 100, 60, 6000
    parts[1].position, parts[1].records, parts[1].record_bytes = 30, 18, 900
    assert read() == JobTasks(80, 110, 78, 6900)


async def test_a_reported_block_is_shown_until_it_ends_and_the_bar_then_ends_its_line() -> None:
    stream = io.StringIO()
    progress = JobProgress("merging 3 runs", "compacting", tty=True, stream=stream, clock=lambda: 0.0)
    progress.every_s = 0.01
    done = [0]
    async with reported(progress, lambda: JobTasks(done[0], 3)):
        for _ in range(3):
            await anyio.sleep(0.05)
            done[0] += 1
    shown = stream.getvalue()
    assert shown.count("\r") >= 3 and "1/3 tasks" in shown and shown.endswith("\n")
    await anyio.sleep(0.05)
    assert stream.getvalue() == shown, "nothing is shown once the block has ended"


async def test_what_a_reported_block_raises_passes_as_itself() -> None:
    progress = JobProgress("restoring", "restoring", tty=False, stream=io.StringIO())
    with pytest.raises(KeyError):
        async with reported(progress, lambda: JobTasks(0, 1)):
            raise KeyError("the restore's own failure")


async def test_a_progress_read_that_fails_skips_its_line_and_never_fails_the_stage() -> None:
    stream = io.StringIO()
    progress = JobProgress("verifying", "verifying", tty=True, stream=stream, clock=lambda: 0.0)
    progress.every_s = 0.01
    reads = [0]

    def read() -> JobTasks:
        reads[0] += 1
        if reads[0] % 2:
            raise RuntimeError("py4j: the tracker is gone")
        return JobTasks(1, 2)

    async with reported(progress, read):
        await anyio.sleep(0.1)
    assert reads[0] >= 4 and 1 <= stream.getvalue().count("\r") < reads[0]
