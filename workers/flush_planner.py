"""Which offsets the next flush writes, and how its Spark job splits them into tasks.

Kafka is the buffer: records wait in the source until a flush is due, then Spark tasks read and
write them. A flush is due when the readable backlog holds a full blob (`max-offsets`, or about
`max-bytes` by the bytes per offset learned so far), when its oldest record has waited `max-time`
since it became readable, when the mirror drains, and once right after start (the first flush
reads a short probe range to learn the bytes per offset that max-bytes is judged by). Tasks cover
consecutive ranges whose boundaries are whole estimated blobs, so most blobs come out near
`max-bytes`; the tasks cut the actual blobs from the records they read (`sinks.blob.writer`). A
size-triggered flush writes whole blobs; the rest waits for its own max-time, unless it has waited
that long already (the tail of a backlog), and then goes in the same job.

Frozen data in and out; no I/O, no clock (callers pass the time). The run process's actor (`supervisor.actor`)
asks it; it sits with the data plane's driver half, below the actor.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from config.model import FlushConfig, SparkConfig
from sinks.write_target import BlobLimits

_SMOOTHING = 0.5
# The first flush after start knows no record size, so nothing could bound its job by bytes: it covers
# only this many offsets, enough to learn the size, cheap whatever the size (a backlog of two million
# large records once went to the driver in one job and took its JVM down).
START_PROBE_OFFSETS = 100


@dataclass(frozen=True)
class FlushLimits:
    max_offsets: int  # per blob (flush.max-offsets)
    max_bytes: int  # per blob (flush.max-bytes)
    max_time_s: float  # flush.max-time
    task_offsets: int  # a task covers about this many offsets at most (spark.offsets-per-task)
    task_bytes: int  # ... and about this many record bytes (spark.bytes-per-task)
    job_offsets: int  # one job covers at most this many offsets (spark.max-offsets-per-job)
    job_bytes: int  # ... and about this many record bytes (spark.max-bytes-per-job)
    daily: bool = False  # never a blob with records of two UTC days (flush.daily)

    @classmethod
    def of(cls, flush: FlushConfig, spark: SparkConfig) -> FlushLimits:
        """A mirror's flush settings as its flush decisions use them: the one place their units are converted
        (max-time in seconds from here on, for the planner, the gather window of shared jobs and the metrics)."""
        return cls(
            max_offsets=flush.max_offsets,
            max_bytes=flush.max_bytes,
            max_time_s=flush.max_time_ms / 1000,
            task_offsets=spark.offsets_per_task,
            task_bytes=spark.bytes_per_task,
            job_offsets=spark.max_offsets_per_job,
            job_bytes=spark.max_bytes_per_job,
            daily=flush.daily,
        )

    @property
    def blobs(self) -> BlobLimits:
        """Where a blob destination cuts the flush's range into blobs."""
        return BlobLimits(max_bytes=self.max_bytes, max_offsets=self.max_offsets, daily=self.daily)


@dataclass(frozen=True)
class Backlog:
    first: int  # the next offset of the destination chain
    read_from: int  # where reading starts: above `first` only when lost offsets are skipped
    end: int  # readable end (exclusive) as last queried
    waiting_since: float | None  # when the oldest unwritten record became readable
    now: float
    draining: bool
    parallelism: int  # cores the job can use at once
    # (end, since): offsets below `end` (and not below the previous end) have been readable since `since`
    # at most, ends increasing (`ReadableSince.points`); empty when unknown.
    readable_at: tuple[tuple[int, float], ...] = ()

    def since(self, offset: int) -> float | None:
        """When `offset` may first have been readable, if known."""
        for end, since in self.readable_at:
            if end > offset:
                return since
        return None


@dataclass(frozen=True)
class PlannedTask:
    first: int
    read_from: int
    end: int


@dataclass(frozen=True)
class FlushPlan:
    tasks: tuple[PlannedTask, ...]
    trigger: str  # start | max-offsets | max-bytes | max-time | shutdown | claimed (set by the actor)

    @property
    def first(self) -> int:
        return self.tasks[0].first

    @property
    def end(self) -> int:
        return self.tasks[-1].end


