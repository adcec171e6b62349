"""A command's Spark job progress: the tasks a job group has done (from Spark's status tracker), shown as a bar on a
terminal or an INFO line otherwise, every interval until the job ends."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass

import anyio
import anyio.from_thread
import pytest

from commands.job_progress import JobProgress, JobTasks, report_until_cancelled, tracked_tasks


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

        job.start_soon(report_until_cancelled, progress, read, 0)
    assert stream.getvalue().count("\r") == 2 and stream.getvalue().endswith("\n")
