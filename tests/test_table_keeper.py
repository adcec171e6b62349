"""The archive's tables following its chains (`supervisor.table_keeper`), with an in-memory archive and table: each
committed blob added once, in order, up to the durable position; positions read from the table after a failure;
a failing table a WARN and degraded readiness, never an exception out of the keeper."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from config.estate import MirrorSpec
from config.model import FlushConfig, SourceConfig, TableConfig
from core.file_statistics import FileStatistics
from sinks.blob.chain import blob_name
from sinks.tables.positions import CommittedLog, TableFile
from supervisor.process_service import MirroredPartition, RunningProcess
from supervisor.table_keeper import TableKeeper
from tests.fakes import FakeClock, MemoryArchive, MemoryTable, fresh_metrics

SOURCE = SourceConfig(bootstrap_servers="src:9092")


def _spec(partition: int) -> MirrorSpec:
    return MirrorSpec(
        f"orders-{partition}", 0, "prod", SOURCE, "clusters.prod", "orders", partition, "orders", FlushConfig()
    )


def _mirrored(positions: dict[int, int]) -> list[MirroredPartition]:
    return [
        MirroredPartition("prod", SOURCE, "clusters.prod", "orders", p, "orders", at) for p, at in positions.items()
    ]


def _keeper(
    archive: MemoryArchive, tables: dict[str, MemoryTable], clock: FakeClock | None = None
) -> tuple[TableKeeper, Any]:
    families, _ = fresh_metrics()

    def open_table(identifier: str, name: str) -> MemoryTable:
        return tables.setdefault(identifier, MemoryTable(identifier))

    settings = TableConfig(format="iceberg", name="archive.{topic}")
    keeper = TableKeeper(
        archive,  # type: ignore[arg-type]  # an in-memory archive: the part of Archive the keeper uses
        settings,
        False,
        families,
        open_table=open_table,
        clock=clock or FakeClock(),
    )
    return keeper, families


async def _real_time_until(condition: Callable[[], bool]) -> None:
    """Reads and commits run in threads, which a fake clock's steps do not wait for."""
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.005)


class ReadCountingTable(MemoryTable):
    def __init__(self, identifier: str) -> None:
        super().__init__(identifier)
        self.reads = 0

    def positions(self, chains: Any) -> Any:
        self.reads += 1
        return super().positions(chains)


async def test_serving_reads_each_tables_positions_at_once_and_a_failing_catalog_is_down_from_the_start() -> None:
    """Not at the first interval's end: the first commit then finds its table opened (and PyIceberg loaded) instead
    of doing that beside the mirrors' flushes, and an unreachable catalog is seen at start."""
    archive, clock = MemoryArchive(), FakeClock()
    tables: dict[str, MemoryTable] = {"archive.orders": ReadCountingTable("archive.orders")}
    tables["archive.orders"].fail_next = [OSError("catalog unreachable")]
    keeper, families = _keeper(archive, tables, clock)
    await keeper.mirrors_added([_spec(0)])
    archive.add("orders", 0, 0, 9)
    process = RunningProcess(anyio.Event(), lambda: _mirrored({0: 10}))
    table = tables["archive.orders"]
    async with anyio.create_task_group() as group:
        await group.start(keeper.serve, process)
        # The fake clock stands still: no interval passed. Advanced only once the keeper waits on it (an advance
        # before the wait began would move the wait's end along with it).
        await _real_time_until(lambda: bool(keeper.down) and clock.sleeping() > 0)
        assert keeper.down == {"archive.orders": "OSError: catalog unreachable"} and table.summaries == []
        assert families.registry.get_sample_value("mirror_v3_table_up", {"table": "archive.orders"}) == 0
        clock.advance(60.0)
        await _real_time_until(lambda: bool(table.summaries))  # the first round reads, commits
        assert keeper.down == {} and table.summaries == [{"orders/0": 10}]
        assert isinstance(table, ReadCountingTable) and table.reads == 2  # once failed, once at the round
        process.stop_requested.set()


