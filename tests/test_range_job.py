"""The Spark boundary of every job, without Spark: what a task sends back for each of its items, and the write
item of a flush (this reader, this range, that target) with the task's shared consumer."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

from sinks.blob_writer import BlobTarget
from sinks.kafka_produce import PreserveHoleError
from sinks.write_target import BlobLimits, RangeCoverageError, TaskRange, Written
from source.range_reader import SharedConsumers
from tests.fakes import FakeConsumer, FakePartitionSource, InMemoryStore, MemoryStaging
from workers.range_job import OUTCOME_SCHEMA, Outcome, SparkTaskError, WriteItem, _task_function, _write


class Closable:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def run_task_function(items: list[Any], packs: tuple[tuple[int, ...], ...], run_item: Any) -> dict[int, Outcome[Any]]:
    """What the tasks of a job would return, decoded as the driver decodes it (workers.range_job.run_items)."""
    function = _task_function(tuple(items), packs, run_item)
    tasks = pa.record_batch([pa.array(range(len(packs)), pa.int64())], names=["id"])
    found: dict[int, Outcome[Any]] = {}
    for batch in function(iter([tasks])):
        assert batch.schema.equals(OUTCOME_SCHEMA)
        for row in batch.to_pylist():
            kind, value = pickle.loads(row["outcome"])
            found[row["item"]] = Outcome(error=value) if kind == "error" else Outcome(result=value)
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
