"""The Spark boundary of every job, without Spark: what a task sends back for each of its items, and the write
item of a flush (this reader, this range, that target) with the task's shared consumer."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sinks.blob.writer import BlobTarget
from sinks.kafka.produce import PreserveHoleError
from sinks.write_target import BlobLimits, RangeCoverageError, TaskRange, Written
from source.range_reader import SharedConsumers
from tests.fakes import FakeConsumer, FakePartitionSource, InMemoryStore, MemoryStaging
from workers.range_job import (
    OVERLAPPING_WRITE_MAX_OFFSETS,
    Outcome,
    SparkTaskError,
    WriteItem,
    _announce,
    _task_function,
    _write,
    _writes_at_once,
    decoded,
)


class Closable:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def run_task_function(
    items: list[Any], packs: tuple[tuple[int, ...], ...], run_item: Any, before_pack: Any = None, at_once: Any = None
) -> dict[int, Outcome[Any]]:
    """What the tasks of a job would return, decoded as the driver decodes it (workers.range_job.run_items)."""
    function = _task_function(tuple(items), packs, run_item, before_pack, at_once)
    found: dict[int, Outcome[Any]] = {}
    for index, outcome in function(iter(range(len(packs)))):
        assert isinstance(index, int) and isinstance(outcome, bytes)
        found[index] = decoded(outcome)
    return found


def test_each_item_reports_its_result_or_its_typed_error_and_its_neighbours_go_on() -> None:
    held = Closable()

    def run_item(item: str, state: dict[str, Any]) -> str:
        state.setdefault("client", held)
        if item == "hole":
            raise PreserveHoleError("t-0", 1, 2)
        if item == "disk":
            raise OSError(28, "No space left on device")
        return item.upper()

    found = run_task_function(["a", "hole", "b", "disk", "c"], ((0, 1, 2), (3, 4)), run_item)
    assert {i: o.result for i, o in found.items() if o.error is None} == {0: "A", 2: "B", 4: "C"}
    hole = found[1].error
    assert isinstance(hole, PreserveHoleError) and (hole.partition, hole.first, hole.last) == ("t-0", 1, 2)
    disk = found[3].error
    assert isinstance(disk, SparkTaskError) and disk.exception_type == "OSError"
    assert "No space left on device" in disk.message
    assert held.closed  # what a task's items shared is closed when the task ends
    with pytest.raises(PreserveHoleError):
        found[1].get()


def test_a_write_item_reads_with_the_tasks_shared_consumer_and_must_tile_its_range() -> None:
    source = FakePartitionSource()
    source.append(30)
    made: list[FakeConsumer] = []

    def consumer(_: Any) -> FakeConsumer:
        made.append(FakeConsumer(source))
        return made[-1]

    store = InMemoryStore()
    target = BlobTarget(MemoryStaging(store))
    state: dict[str, Any] = {"consumers": SharedConsumers(consumer)}
    first = _write(WriteItem(source.partition_spec(), TaskRange(0, 0, 10), BlobLimits(10**9, 10**9), target), state)
    second = _write(WriteItem(source.partition_spec(), TaskRange(10, 10, 30), BlobLimits(10**9, 10), target), state)
    assert [(w.first, w.last) for w in first + second] == [(0, 9), (10, 19), (20, 29)]
    assert len(made) == 1  # one consumer for every range of the cluster the task reads

    class ShortTarget(BlobTarget):
        def write(self, records: Any, task: TaskRange, limits: BlobLimits) -> list[Any]:
            return [Written(first=task.first, last=task.end - 2, records=0, record_bytes=0)]

    with pytest.raises(RangeCoverageError) as caught:
        _write(
            WriteItem(source.partition_spec(), TaskRange(0, 0, 10), BlobLimits(1, 1), ShortTarget(target.staging)),
            state,
        )
    assert (caught.value.first, caught.value.end, caught.value.reached) == (0, 10, 9)


def test_items_that_may_run_at_once_run_in_threads_and_each_reports_its_own_outcome() -> None:
    meeting = threading.Barrier(4, timeout=10)  # passed only if four items run at the same time

    def run_item(item: int, state: dict[str, Any]) -> int:
        meeting.wait()
        if item == 2:
            raise PreserveHoleError("t-2", 0, 0)
        return item * 10

    found = run_task_function([0, 1, 2, 3, 4, 5, 6, 7], ((0, 1, 2, 3, 4, 5, 6, 7),), run_item, at_once=lambda _: 4)
    assert {i: o.result for i, o in found.items() if o.error is None} == {
        0: 0,
        1: 10,
        3: 30,
        4: 40,
        5: 50,
        6: 60,
        7: 70,
    }
    assert isinstance(found[2].error, PreserveHoleError)


class Transactions(BlobTarget):
    """A target whose writes may overlap (as a Kafka transaction's): checks they never read at the same time."""

    reading = 0

    @property
    def writes_at_once(self) -> int:
        return 4

    def write(self, records: Any, task: TaskRange, limits: BlobLimits) -> list[Any]:
        Transactions.reading += 1
        try:
            assert Transactions.reading <= 4
            offsets = [m.offset() for batch in records.read(task.read_from, task.end) for m in batch]
        finally:
            Transactions.reading -= 1
        assert offsets == list(range(task.read_from, task.end))
        return [Written(first=task.first, last=task.end - 1, records=len(offsets), record_bytes=0)]


def test_writes_that_run_at_once_read_their_ranges_one_at_a_time_from_the_tasks_consumer() -> None:
    source = FakePartitionSource()
    source.append(240)
    busy = threading.Lock()

    class GuardedConsumer(FakeConsumer):
        def consume(self, *args: Any, **kwargs: Any) -> Any:
            assert busy.acquire(blocking=False), "two writes used the task's consumer at the same time"
            try:
                return super().consume(*args, **kwargs)
            finally:
                busy.release()

    target = Transactions(MemoryStaging(InMemoryStore()))
    ranges = [TaskRange(first, first + 5, first + 40) for first in range(0, 240, 40)]
    items = [WriteItem(source.partition_spec(), task, BlobLimits(10**9, 10**9), target) for task in ranges]

    def before_pack(pack: list[WriteItem], state: dict[str, Any]) -> None:
        state["consumers"] = SharedConsumers(lambda _: GuardedConsumer(source))
        _announce(pack, state)

    assert _writes_at_once(items) == 4
    found = run_task_function(items, (tuple(range(6)),), _write, before_pack, _writes_at_once)
    assert all(o.error is None for o in found.values()), [o.error for o in found.values()]
    written = [(w.first, w.last, w.records) for i in sorted(found) for w in found[i].get()]
    assert written == [(task.first, task.end - 1, 35) for task in ranges]


def test_a_task_of_one_write_streams_its_range_even_where_writes_may_overlap() -> None:
    # Reading a range whole first is for writes that share the task's consumer; a backlog's one write (up to the
    # task's bytes) must not be held in memory.
    source = FakePartitionSource()
    target = Transactions(MemoryStaging(InMemoryStore()))
    alone = [WriteItem(source.partition_spec(), TaskRange(0, 0, 40), BlobLimits(10**9, 10**9), target)]
    state: dict[str, Any] = {"consumers": SharedConsumers(lambda _: FakeConsumer(source))}
    _announce(alone, state)
    assert "reading" not in state
    _announce(alone * 2, state)
    assert "reading" in state


class OwnBlobs:
    """A range read from its own blobs (as `workers.restore_job.ArchivedRange`): no task consumer; logs each batch
    read into `events`."""

    uses_task_consumers = False

    def __init__(self, source: FakePartitionSource, events: list[tuple[str, int]]) -> None:
        self._source, self._events = source, events
        self.topic, self.partition, self.name = source.topic, source.partition, f"{source.topic}-{source.partition}"

    def open(self, consumers: SharedConsumers) -> OwnBlobs:
        return self

    def announce(self, consumers: SharedConsumers, read_from: int, end: int, estimated_bytes: int) -> None:
        return None

    def read(self, read_from: int, end: int) -> Any:
        for first in range(read_from, end, 10):
            self._events.append(("read", first))
            yield [self._source.records[offset] for offset in range(first, min(first + 10, end))]


def test_writes_of_archived_ranges_that_run_at_once_stream_their_ranges() -> None:
    # A restore's writes read their own blobs: held whole before producing, a range's produce waited for all of its
    # read, and the task's writes read one after the other.
    source = FakePartitionSource()
    source.append(80)
    events: list[tuple[str, int]] = []

    class Logged(Transactions):
        def write(self, records: Any, task: TaskRange, limits: BlobLimits) -> list[Any]:
            count = 0
            for batch in records.read(task.read_from, task.end):
                events.append(("wrote", batch[0].offset))
                count += len(batch)
            return [Written(first=task.first, last=task.end - 1, records=count, record_bytes=0)]

    target = Logged(MemoryStaging(InMemoryStore()))
    items = [
        WriteItem(OwnBlobs(source, events), TaskRange(f, f, f + 40), BlobLimits(10**9, 10**9), target) for f in (0, 40)
    ]
    state: dict[str, Any] = {"consumers": SharedConsumers(lambda _: FakeConsumer(source))}
    _announce(items, state)
    assert "reading" not in state
    written = [w for item in items for w in _write(item, state)]
    assert [(w.first, w.last, w.records) for w in written] == [(0, 39, 40), (40, 79, 40)]
    assert events[:4] == [("read", 0), ("wrote", 0), ("read", 10), ("wrote", 10)]  # each batch written as it is read


def test_a_restores_writes_that_may_overlap_run_one_after_the_other_when_they_are_large() -> None:
    # A restore's ranges are CPU-bound: in threads of one worker they only contend for its interpreter lock.
    source = FakePartitionSource()
    target = Transactions(MemoryStaging(InMemoryStore()))

    def items(*sizes: int, archived: bool = True) -> list[WriteItem]:
        spec: Any = OwnBlobs(source, []) if archived else source.partition_spec()
        return [WriteItem(spec, TaskRange(0, 0, size), BlobLimits(10**9, 10**9), target) for size in sizes]

    assert _writes_at_once(items(1_000, 62_500, 3)) == 4  # small ranges overlap
    assert _writes_at_once(items(500_000, 500_000)) == 1  # a restore task's two large ranges do not
    assert _writes_at_once(items(OVERLAPPING_WRITE_MAX_OFFSETS + 1)) == 1
    assert _writes_at_once(items(500_000, 500_000, archived=False)) == 4  # live sources keep the target's overlap
