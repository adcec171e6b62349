"""`table-sync` (`sinks.tables.sync`) with an in-memory archive and table: every blob after each table position
added once, in order, at most a batch per commit; a second sync adds nothing; a sync cut short resumes from its
last commit; a chain that does not continue stops before its gap, and says so."""

from __future__ import annotations

import pytest

from commands.table_sync import complete, summary
from config.estate import MirrorSpec
from config.model import FlushConfig, SourceConfig, TableConfig
from sinks.blob.chain import blob_name
from sinks.tables.positions import TableFile
from sinks.tables.sync import TableSync, sync_tables
from tests.fakes import MemoryArchive, MemoryTable

SOURCE = SourceConfig(bootstrap_servers="src:9092")
SETTINGS = TableConfig(format="iceberg", name="archive.{topic}")


def _spec(topic: str, partition: int) -> MirrorSpec:
    return MirrorSpec(
        f"{topic}-{partition}", 0, "prod", SOURCE, "clusters.prod", topic, partition, topic, FlushConfig()
    )


def _archive(chains: dict[tuple[str, int], list[tuple[int, int]]]) -> MemoryArchive:
    archive = MemoryArchive()
    for (name, partition), blobs in chains.items():
        for first, last in blobs:
            archive.add(name, partition, first, last)
    return archive


async def _sync(
    archive: MemoryArchive, tables: dict[str, MemoryTable], specs: list[MirrorSpec], batch: int
) -> tuple[list[TableSync], list[tuple[int, int]]]:
    seen: list[tuple[int, int]] = []

    def open_table(identifier: str, name: str) -> MemoryTable:
        return tables.setdefault(identifier, MemoryTable(identifier))

    def progress(sync: TableSync, left: int) -> None:
        seen.append((sync.added, left))

    done = await sync_tables(archive, SETTINGS, False, specs, progress, batch, open_table)  # type: ignore[arg-type]
    return done, seen


def _uri(name: str, partition: int, first: int, last: int) -> str:
    return f"mem://{name}/{partition}/{blob_name(first, last)}"


async def test_every_blob_is_added_once_in_order_a_batch_per_commit_and_a_second_sync_adds_nothing() -> None:
    archive = _archive({("orders", 0): [(0, 9), (10, 19), (20, 29), (30, 39)], ("orders", 1): [(0, 4), (5, 9)]})
    tables: dict[str, MemoryTable] = {}
    specs = [_spec("orders", 0), _spec("orders", 1)]
    (sync,), progress = await _sync(archive, tables, specs, batch=3)
    table = tables["archive.orders"]
    assert table.files == [
        _uri("orders", 0, 0, 9),
        _uri("orders", 0, 10, 19),
        _uri("orders", 0, 20, 29),
        _uri("orders", 0, 30, 39),
        _uri("orders", 1, 0, 4),
        _uri("orders", 1, 5, 9),
    ]
    # Each commit records every chain's position: the ones it moved, and the others' as they were.
    assert table.summaries == [
        {"orders/0": 30, "orders/1": 0},
        {"orders/0": 40, "orders/1": 10},
    ]
    assert progress == [(3, 3), (6, 0)]
    assert (sync.added, sync.commits, sync.ends) == (6, 2, {"orders/0": 40, "orders/1": 10})

    (again,), progress = await _sync(archive, tables, specs, batch=3)
    assert (again.added, again.commits, progress) == (0, 0, [])
    assert len(table.files) == 6


class DiesAtSecondCommit(MemoryTable):
    def __init__(self, identifier: str) -> None:
        super().__init__(identifier)
        self.commits = 0

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        self.commits += 1
        if self.commits == 2:
            raise RuntimeError("killed")
        super().commit(files, positions, based_on)


async def test_a_sync_cut_short_resumes_from_its_last_commit() -> None:
    archive = _archive({("orders", 0): [(i * 10, i * 10 + 9) for i in range(5)]})
    table = DiesAtSecondCommit("archive.orders")
    tables: dict[str, MemoryTable] = {"archive.orders": table}
    with pytest.raises(RuntimeError, match="killed"):
        await _sync(archive, tables, [_spec("orders", 0)], batch=2)
    assert table.summaries == [{"orders/0": 20}]
    (resumed,), _ = await _sync(archive, tables, [_spec("orders", 0)], batch=2)
    assert resumed.added == 3
    assert table.files == [_uri("orders", 0, i * 10, i * 10 + 9) for i in range(5)]  # each once, in order


async def test_a_chain_with_a_gap_stops_before_it_and_the_other_chains_go_on() -> None:
    archive = _archive({("orders", 0): [(0, 9), (20, 29)], ("orders", 1): [(0, 9)], ("payments", 0): [(0, 4)]})
    tables: dict[str, MemoryTable] = {}
    specs = [_spec("orders", 0), _spec("orders", 1), _spec("payments", 0)]
    done, _ = await _sync(archive, tables, specs, batch=100)
    by_table = {sync.table: sync for sync in done}
    assert by_table["archive.orders"].gaps == {"orders/0": blob_name(20, 29)}
    assert by_table["archive.orders"].ends == {"orders/0": 10, "orders/1": 10}
    assert tables["archive.payments"].files == [_uri("payments", 0, 0, 4)]  # a table per topic


def test_the_summary_names_what_stopped_and_only_a_sync_with_every_chain_in_step_is_complete() -> None:
    gaps = {"orders/0": blob_name(20, 29)}
    done = TableSync("archive.orders", 3, added=5, commits=1, gaps=gaps, unknown=["orders/2"])
    assert summary(done).splitlines() == [
        "archive.orders: 5 blobs added in 1 commit; 1 of 3 chains in step",
        "  orders/2: position unknown (its table history was expired), nothing added",
        f"  orders/0: stopped before {blob_name(20, 29)}, which does not continue the chain",
    ]
    assert not complete(done)
    assert summary(TableSync("archive.orders", 2)) == "archive.orders: nothing to add; 2 chains in step"
    assert complete(TableSync("archive.orders", 2))
