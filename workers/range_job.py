"""Spark jobs of work items: each task runs a pack of items and returns one outcome per item.

Every job of the product has this shape. The job is an RDD of task numbers (`parallelize(range(n), n)`) mapped
with `mapPartitions`; task i runs the items of pack i one after the other and returns, per item, its number and its
result or the error it raised, pickled. So:
- no record crosses into the driver: items return metadata only (staged blobs, produced ranges, counts);
- errors cross the Spark boundary as what they are, the typed error family with its facts
  (`core.errors.MirrorV3Error` pickles its attributes), never as a class name in a string;
- one item's failure is that item's outcome and nothing else's: its neighbours in the same task and job
  carry on, and their results reach the driver (a partition's data loss never rolls back another's flush).
A failure of Spark itself (the driver JVM gone, the job cancelled, a Python worker killed) fails every item of
the job.

Why an RDD and not a DataFrame (`spark.range(n).mapInArrow(...)`, the shape until issue 50): the job carries only
task numbers in and pickled outcomes out, so Catalyst has nothing to plan, yet a DataFrame job paid for it: the
session's first job took 2.2-2.8 s of wall time against 1.2-1.5 for the same tasks as an RDD (whose workers need not
import pandas), and each later one 0.30 s against 0.25 (4 tasks, this 2-core machine; docs/spark-tuning.md). A
DataFrame job kept Spark Connect possible in principle, but these jobs already need the classic SparkContext (job
groups, scheduler pools, cancelling) and the driver in the process, and `validate` refuses `sc://`.

The flush job (`run_write_job`): an item is "this reader, this range, that target" (`WriteItem`): a task reads
the range and writes it with the destination's target (`sinks.write_target`). Items of many partitions share a
job and a task; each task reads every partition of a cluster with one consumer (`source.range_reader
.SharedConsumers`).

The calls block; callers run them in a worker thread. A running job is cancelled from another thread with
`cancel_job`, which interrupts its job group.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from py4j.protocol import Py4JNetworkError

from core.errors import MirrorV3Error, first_line
from sinks.write_target import BlobLimits, RecordSource, TaskRange, WriteTarget, Written, check_coverage
from source.range_reader import SharedConsumers
from workers.job_packing import pack
from workers.python_worker import keep_zip_directories

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")


class SparkTaskError(MirrorV3Error):
    """An item raised something outside the error family (a bug, or an unexpected library failure), or a Spark
    task failed before it could report: `exception_type` and its message are what the task saw."""

    def __init__(self, exception_type: str, message: str) -> None:
        self.exception_type, self.message = exception_type, message
        super().__init__(f"{exception_type}: {message}" if message else exception_type)


class SparkGoneError(MirrorV3Error):
    """The Spark driver JVM died under us."""

    def __init__(self) -> None:
        super().__init__(
            "the Spark driver JVM is gone (killed, crashed or out of memory: raise spark.driver-memory; the JVM's "
            "own output above says which)"
        )


class JobCancelled(MirrorV3Error):
    """The job was abandoned: the process is stopping and its drain ran out of time, or its mirror was stopped."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what}: cancelled")


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """What one item of a job came to: its result, or the error it raised (never both)."""

    result: T | None = None
    error: MirrorV3Error | None = None

    def get(self) -> T:
        """The result; the item's error raised."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


@dataclass(frozen=True)
class JobSpec:
    """Where a job runs and how it is named: its job group (for cancelling), its FAIR scheduler pool and the
    description Spark's UI and logs show."""

    job_group: str
    pool: str
    description: str


def run_items(
    spark: SparkSession,
    items: Sequence[Any],
    packs: Sequence[Sequence[int]],
    run_item: Callable[[Any, dict[str, Any]], Any],
    spec: JobSpec,
    before_pack: Callable[[list[Any], dict[str, Any]], None] | None = None,
    at_once: Callable[[list[Any]], int] | None = None,
) -> list[Outcome[Any]]:
    """One job: task i runs `run_item(items[j], task_state)` for each j of `packs[i]`; one outcome per item, in the
    items' order. `task_state` is a dict shared by the items of one task (for clients they can reuse); values with
    a `close` method are closed when the task ends. `before_pack(the task's items, task_state)` runs first (it only
    prepares: a failure there fails the job). `at_once(the task's items)` says how many of them may run at the same
    time, in threads (1 when not given); `run_item` must then be safe to call from several threads. Every item must
    be in exactly one pack."""
    if sorted(j for pack in packs for j in pack) != list(range(len(items))):
        raise ValueError("every item must be in exactly one pack")
    function = _task_function(tuple(items), tuple(tuple(pack) for pack in packs), run_item, before_pack, at_once)
    outcomes: list[Outcome[Any] | None] = [None] * len(items)
    for index, outcome in run_tasks(spark, spec, len(packs), function):
        outcomes[index] = decoded(outcome)
    missing = [index for index, found in enumerate(outcomes) if found is None]
    if missing:
        # A task that ends without reporting every item is a broken task: no result of it may be used.
        raise SparkTaskError("MissingOutcome", f"items {missing[:5]} of job {spec.description} returned nothing")
    return [found for found in outcomes if found is not None]


