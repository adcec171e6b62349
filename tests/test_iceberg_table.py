"""An archive's Iceberg table through real PyIceberg on its SQLite catalog: made with the archive's columns and
partitioning, blobs added as they lie with each chain's position in the commit, positions read back from the
table's own commits (past someone else's), a lost race tried again only while the positions still hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil  # type: ignore[import-untyped]
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from core.file_statistics import file_statistics
from core.records import encode_parquet
from sinks.blob.chain import blob_name
from sinks.tables import elsewhere
from sinks.tables.delta import DeltaArchiveTable
from sinks.tables.elsewhere import ElsewhereIcebergTable
from sinks.tables.iceberg import DataFiles, IcebergCatalog, IcebergTable, TableError
from sinks.tables.positions import TableFile, list_after, next_blobs, walk_positions
from sinks.tables.rewrites import FileChange
from tests.fakes import FakeRecord, records_table

ROOT = Path(__file__).resolve().parent.parent


def _catalog(root: Path) -> IcebergCatalog:
    return IcebergCatalog(
        "test",
        {
            "type": "sql",
            "uri": f"sqlite:///{root / '_catalog' / 'iceberg.db'}",
            "warehouse": f"file://{root / '_iceberg'}",
            "init_catalog_tables": "true",
        },
        directory=str(root / "_catalog"),  # made by the catalog's first load
    )


def _blob(root: Path, partition: int, first: int, last: int) -> TableFile:
    records = [FakeRecord(offset, f"k{offset}".encode(), f"v{offset}".encode()) for offset in range(first, last + 1)]
    directory = root / "orders" / str(partition)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / blob_name(first, last)
    path.write_bytes(encode_parquet(records_table(records, "orders", partition), "zstd", None))
    return TableFile(str(path), partition, path.name)


def test_blobs_are_added_once_with_their_chains_positions(tmp_path: Path) -> None:
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    assert table.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 0, "orders/1": 0}  # new, empty
    files = [_blob(tmp_path, 0, 0, 9), _blob(tmp_path, 0, 10, 14), _blob(tmp_path, 1, 0, 4)]
    table.commit(files, {"orders/0": 15, "orders/1": 5}, based_on={"orders/0": 0, "orders/1": 0})
    again = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)  # a new process reads the table
    assert again.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 15, "orders/1": 5}
    rows = again.scan()
    assert sorted(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == [
        *((0, offset) for offset in range(15)),
        *((1, offset) for offset in range(5)),
    ]
    assert rows.filter(pa.compute.equal(rows["offset"], 3))["value"].to_pylist() == [b"v3", b"v3"]
    loaded = again._loaded()
    assert loaded.properties["gc.enabled"] == "false"
    assert [field.name for field in loaded.spec().fields] == ["partition"]
    assert {task.file.file_path for task in loaded.scan().plan_files()} == {f.uri for f in files}  # in place


def test_blobs_written_before_partition_statistics_join_a_day_partitioned_table(tmp_path: Path) -> None:
    """Archives from before blobs kept statistics of `partition` (only offset and timestamp) join a table: each
    blob's partition comes from its chain, its day from its timestamps."""
    day_ms = 1_700_006_400_000  # 2023-11-15T00:00:00Z
    files = []
    for partition, first in ((0, 0), (0, 5), (3, 0)):
        records = [FakeRecord(o, None, b"v", timestamp_ms=day_ms + 1000 * o) for o in range(first, first + 5)]
        directory = tmp_path / "orders" / str(partition)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / blob_name(first, first + 4)
        pq.write_table(  # the writer's settings before the table issue
            records_table(records, "orders", partition),
            path,
            compression="zstd",
            write_statistics=["offset", "timestamp"],
        )
        assert not pq.read_metadata(path).row_group(0).column(3).is_stats_set  # no statistics of partition
        files.append(TableFile(str(path), partition, path.name))
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=True)
    table.commit(files, {"orders/0": 10, "orders/3": 5}, based_on={"orders/0": 0, "orders/3": 0})
    loaded = IcebergTable(_catalog(tmp_path), "archive.orders", daily=True)._loaded()
    partitions = {(task.file.file_path, tuple(task.file.partition)) for task in loaded.scan().plan_files()}
    day = day_ms // 86_400_000
    assert partitions == {(files[0].uri, (0, day)), (files[1].uri, (0, day)), (files[2].uri, (3, day))}
    assert loaded.scan(row_filter="partition = 3").to_arrow()["offset"].to_pylist() == [0, 1, 2, 3, 4]  # pruned


