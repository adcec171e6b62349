"""Where a command's Spark job is, for the person who started it: `verify` checks a whole archive in one job that
can run for minutes, and without this printed nothing between its Spark start and its table.

Every `PROGRESS_EVERY_S` while the job runs, its tasks done of all and the time so far go to stderr, as restore's
progress does: a bar redrawn in place on a terminal, an INFO line (`verifying`, with the same numbers as fields)
otherwise, so a long command is never silent for more than that. The numbers come from Spark's status tracker
(`JobTasks`, read in a worker thread); the rendering (`JobProgress`) is pure apart from the stream it writes.
A task checks many slices and reports only when it ends, so the ETA appears once the first task has.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.to_thread

from core.logs import log_event

log = logging.getLogger("mirror_v3.progress")

PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class JobTasks:
    """Units of work done, of how many: a job group's tasks (0 of 0 until Spark has planned them), or the mirrors
    a command has read so far."""

    done: int
    total: int


class JobProgress:
    """One command's progress line: `what` (`verifying 40 slices`), redrawn in place on a terminal, an INFO line
    otherwise."""

    def __init__(
        self,
        what: str,
        message: str,
        unit: str = "tasks",
        tty: bool | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what, self._message, self._unit = what, message, unit
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty() if tty is None else tty
        self._clock = clock
        self._started = clock()
        self._shown = False

    def show(self, tasks: JobTasks) -> None:
        elapsed = self._clock() - self._started
        eta = elapsed * (tasks.total - tasks.done) / tasks.done if tasks.done else None
        if self._tty:
            share = tasks.done / tasks.total if tasks.total else 0.0
            bar = "#" * int(share * 30)
            when = "-" if eta is None else f"{eta:.0f}s"
            self._stream.write(
                f"\r{self._what}: [{bar:<30}] {tasks.done}/{tasks.total} {self._unit}, {elapsed:.0f}s, ETA {when}  "
            )
            self._stream.flush()
            self._shown = True
            return
        fields: dict[str, Any] = {
            "done": tasks.done,
            "of": tasks.total,
            "unit": self._unit,
            "elapsed_s": round(elapsed),
        }
        fields["eta_s"] = None if eta is None else round(eta)
        log_event(log, logging.INFO, self._message, what=self._what, **fields)

    def finish(self) -> None:
        if self._tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()


def tracked_tasks(tracker: Any, job_group: str) -> JobTasks:
    """The tasks of every job of `job_group` so far, from a SparkContext's statusTracker()."""
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(job_group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done, total = done + stage.numCompletedTasks, total + stage.numTasks
    return JobTasks(done, total)


async def report_until_cancelled(
    progress: JobProgress, read: Callable[[], JobTasks], every_s: float = PROGRESS_EVERY_S
) -> None:
    """`progress.show(read())` every `every_s`, until cancelled (the job ended); `read` runs in a worker thread."""
    try:
        while True:
            await anyio.sleep(every_s)
            progress.show(await anyio.to_thread.run_sync(read, abandon_on_cancel=True))
    finally:
        progress.finish()
