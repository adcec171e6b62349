"""Where a long command is, for the person who started it: every stage of `verify` (of a mirror or of a restore),
`restore` and `compact` that can run for more than a few seconds (a Spark job, reading many mirrors or restored
partitions, restoring many ranges) reports through this one mechanism, so none is silent for more than
PROGRESS_EVERY_S.

While the stage runs (`reported`), its units done of all (`JobTasks`: a job group's Spark tasks, mirrors read, offsets
restored with the records and bytes they carried) and the time so far go to stderr: a bar redrawn in place every
TERMINAL_EVERY_S on a terminal, otherwise an INFO line (the stage's message, the same numbers as fields) every
PROGRESS_EVERY_S. The numbers are read in a worker thread (Spark's status tracker: `spark_job_tasks`); the rendering
(`JobProgress`) is pure apart from the stream it writes. A Spark task reports only when it ends, so the ETA appears
once the first task has.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.to_thread

from core.errors import first_line, task_group_failures_unwrapped
from core.logs import log_event
from workers.spark_session import started_spark

log = logging.getLogger("mirror_v3.progress")

PROGRESS_EVERY_S = 5.0  # a log line this often
TERMINAL_EVERY_S = 1.0  # a terminal's bar is redrawn this often


@dataclass(frozen=True)
class JobTasks:
    """Units of work done, of how many: a job group's tasks (0 of 0 until Spark has planned them), the mirrors a
    command has read so far, the offsets a restore has produced; and, where records are moved, how many and their
    bytes (for the rates)."""

    done: int
    total: int
    records: int | None = None
    record_bytes: int = 0


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
        self.every_s = TERMINAL_EVERY_S if self._tty else PROGRESS_EVERY_S

    def show(self, tasks: JobTasks) -> None:
        elapsed = self._clock() - self._started
        eta = elapsed * (tasks.total - tasks.done) / tasks.done if tasks.done else None
        rate = megabytes = 0.0
        if tasks.records is not None and elapsed > 0:
            rate, megabytes = tasks.records / elapsed, tasks.record_bytes / 1e6 / elapsed
        if self._tty:
            share = tasks.done / tasks.total if tasks.total else 0.0
            bar = "#" * int(share * 30)
            when = "-" if eta is None else f"{eta:.0f}s"
            moved = "" if tasks.records is None else f", {tasks.records} records {rate:,.0f}/s {megabytes:.1f} MB/s"
            self._stream.write(
                f"\r{self._what}: [{bar:<30}] {tasks.done}/{tasks.total} {self._unit}{moved}, {elapsed:.0f}s, "
                f"ETA {when}  "
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
        if tasks.records is not None:
            fields |= {"records": tasks.records, "records_per_s": round(rate), "mb_per_s": round(megabytes, 2)}
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


def spark_job_tasks(job_group: str) -> JobTasks:
    """The tasks of this process's Spark job group so far (blocking: call it from a worker thread)."""
    return tracked_tasks(started_spark().sparkContext.statusTracker(), job_group)


async def report_until_cancelled(progress: JobProgress, read: Callable[[], JobTasks]) -> None:
    """`progress.show(read())` every `progress.every_s`, until cancelled (the stage ended); `read` runs in a worker
    thread. Progress is a courtesy: a read that fails (Spark's tracker while its job ends, say) skips that line and
    never fails the stage."""
    try:
        while True:
            await anyio.sleep(progress.every_s)
            try:
                tasks = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
            except Exception as exc:
                log_event(log, logging.DEBUG, "progress not read", error=first_line(exc))
                continue
            progress.show(tasks)
    finally:
        progress.finish()


@contextlib.asynccontextmanager
async def reported(progress: JobProgress, read: Callable[[], JobTasks]) -> AsyncIterator[None]:
    """`progress` shown (`report_until_cancelled`) while the block runs; what the block raises passes as itself."""
    with task_group_failures_unwrapped():
        async with anyio.create_task_group() as reporting:
            reporting.start_soon(report_until_cancelled, progress, read)
            try:
                yield
            finally:
                reporting.cancel_scope.cancel()