def test_a_blobs_data_file_is_the_same_from_its_writers_statistics_or_its_footer_and_pyiceberg_agrees(
    tmp_path: Path,
) -> None:
    """The statistics a task hands over with its blob give the data file that its footer gives, and that is what
    PyIceberg's own statistics of the footer say (the columns without statistics: sizes only)."""
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )

    day_ms = 1_700_006_400_000
    records = [FakeRecord(o, b"k", b"v" * o, timestamp_ms=day_ms + 7 * o) for o in range(4, 9)]
    path = tmp_path / "orders" / "2" / blob_name(4, 8)
    path.parent.mkdir(parents=True)
    data = bytes(encode_parquet(records_table(records, "orders", 2), "zstd", None))
    path.write_bytes(data)
    footer = pq.read_metadata(path)
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=True)
    files = DataFiles(table._loaded())
    told = files.of(TableFile(str(path), 2, path.name, file_statistics(footer, len(data))))
    read = files.of(TableFile(str(path), 2, path.name))
    fields = ("record_count", "file_size_in_bytes", "column_sizes", "value_counts", "null_value_counts")
    bounds = ("lower_bounds", "upper_bounds", "split_offsets", "partition")
    assert [getattr(told, f) for f in (*fields, *bounds)] == [getattr(read, f) for f in (*fields, *bounds)]
    schema = table._loaded().metadata.schema()
    properties = {"write.metadata.metrics.default": "none"}
    properties |= {f"write.metadata.metrics.column.{c}": "full" for c in ("partition", "offset", "timestamp")}
    theirs = data_file_statistics_from_parquet_metadata(
        footer, compute_statistics_plan(schema, properties), parquet_path_to_id_mapping(schema)
    ).to_serialized_dict()
    assert {f: getattr(told, f) for f in (*fields, "lower_bounds", "upper_bounds", "split_offsets")} == {
        "file_size_in_bytes": len(data),
        **{f: theirs[f] for f in (*fields, "lower_bounds", "upper_bounds", "split_offsets") if f in theirs},
    }
    assert tuple(told.partition) == (2, day_ms // 86_400_000)


def test_a_blob_across_two_utc_days_is_refused_by_a_day_partitioned_table(tmp_path: Path) -> None:
    records = [
        FakeRecord(0, None, b"v", timestamp_ms=1_700_006_399_000),
        FakeRecord(1, None, b"v", timestamp_ms=1_700_006_400_000),
    ]
    path = tmp_path / "orders" / "0" / blob_name(0, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_parquet(records_table(records, "orders", 0), "zstd", None))
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=True)
    with pytest.raises(TableError, match="spans 2 UTC days"):
        table.commit([TableFile(str(path), 0, path.name)], {"orders/0": 2}, based_on={"orders/0": 0})
    assert table.positions(["orders/0"]).next_offsets == {"orders/0": 0}  # nothing added


def test_a_commit_that_lost_a_race_is_not_retried_once_its_positions_moved(tmp_path: Path) -> None:
    first = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    first.positions(["orders/0"])
    second = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    second.positions(["orders/0"])
    second.commit([_blob(tmp_path, 0, 0, 9)], {"orders/0": 10}, based_on={"orders/0": 0})
    # `first` still holds the table as it was: its commit conflicts, and on the refreshed table its base is gone.
    with pytest.raises(TableError) as refused:
        first.commit([_blob(tmp_path, 0, 0, 9)], {"orders/0": 10}, based_on={"orders/0": 0})
    assert refused.value.operation == "commit" and "moved its positions" in refused.value.cause
    assert len(second.scan()) == 10  # nothing added twice
    reloaded = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)._loaded()
    assert "commit.retry.num-retries" not in reloaded.properties  # our view's setting, never the table's


def test_another_writers_commit_of_other_chains_is_retried_over(tmp_path: Path) -> None:
    shard_a = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    shard_a.positions(["orders/0"])
    shard_b = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    shard_b.commit([_blob(tmp_path, 1, 0, 4)], {"orders/1": 5}, based_on={"orders/1": 0})
    shard_a.commit([_blob(tmp_path, 0, 0, 9)], {"orders/0": 10}, based_on={"orders/0": 0})
    both = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    assert both.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 10, "orders/1": 5}
    assert len(both.scan()) == 15


def test_positions_come_from_the_newest_commit_naming_each_chain() -> None:
    summaries = [{"operation": "replace"}, {"mirror-v3.next-offset.o/0": "30"}, {"mirror-v3.next-offset.o/0": "20"}]
    assert walk_positions(summaries, ["o/0", "o/1"], history_complete=True).next_offsets == {"o/0": 30, "o/1": 0}
    # Expired history: a chain no remaining commit names is not assumed to be at its beginning.
    cut = walk_positions(summaries, ["o/0", "o/1"], history_complete=False)
    assert cut.next_offsets == {"o/0": 30} and cut.unknown == {"o/1"}