class FlushPlanner:
    def __init__(self, limits: FlushLimits) -> None:
        self._limits = limits
        self.bytes_per_offset: float | None = None

    def blob_offsets(self) -> int:
        """Offsets of one full blob, by the bytes per offset learned so far."""
        limits = self._limits
        if not self.bytes_per_offset:
            return limits.max_offsets
        return max(1, min(limits.max_offsets, int(limits.max_bytes / self.bytes_per_offset)))

    def trigger(self, backlog: Backlog) -> str | None:
        """Why a flush is due now, if it is."""
        available = backlog.end - backlog.first
        if available <= 0:
            return None
        if backlog.draining:
            return "shutdown"
        if self.bytes_per_offset is None:
            # Nothing tells the record size but a flush: the first one after start is due at once, so
            # that max-bytes can be judged from then on.
            return "start"
        if available >= self._limits.max_offsets:
            return "max-offsets"
        if self.bytes_per_offset and available >= self.blob_offsets():
            return "max-bytes"
        if backlog.waiting_since is not None and backlog.now - backlog.waiting_since >= self._limits.max_time_s:
            return "max-time"
        return None

    def size_due_end(self, backlog: Backlog) -> int:
        """The readable end at which a full blob makes a flush due (before max-time does)."""
        if self.bytes_per_offset is None:
            return backlog.first + 1  # the first flush after start is due as soon as anything is readable
        return backlog.first + self.blob_offsets()

    def due_at(self, backlog: Backlog) -> float | None:
        """When max-time will make a flush due if nothing else does (None: nothing waits)."""
        if backlog.end <= backlog.first or backlog.waiting_since is None:
            return None
        return backlog.waiting_since + self._limits.max_time_s

    def plan(self, backlog: Backlog) -> FlushPlan | None:
        trigger = self.trigger(backlog)
        if trigger is None:
            return None
        limits = self._limits
        blob = self.blob_offsets()
        bytes_per_offset = self.bytes_per_offset or 0.0
        available = backlog.end - backlog.first
        # A job is bounded so that its blobs become visible in steps, and other mirrors get their turn.
        job_cap = limits.job_offsets
        if bytes_per_offset:
            job_cap = min(job_cap, int(limits.job_bytes / bytes_per_offset))
        job_cap = max(job_cap, blob * max(1, backlog.parallelism))  # at least a blob for every core
        if trigger == "start":
            span = min(available, START_PROBE_OFFSETS, limits.max_offsets)
        elif available > job_cap:
            span = max(blob, job_cap // blob * blob)  # whole blobs only: the rest waits for the next job
        elif trigger in ("max-time", "shutdown"):
            span = available  # everything readable; the last blob may be small
        else:
            span = available // blob * blob  # full blobs; the remainder waits for its own max-time ...
            tail_since = backlog.since(backlog.first + span)
            if tail_since is not None and backlog.now - tail_since >= limits.max_time_s:
                span = available  # ... unless that is over already: then it goes with them, on another core
        span = max(1, min(span, available))
        return FlushPlan(self._split(backlog, span, blob), trigger)

    def _split(self, backlog: Backlog, span: int, blob: int) -> tuple[PlannedTask, ...]:
        """Consecutive tasks over [first, first+span), boundaries on whole blobs where possible."""
        limits = self._limits
        bytes_per_offset = self.bytes_per_offset or 0.0
        per_task = limits.task_offsets
        if bytes_per_offset:
            per_task = min(per_task, max(1, int(limits.task_bytes / bytes_per_offset)))
        per_task = max(blob, per_task // blob * blob)
        # Fewer tasks than cores would leave cores idle on a backlog: spread it over all of them.
        count = max(math.ceil(span / per_task), min(backlog.parallelism, math.ceil(span / blob)))
        blobs_total = math.ceil(span / blob)
        tasks = []
        start = backlog.first
        end = backlog.first + span
        for index in range(count):
            # Blobs are dealt out evenly; the last task takes the (possibly partial) tail.
            blobs_before = blobs_total * (index + 1) // count
            task_end = end if index == count - 1 else min(end, backlog.first + blobs_before * blob)
            if task_end <= start:
                continue
            tasks.append(PlannedTask(start, max(start, min(backlog.read_from, task_end)), task_end))
            start = task_end
        return tuple(tasks)

    def observe(self, offsets: int, record_bytes: int, records: int) -> None:
        """Learn bytes per offset from a written range (one blob)."""
        if offsets <= 0:
            return
        if records == 1 and record_bytes > self._limits.max_bytes and self.bytes_per_offset is not None:
            # A record larger than max-bytes is a blob of its own whatever the plan: it says nothing of the
            # others, and counted it would shrink the next blobs for many flushes (one 900 KB record among
            # 270 B ones made 50 KB blobs of a 256 KB max-bytes).
            return
        measured = record_bytes / offsets
        if self.bytes_per_offset is None:
            self.bytes_per_offset = measured
        else:
            # Follow changes in record size without letting one odd range swing the next plan.
            self.bytes_per_offset = max(measured, _SMOOTHING * self.bytes_per_offset + (1 - _SMOOTHING) * measured)


class ReadableSince:
    """When each unwritten offset became readable, from the history of offset queries.

    An offset first shown by some query was not readable at the newest query before it that did not
    show it, so it has waited since that one at most: taking that time never understates the wait.
    Without such an earlier query, the query that first showed it is the best known time.
    """

    def __init__(self) -> None:
        # [first asked at, last asked at, end shown], one entry per distinct end, ends increasing.
        self._queries: deque[list[float | int]] = deque()

    def observe(self, asked_at: float, end: int) -> None:
        if self._queries and end <= self._queries[-1][2]:
            # Nothing new: a later query that still did not show more (a query answered late that was asked
            # before the newest one changes nothing).
            self._queries[-1][1] = max(self._queries[-1][1], asked_at)
            return
        self._queries.append([asked_at, asked_at, end])

    def since(self, offset: int) -> float | None:
        """When `offset` may first have been readable; None if no query has shown it yet."""
        previous: list[float | int] | None = None
        for entry in self._queries:
            if entry[2] > offset:
                return float(entry[0] if previous is None else previous[1])
            previous = entry
        return None

    def points(self) -> tuple[tuple[int, float], ...]:
        """`since` for every offset at once: (end, since) pairs, ends increasing (see `Backlog.readable_at`)."""
        found = []
        previous: list[float | int] | None = None
        for entry in self._queries:
            found.append((int(entry[2]), float(entry[0] if previous is None else previous[1])))
            previous = entry
        return tuple(found)

    def forget_below(self, offset: int) -> None:
        """Drop queries that only concern offsets below `offset` (written already), keeping the newest
        of them as the reference for what came after."""
        while len(self._queries) >= 2 and self._queries[1][2] <= offset:
            self._queries.popleft()