async def test_each_committed_blob_is_added_once_in_order_up_to_the_durable_position() -> None:
    archive, tables = MemoryArchive(), dict[str, MemoryTable]()
    keeper, families = _keeper(archive, tables)
    await keeper.mirrors_added([_spec(0), _spec(1)])
    for first, last in ((0, 9), (10, 19), (20, 29)):
        archive.add("orders", 0, first, last)
    archive.add("orders", 1, 0, 4)
    await keeper.commit_all(_mirrored({0: 20, 1: 5}))  # 20-29 is in the chain, not yet durable for its mirror
    table = tables["archive.orders"]
    assert table.files == [
        f"mem://orders/0/{blob_name(0, 9)}",
        f"mem://orders/0/{blob_name(10, 19)}",
        f"mem://orders/1/{blob_name(0, 4)}",
    ]
    assert table.summaries == [{"orders/0": 20, "orders/1": 5}]
    await keeper.commit_all(_mirrored({0: 20, 1: 5}))
    assert len(table.summaries) == 1  # nothing new: no commit
    await keeper.commit_all(_mirrored({0: 30, 1: 5}))
    assert table.files[-1] == f"mem://orders/0/{blob_name(20, 29)}"
    assert table.summaries[-1] == {"orders/0": 30, "orders/1": 5}  # every chain's position in each commit
    labels = {"source_cluster": "prod", "topic": "orders", "partition": "0", "destination": "orders"}
    assert families.registry.get_sample_value("mirror_v3_table_next_offset", labels) == 30
    assert families.registry.get_sample_value("mirror_v3_table_lag_records", labels) == 0