def test_the_blobs_after_a_position_are_consecutive_and_durable() -> None:
    names = [blob_name(10, 19), blob_name(20, 29), blob_name(30, 39)]
    found = next_blobs(10, names, durable_end=30)
    assert [(b.first, b.last) for b in found.blobs] == [(10, 19), (20, 29)] and found.next_offset == 30
    gap = next_blobs(10, [blob_name(10, 19), blob_name(25, 29)])
    assert gap.next_offset == 20 and gap.gap_at is not None and gap.gap_at.first == 25
    # A run a compaction merged is taken as its merged blob, whatever of the run is still there.
    merged = next_blobs(10, [blob_name(10, 19), blob_name(10, 29), blob_name(20, 29), blob_name(30, 39)])
    assert [(b.first, b.last) for b in merged.blobs] == [(10, 29), (30, 39)] and merged.gap_at is None
    assert list_after(0) is None
    after = list_after(10)
    assert after is not None and blob_name(9, 9) < after < blob_name(10, 10) and blob_name(9, 12) < after


def test_a_delta_table_rooted_at_the_chains_adds_each_blob_where_it_lies(tmp_path: Path) -> None:
    table = DeltaArchiveTable(str(tmp_path / "orders"), "mirror_v3.orders")
    assert table.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 0, "orders/1": 0}
    files = [_blob(tmp_path, 0, 0, 9), _blob(tmp_path, 0, 10, 14), _blob(tmp_path, 1, 0, 4)]
    table.commit(files, {"orders/0": 15, "orders/1": 5}, based_on={"orders/0": 0, "orders/1": 0})
    again = DeltaArchiveTable(str(tmp_path / "orders"), "mirror_v3.orders")  # a new process reads the table
    assert again.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 15, "orders/1": 5}
    read = DeltaTable(str(tmp_path / "orders"))
    assert sorted(read.file_uris()) == sorted(f.uri for f in files)  # in place: nothing copied
    rows = read.to_pyarrow_table()
    assert sorted(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True)) == [
        *((0, offset) for offset in range(15)),
        *((1, offset) for offset in range(5)),
    ]
    adds = pa.table(read.get_add_actions(flatten=True)).to_pydict()
    assert sorted(adds["num_records"]) == [5, 5, 10] and sorted(adds["min.offset"]) == [0, 0, 10]
    # A writer whose view is stale (the table moved on since it chose its files) adds nothing.
    with pytest.raises(TableError) as refused:
        stale = DeltaArchiveTable(str(tmp_path / "orders"), "mirror_v3.orders")
        stale.commit([_blob(tmp_path, 0, 0, 9)], {"orders/0": 10}, based_on={"orders/0": 0})
    assert refused.value.operation == "commit"
    assert len(DeltaTable(str(tmp_path / "orders")).to_pyarrow_table()) == 20


def test_a_commit_made_in_the_worker_process_is_the_same_commit_and_its_refusal_keeps_its_facts(
    tmp_path: Path,
) -> None:
    """The run process commits in a worker process (`sinks.tables.elsewhere`): the commit lands as one made here,
    and a refusal comes back as the TableError it was, its facts intact."""
    table = ElsewhereIcebergTable(IcebergTable(_catalog(tmp_path), "archive.orders", daily=False))
    assert table.positions(["orders/0"]).next_offsets == {"orders/0": 0}
    # Reading the positions had the worker open the table too, before the first commit is due.
    opened = elsewhere._worker().submit(_tables_opened_in_the_worker).result()
    assert ("archive.orders", _catalog(tmp_path).properties["uri"]) in opened
    table.commit([_blob(tmp_path, 0, 0, 9)], {"orders/0": 10}, based_on={"orders/0": 0})
    assert table.positions(["orders/0"]).next_offsets == {"orders/0": 10}
    here = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)  # another writer moves the chain on
    here.commit([_blob(tmp_path, 0, 10, 19)], {"orders/0": 20}, based_on={"orders/0": 10})
    with pytest.raises(TableError) as refused:  # the worker's view is older: its retry finds the position moved
        table.commit([_blob(tmp_path, 0, 10, 14)], {"orders/0": 15}, based_on={"orders/0": 10})
    assert refused.value.operation == "commit" and "moved its positions" in refused.value.cause
    assert len(here.scan()) == 20


