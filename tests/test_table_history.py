"""The mirror's expiry of its Iceberg tables' old snapshots (`sinks.tables.history`): only the oldest end of the
history goes, never what reading a chain's position needs; the floor it leaves lets a chain no kept snapshot names
start at its beginning, where anyone else's expiry leaves such a chain unknown. Pure rule, then on a real PyIceberg
table (SQLite catalog) with a fake wall clock."""

from __future__ import annotations

from pathlib import Path

from sinks.tables.history import Expiry, OldestSnapshot, SnapshotFacts, expiry, history_complete
from sinks.tables.iceberg import IcebergTable
from tests.test_iceberg_table import _blob, _catalog


def _facts(*rows: tuple[int, int, set[str]]) -> list[SnapshotFacts]:
    return [SnapshotFacts(snapshot_id, at, frozenset(chains)) for snapshot_id, at, chains in rows]


def test_only_old_snapshots_past_every_chains_newest_naming_one_expire() -> None:
    history = _facts((6, 600, {"a/0", "a/1"}), (5, 500, {"a/0", "a/1"}), (4, 400, set()), (3, 300, {"a/0"}))
    assert expiry(history, keep_after_ms=450) == Expiry((4, 3), floor=5)
    assert expiry(history, keep_after_ms=100) is None  # all young
    # A shard whose newest commit is old keeps it, and everything newer (only the oldest end ever goes).
    sharded = _facts((6, 600, {"a/0"}), (5, 500, {"a/0"}), (4, 400, {"a/1"}), (3, 300, {"a/0"}), (2, 200, {"a/1"}))
    assert expiry(sharded, keep_after_ms=10_000) == Expiry((3, 2), floor=4)
    assert expiry(_facts((6, 600, {"a/0"})), keep_after_ms=10_000) is None  # the current one always stays


def test_a_walk_is_complete_at_the_first_snapshot_or_at_the_mirrors_floor() -> None:
    assert history_complete(None, None)  # no snapshot yet
    assert history_complete(OldestSnapshot(7, 1, None), None)  # the table's first commit
    assert not history_complete(OldestSnapshot(7, 4, None), None)  # expired by someone: its parent cleared
    assert history_complete(OldestSnapshot(7, 4, None), floor=7)  # the mirror's own expiry stopped here
    assert not history_complete(OldestSnapshot(8, 5, None), floor=7)  # someone went further
    assert history_complete(OldestSnapshot(7, None, None), None)  # format 1: no sequence numbers


def test_commits_expire_old_snapshots_and_positions_stay_readable(tmp_path: Path) -> None:
    now = [0.0]  # the wall clock the table's expiry reads (the snapshots carry the real one)
    table = IcebergTable(_catalog(tmp_path), "archive.orders", False, keep_snapshots_ms=5_000, wall=lambda: now[0])
    positions = table.positions(["orders/0", "orders/1"]).next_offsets
    for first in range(0, 50, 10):
        if first == 40:  # the last commit happens 5 s after the third snapshot
            stamps = [snapshot.timestamp_ms for snapshot in table._loaded().metadata.snapshots]
            assert stamps == sorted(set(stamps))
            now[0] = stamps[2] / 1000 + 5
        blobs = [_blob(tmp_path, 0, first, first + 9), _blob(tmp_path, 1, first, first + 9)]
        table.commit(blobs, {"orders/0": first + 10, "orders/1": first + 10}, based_on=positions)
        positions = {"orders/0": first + 10, "orders/1": first + 10}
    loaded = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)._loaded()
    kept = loaded.metadata.snapshots
    assert len(kept) == 3  # the two older than 5 s went with the last commit
    assert loaded.properties["mirror-v3.history-floor"] == str(kept[0].snapshot_id)
    assert len(loaded.scan().to_arrow()) == 100  # no row lost: expiry removes metadata only
    # The expired snapshots' manifest lists are gone, and every manifest left is one a kept snapshot lists.
    avro = {str(path) for path in (tmp_path / "_iceberg").rglob("*.avro")}
    lists = {snapshot.manifest_list.removeprefix("file://") for snapshot in kept}
    listed = {m.manifest_path.removeprefix("file://") for snapshot in kept for m in snapshot.manifests(loaded.io)}
    assert avro == lists | listed
    assert len(list((tmp_path / "orders").rglob("*.parquet"))) == 10  # the archive's blobs untouched
    # A partition added later: no kept snapshot names it, and the floor says the history before held none of it.
    again = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    read = again.positions(["orders/0", "orders/1", "orders/2"])
    assert read.next_offsets == {"orders/0": 50, "orders/1": 50, "orders/2": 0} and not read.unknown


def test_after_someone_elses_expiry_a_chain_no_kept_snapshot_names_is_unknown(tmp_path: Path) -> None:
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    table.commit([_blob(tmp_path, 1, 0, 9)], {"orders/1": 10}, based_on={"orders/1": 0})  # another process's chain
    table.commit([_blob(tmp_path, 0, 0, 9)], {"orders/0": 10}, based_on={"orders/0": 0})
    table.commit([_blob(tmp_path, 0, 10, 19)], {"orders/0": 20}, based_on={"orders/0": 10})
    loaded = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)._loaded()
    oldest = loaded.metadata.snapshots[0].snapshot_id
    loaded.maintenance.expire_snapshots().by_id(oldest).commit()  # PyIceberg clears the next one's parent
    read = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False).positions(["orders/0", "orders/1"])
    assert read.next_offsets == {"orders/0": 20} and read.unknown == {"orders/1"}  # not 0: it holds 10 records


def test_a_tables_manifests_are_merged_and_its_old_metadata_files_deleted(tmp_path: Path) -> None:
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    table.positions(["orders/0"])
    loaded = table._loaded()
    assert loaded.properties["commit.manifest-merge.enabled"] == "true"
    with loaded.transaction() as transaction:  # merge at 4 manifests, keep 2 old metadata files (default 100, 20)
        transaction.set_properties(
            **{"commit.manifest.min-count-to-merge": "4", "write.metadata.previous-versions-max": "2"}
        )
    table = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)
    for first in range(0, 60, 10):
        table.commit([_blob(tmp_path, 0, first, first + 9)], {"orders/0": first + 10}, based_on={"orders/0": first})
    loaded = IcebergTable(_catalog(tmp_path), "archive.orders", daily=False)._loaded()
    manifests = loaded.current_snapshot().manifests(loaded.io)
    assert len(manifests) < 6  # six commits, merged when the fourth came
    assert len(loaded.scan().to_arrow()) == 60  # every row once
    metadata = [p for p in (tmp_path / "_iceberg").rglob("*.metadata.json")]
    assert len(metadata) == 3  # the current one and two before it