def decoded(outcome: bytes) -> Outcome[Any]:
    """An item's outcome as its task sent it (`_outcome_of`)."""
    kind, value = pickle.loads(outcome)
    return Outcome(error=value) if kind == "error" else Outcome(result=value)


def balanced_packs(spark: SparkSession, weights: Sequence[int]) -> tuple[tuple[int, ...], ...]:
    """Items of these weights in at most one task per core of the session (`workers.job_packing`)."""
    return pack(weights, max(1, int(spark.sparkContext.defaultParallelism)))


def _task_function(
    items: tuple[Any, ...],
    packs: tuple[tuple[int, ...], ...],
    run_item: Callable[[Any, dict[str, Any]], Any],
    before_pack: Callable[[list[Any], dict[str, Any]], None] | None = None,
    at_once: Callable[[list[Any]], int] | None = None,
) -> Callable[[Iterable[int]], Iterator[tuple[int, bytes]]]:
    def run(tasks: Iterable[int]) -> Iterator[tuple[int, bytes]]:
        keep_zip_directories()
        for task in tasks:
            state: dict[str, Any] = {}
            pack = [items[index] for index in packs[task]]
            try:
                if before_pack is not None:
                    before_pack(pack, state)
                threads = min(len(pack), at_once(pack) if at_once is not None else 1)
                yield from zip(packs[task], _outcomes(run_item, pack, state, threads), strict=True)
            finally:
                for held in state.values():
                    with contextlib.suppress(Exception):
                        held.close()

    return run


def _outcomes(
    run_item: Callable[[Any, dict[str, Any]], Any], pack: list[Any], state: dict[str, Any], threads: int
) -> Iterator[bytes]:
    """Each item's outcome, in the pack's order: one after the other, or `threads` at a time."""
    if threads <= 1:
        yield from (_outcome_of(run_item, item, state) for item in pack)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="mirror-v3-item") as pool:
        yield from pool.map(lambda item: _outcome_of(run_item, item, state), pack)


def _outcome_of(run_item: Callable[[Any, dict[str, Any]], Any], item: Any, state: dict[str, Any]) -> bytes:
    try:
        return pickle.dumps(("result", run_item(item, state)))
    except MirrorV3Error as exc:
        error: MirrorV3Error = exc
    except Exception as exc:  # reported as this item's failure, so its neighbours are not failed with it
        error = SparkTaskError(type(exc).__name__, first_line(exc) if str(exc).strip() else "")
    try:
        return pickle.dumps(("error", error))
    except Exception:  # an attribute that cannot be pickled: the type and the sentence still travel
        return pickle.dumps(("error", SparkTaskError(type(error).__name__, str(error))))


# -- the flush job --------------------------------------------------------------------------------


class RecordsAt(Protocol):
    """Where a write item's records come from, as a picklable value: a live source partition
    (`source.range_reader.SourcePartition`) or an archived chain (`workers.restore_job.ArchivedRange`)."""

    @property
    def uses_task_consumers(self) -> bool:
        """Whether reading goes through the task's shared consumers (a live partition), so that writes running at
        the same time must take turns at reading; an archived chain reads its own blobs and streams."""
        ...

    def open(self, consumers: SharedConsumers) -> RecordSource:
        """The records, read inside the task (a live partition with the task's consumer for its cluster)."""
        ...

    def announce(self, consumers: SharedConsumers, read_from: int, end: int, estimated_bytes: int) -> None:
        """Before a task reads its items: this range will be read (a live partition's small ranges are then
        fetched together; an archive need not care)."""
        ...


@dataclass(frozen=True)
class WriteItem:
    """One write of a job: this reader, this range, that target."""

    records: RecordsAt
    task: TaskRange
    limits: BlobLimits
    target: WriteTarget[Written]
    estimated_bytes: int = 0  # record bytes, from the bytes per offset the mirror has seen (0: unknown)


def run_write_job(
    spark: SparkSession, items: Sequence[WriteItem], packs: Sequence[Sequence[int]], spec: JobSpec
) -> list[Outcome[list[Written]]]:
    """Write every item; per item, its writes (covering exactly its range, in offset order) or its error."""
    return run_items(spark, items, packs, _write, spec, _announce, _writes_at_once)


# A restore's writes that may overlap (renumber's transactions) overlap only while they are small: a transaction's
# dozen round trips then outweigh its records' CPU. Larger ones are CPU-bound (the archive is read in the task, no
# network wait), and two of them in threads of one Python worker only contend for its interpreter lock while the
# other cores run other tasks: measured in-process, two renumber ranges of 500 000 x 1 KiB from an archive took
# 7.8-9.5 µs of CPU per record one after the other and 10.0-10.4 in two threads, at the same rate. A restore's ranges
# are up to `spark.offsets-per-task`. Live sources keep the target's overlap (S3 uploads, transactions that wait on
# the network).
OVERLAPPING_WRITE_MAX_OFFSETS = 50_000