def _tables_opened_in_the_worker() -> list[tuple[str, str]]:
    return [(table.identifier, table.catalog.properties["uri"]) for table in elsewhere._opened.values()]


def test_the_commit_worker_ends_when_the_mirror_is_killed() -> None:
    """A mirror killed with SIGKILL closes nothing its commit worker waits on: the worker sees its parent change and
    ends (within PARENT_CHECK_S), instead of outliving every killed mirror."""
    program = (
        "import sys, time; from sinks.tables import elsewhere; elsewhere.start_worker(); "
        "pool = elsewhere._worker(); pool.submit(int).result(); "
        "print(*[p.pid for p in pool._processes.values()], flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert parent.stdout is not None
        (worker,) = map(int, parent.stdout.readline().split())
        assert psutil.pid_exists(worker)
    finally:
        parent.kill()
        parent.wait()
    gone, _ = psutil.wait_procs([psutil.Process(worker)], timeout=10)  # bounded wait on another process's end
    assert gone, f"worker {worker} outlived its killed parent"


def _offsets(rows: pa.Table) -> list[tuple[int, int]]:
    return sorted(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True))


def test_a_compaction_is_one_replace_commit_that_changes_no_row_and_a_prune_one_delete(tmp_path: Path) -> None:
    """`rewrite`: a run the table holds whole is replaced by its merged blob (a `replace` snapshot: same rows, the
    positions untouched); done again it commits nothing; a prune removes the oldest blobs (a `delete` snapshot); a run
    the table holds only part of is refused and nothing is committed."""
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    run = [_blob(tmp_path, 0, 0, 9), _blob(tmp_path, 0, 10, 14)]
    tail, other = _blob(tmp_path, 0, 15, 19), _blob(tmp_path, 1, 0, 4)
    table.commit([*run, tail, other], {"orders/0": 20, "orders/1": 5}, based_on={"orders/0": 0, "orders/1": 0})
    before = _offsets(table.scan())
    merged = _blob(tmp_path, 0, 0, 14)
    assert table.rewrite([FileChange(tuple(run), merged)], "compaction") == 2
    loaded = table._loaded()
    assert loaded.current_snapshot().summary.operation.value == "replace"
    assert loaded.current_snapshot().summary["mirror-v3.maintenance"] == "compaction"
    assert _offsets(table.scan()) == before
    assert {task.file.file_path for task in loaded.scan().plan_files()} == {merged.uri, tail.uri, other.uri}
    assert table.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 20, "orders/1": 5}
    assert table.rewrite([FileChange(tuple(run), merged)], "compaction") == 0  # done: nothing committed
    with pytest.raises(TableError) as refused:
        table.rewrite([FileChange((tail, _blob(tmp_path, 0, 20, 24)), _blob(tmp_path, 0, 15, 24))], "compaction")
    assert refused.value.operation == "rewrite" and "part of a run" in refused.value.cause
    assert table.rewrite([FileChange((merged,))], "prune") == 1
    assert table._loaded().current_snapshot().summary.operation.value == "delete"
    assert _offsets(table.scan()) == [(0, offset) for offset in range(15, 20)] + [(1, o) for o in range(5)]
    assert table.positions(["orders/0", "orders/1"]).next_offsets == {"orders/0": 20, "orders/1": 5}


def test_a_delta_compaction_removes_and_adds_without_a_data_change_and_a_prune_removes(tmp_path: Path) -> None:
    table = DeltaArchiveTable(str(tmp_path / "orders"), "mirror_v3.orders")
    run = [_blob(tmp_path, 0, 0, 9), _blob(tmp_path, 0, 10, 14)]
    tail = _blob(tmp_path, 0, 15, 19)
    table.commit([*run, tail], {"orders/0": 20}, based_on={"orders/0": 0})
    merged = _blob(tmp_path, 0, 0, 14)
    assert table.rewrite([FileChange(tuple(run), merged)], "compaction") == 2
    read = DeltaTable(str(tmp_path / "orders"))
    assert sorted(read.file_uris()) == sorted([merged.uri, tail.uri])
    assert _offsets(read.to_pyarrow_table()) == [(0, offset) for offset in range(20)]
    latest = read.history(1)[0]
    assert latest["mirror-v3.maintenance"] == "compaction"
    assert table.rewrite([FileChange(tuple(run), merged)], "compaction") == 0
    assert table.rewrite([FileChange((merged,))], "prune") == 1
    read = DeltaTable(str(tmp_path / "orders"))
    assert _offsets(read.to_pyarrow_table()) == [(0, offset) for offset in range(15, 20)]
    assert table.positions(["orders/0"]).next_offsets == {"orders/0": 20}  # its transaction version stays