async def test_after_a_failure_the_table_says_where_it_is_and_nothing_is_added_twice() -> None:
    archive, tables = MemoryArchive(), dict[str, MemoryTable]()
    keeper, families = _keeper(archive, tables)
    await keeper.mirrors_added([_spec(0)])
    archive.add("orders", 0, 0, 9)
    await keeper.commit_all(_mirrored({0: 10}))
    table = tables["archive.orders"]
    archive.add("orders", 0, 10, 19)
    # The commit's answer is lost although it landed: the keeper does not know, and reads the table again.
    landed = table.commit

    def lost_answer(files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        landed(files, positions, based_on)
        raise OSError("connection reset")

    table.commit = lost_answer  # type: ignore[method-assign]
    await keeper.commit_all(_mirrored({0: 20}))
    assert keeper.down == {"archive.orders": "OSError: connection reset"}
    assert families.registry.get_sample_value("mirror_v3_table_up", {"table": "archive.orders"}) == 0
    table.commit = landed  # type: ignore[method-assign]
    await keeper.commit_all(_mirrored({0: 20}))
    assert table.files == [f"mem://orders/0/{blob_name(0, 9)}", f"mem://orders/0/{blob_name(10, 19)}"]
    assert keeper.down == {}
    assert families.registry.get_sample_value("mirror_v3_table_up", {"table": "archive.orders"}) == 1


async def test_a_new_process_continues_from_the_tables_commits(caplog: pytest.LogCaptureFixture) -> None:
    archive, tables = MemoryArchive(), dict[str, MemoryTable]()
    first, _ = _keeper(archive, tables)
    await first.mirrors_added([_spec(0)])
    archive.add("orders", 0, 0, 9)
    await first.commit_all(_mirrored({0: 10}))
    archive.add("orders", 0, 10, 14)
    archive.add("orders", 0, 20, 29)  # a gap: 15-19 missing (another writer, a broken chain)
    second, _ = _keeper(archive, tables)
    await second.mirrors_added([_spec(0)])
    await second.commit_all(_mirrored({0: 30}))
    assert tables["archive.orders"].files[1:] == [f"mem://orders/0/{blob_name(10, 14)}"]  # up to the gap only
    assert "does not continue it" in caplog.text


class CountingArchive(MemoryArchive):
    def __init__(self) -> None:
        super().__init__()
        self.listed = 0

    def chain_store(self, name: str, partition: int) -> Any:
        self.listed += 1
        return super().chain_store(name, partition)


async def test_what_the_actors_committed_is_added_without_listing_the_chains() -> None:
    """A filesystem listing reads a chain's whole directory: the keeper takes the blobs from what the mirrors'
    actors committed, and lists a chain only where that does not reach back to the table's position."""
    archive, tables = CountingArchive(), dict[str, MemoryTable]()
    keeper, _ = _keeper(archive, tables)
    await keeper.mirrors_added([_spec(0), _spec(1)])
    logs = {0: CommittedLog(8), 1: CommittedLog(8)}
    for first in range(0, 30, 10):
        archive.add("orders", 0, first, first + 9)
        logs[0].add(first, first + 9, FileStatistics(100 + first, 10, (), (4,), ()))  # its writer's
    archive.add("orders", 1, 0, 4)  # committed by an earlier process: not in this actor's log
    archive.add("orders", 1, 5, 9)
    logs[1].add(5, 9)
    mirrored = [
        MirroredPartition("prod", SOURCE, "clusters.prod", "orders", p, "orders", end, logs[p])
        for p, end in ((0, 30), (1, 10))
    ]
    await keeper.commit_all(mirrored)
    table = tables["archive.orders"]
    assert table.files == [
        *(f"mem://orders/0/{blob_name(first, first + 9)}" for first in range(0, 30, 10)),
        f"mem://orders/1/{blob_name(0, 4)}",
        f"mem://orders/1/{blob_name(5, 9)}",
    ]
    assert archive.listed == 1  # partition 1's chain only
    # The writers' statistics come along (the table reads no footer); the listed blobs' are the table's to read.
    assert [table.statistics[file] for file in table.files[:3]] == [
        FileStatistics(100 + first, 10, (), (4,), ()) for first in range(0, 30, 10)
    ]
    assert table.statistics[f"mem://orders/1/{blob_name(0, 4)}"] is None
    assert logs[0].after(30, 30) is None and logs[1].after(10, 10) is None  # what the table holds is forgotten
    archive.add("orders", 0, 30, 39)
    logs[0].add(30, 39)
    mirrored[0] = MirroredPartition("prod", SOURCE, "clusters.prod", "orders", 0, "orders", 40, logs[0])
    await keeper.commit_all(mirrored)
    assert table.files[-1] == f"mem://orders/0/{blob_name(30, 39)}" and archive.listed == 1


def test_a_committed_log_answers_what_follows_a_position_or_that_it_does_not_reach_back() -> None:
    log = CommittedLog(3)
    assert log.after(0, 10) is None  # nothing committed here: the chain says
    for first in range(0, 40, 10):
        log.add(first, first + 9)  # the oldest of four falls out
    assert log.after(0, 40) is None
    found = log.after(10, 40)
    assert found is not None and found.next_offset == 40 and found.gap_at is None
    assert [blob.name for blob in found.blobs] == [blob_name(f, f + 9) for f in (10, 20, 30)]
    assert log.after(15, 40) is None  # not where a blob starts
    assert log.after(10, 50) is None  # the mirror is beyond what it committed (a skip): the chain says
    shorter = log.after(10, 30)  # the log grew after the mirror's position was read: up to that position only
    assert shorter is not None and shorter.next_offset == 30 and len(shorter.blobs) == 2
    log.forget_below(30)
    assert log.after(20, 40) is None and log.after(30, 40) is not None


class _HeldTable(MemoryTable):
    """A table whose commit waits until another table's commit lets it go (a slow catalog)."""

    def __init__(self, identifier: str, let_go: threading.Event, lets_go: threading.Event) -> None:
        super().__init__(identifier)
        self.let_go, self.lets_go = let_go, lets_go

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        if not self.let_go.wait(5):
            raise TimeoutError("held: the other table never committed meanwhile")
        super().commit(files, positions, based_on)
        self.lets_go.set()


async def test_a_slow_table_does_not_hold_back_the_others_commits() -> None:
    archive, orders_go, payments_go = MemoryArchive(), threading.Event(), threading.Event()
    payments_go.set()
    tables: dict[str, MemoryTable] = {  # orders' commit waits until payments' is done
        "archive.orders": _HeldTable("archive.orders", let_go=orders_go, lets_go=threading.Event()),
        "archive.payments": _HeldTable("archive.payments", let_go=payments_go, lets_go=orders_go),
    }
    keeper, _ = _keeper(archive, tables)
    payments = MirrorSpec("payments-0", 0, "prod", SOURCE, "clusters.prod", "payments", 0, "payments", FlushConfig())
    await keeper.mirrors_added([_spec(0), payments])  # orders' table first
    archive.add("orders", 0, 0, 9)
    archive.add("payments", 0, 0, 4)
    await keeper.commit_all(
        [
            MirroredPartition("prod", SOURCE, "clusters.prod", "orders", 0, "orders", 10),
            MirroredPartition("prod", SOURCE, "clusters.prod", "payments", 0, "payments", 5),
        ]
    )
    assert tables["archive.orders"].files == [f"mem://orders/0/{blob_name(0, 9)}"]
    assert tables["archive.payments"].files == [f"mem://payments/0/{blob_name(0, 4)}"]
    assert keeper.down == {}


async def test_positions_read_at_start_are_not_read_again_by_the_first_round() -> None:
    archive, clock = MemoryArchive(), FakeClock()
    table = ReadCountingTable("archive.orders")
    keeper, _ = _keeper(archive, {"archive.orders": table}, clock)
    await keeper.mirrors_added([_spec(0)])
    archive.add("orders", 0, 0, 9)
    process = RunningProcess(anyio.Event(), lambda: _mirrored({0: 10}))
    async with anyio.create_task_group() as group:
        await group.start(keeper.serve, process)
        # the fake clock stands still: no interval passed. Advance it only once the keeper waits on it (the read
        # runs in a thread; an advance before the wait began would move the wait's end along with it)
        await _real_time_until(lambda: table.reads == 1 and clock.sleeping() > 0)
        assert table.summaries == []
        clock.advance(60.0)
        await _real_time_until(lambda: bool(table.summaries))
        assert table.reads == 1 and table.summaries == [{"orders/0": 10}]
        process.stop_requested.set()