def _writes_at_once(items: list[WriteItem]) -> int:
    archived = not any(item.records.uses_task_consumers for item in items)
    if archived and sum(item.task.offset_count for item in items) > OVERLAPPING_WRITE_MAX_OFFSETS * len(items):
        return 1  # larger than that on average: one after the other
    return min(item.target.writes_at_once for item in items)


def _consumers(state: dict[str, Any]) -> SharedConsumers:
    consumers = state.get("consumers")
    if consumers is None:
        consumers = state["consumers"] = SharedConsumers()
    return consumers  # type: ignore[no-any-return]


def _announce(items: list[WriteItem], state: dict[str, Any]) -> None:
    consumers = _consumers(state)
    if min(len(items), _writes_at_once(items)) > 1 and any(item.records.uses_task_consumers for item in items):
        state["reading"] = threading.Lock()  # writes that run at the same time take turns at the task's consumers
    for item in items:
        item.records.announce(consumers, item.task.read_from, item.task.end, item.estimated_bytes)


def _write(item: WriteItem, state: dict[str, Any]) -> list[Written]:
    records = item.records.open(_consumers(state))
    reading: threading.Lock | None = state.get("reading")
    if reading is not None and item.records.uses_task_consumers:
        records = _ReadFirst(records, item.task, reading)
    written = list(item.target.write(records, item.task, item.limits))
    check_coverage(records.name, item.task, written)
    return written


class _ReadFirst:
    """A write's range read whole before it writes, with the task's read lock held, so writes that run at the same
    time (network-bound: transactions, S3 uploads) never use the task's consumers together. Tasks of several writes
    run so: a shared job's, whose ranges are small (each at most 8 MiB and 62 500 offsets: the flush scheduler's
    bound); a task of one write (a backlog's) streams its range, and so does every write of a restore (an archived
    chain reads its own blobs: a round's range, up to a task's offsets, was held whole here before producing, so
    the produce waited for the read and the two writes of a task read one after the other)."""

    def __init__(self, records: RecordSource, task: TaskRange, reading: threading.Lock) -> None:
        self._records, self._reading = records, reading
        self.topic, self.partition, self.name = records.topic, records.partition, records.name
        self._range = (task.read_from, task.end)
        with reading:
            self._batches = list(records.read(task.read_from, task.end))

    def read(self, read_from: int, end: int) -> Iterator[list[Any]]:
        if (read_from, end) == self._range:
            return iter(self._batches)
        with self._reading:
            return iter(list(self._records.read(read_from, end)))


def cancel_job(spark: SparkSession, job_group: str) -> None:
    spark.sparkContext.cancelJobGroup(job_group)


def run_tasks(
    spark: SparkSession,
    spec: JobSpec,
    count: int,
    function: Callable[[Iterable[int]], Iterable[T]],
) -> list[T]:
    """One job of `count` tasks, task i calling `function` on an iterator of i alone; what they yield, collected.

    A failed Python task raises SparkTaskError with its exception type and message; a lost driver JVM
    SparkGoneError; a cancelled job JobCancelled."""
    context = spark.sparkContext
    try:
        context.setJobGroup(spec.job_group, spec.description, interruptOnCancel=True)
        context.setLocalProperty("spark.scheduler.pool", spec.pool)
        # pyspark ships a range as its bounds and makes each slice's one number inside its task.
        return context.parallelize(range(count), count).mapPartitions(function).collect()
    except (Py4JNetworkError, ConnectionError) as exc:
        raise SparkGoneError() from exc
    except Exception as exc:
        text = str(exc)
        if "cancelled" in text and spec.job_group in text:
            raise JobCancelled(spec.description) from None
        kind, message = task_failure(text)
        if kind is None:
            raise
        raise SparkTaskError(kind, message) from None
    finally:
        with contextlib.suppress(Py4JNetworkError, ConnectionError):
            context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
            context.setLocalProperty("spark.scheduler.pool", None)  # type: ignore[arg-type]


# The last line of a Python traceback inside a Spark error: "module.ErrorType: message".
_TRACEBACK_TAIL = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Za-z_]\w*(?:Error|Exception)): (.+)$")


def task_failure(text: str) -> tuple[str | None, str]:
    """(exception type, message) of the failed Python task in a Spark error's text, if it has one."""
    found: tuple[str | None, str] = (None, "")
    in_python = False
    for line in text.splitlines():
        if "Traceback (most recent call last)" in line:  # an RDD job's: after the Java exception, on its line
            in_python = True
            continue
        if in_python and (match := _TRACEBACK_TAIL.match(line.strip())):
            found = (match.group(1), match.group(2))
            in_python = False
    return found
