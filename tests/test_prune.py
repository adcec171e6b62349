"""Retention (`prune`): the plan of a chain (`sinks.blob.retention`, pure), the documents no kept moment reads, and the
command on a real directory: the oldest prefix committed before the cut goes, never the last blob or one in the
middle, the cut is recorded first, and `restore --as-of` refuses an earlier moment in one line naming the cut."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from commands.prune import prune, summary
from commands.restore import refuse_pruned_moment
from commands.status_view import render_table
from config import ConfigError
from config.loader import parse_config
from config.moments import parse_age
from core.records import encode_parquet
from sinks.archive import retention as archive_retention
from sinks.archive.documents import document_name, superseded
from sinks.archive.retention import RETENTION_DIRECTORY, ArchiveRetention
from sinks.blob.chain import ListedBlob, blob_name, verify_all
from sinks.blob.retention import plan_prune
from sinks.destinations import open_destination
from sinks.filesystem.documents import FilesystemDocuments
from sinks.tables.delta import DeltaArchiveTable
from sinks.tables.positions import TableFile
from tests.fakes import FakeRecord, records_table

T0 = 1_700_000_000.0  # the first blob's commit, Unix seconds


def _listed(ranges: list[tuple[int, int]], times: list[float]) -> list[ListedBlob]:
    return [ListedBlob(blob_name(f, last), 100, t) for (f, last), t in zip(ranges, times, strict=True)]


def test_the_oldest_prefix_committed_before_the_cut_goes_never_the_last_blob() -> None:
    listed = _listed([(0, 9), (10, 19), (20, 29), (30, 39)], [T0, T0 + 10, T0 + 20, T0 + 30])
    plan = plan_prune(listed, cut_s=T0 + 15)
    assert plan.removed == (blob_name(0, 9), blob_name(10, 19))
    assert (plan.removed_blobs, plan.removed_bytes, plan.kept_blobs, plan.kept_from) == (2, 200, 2, 20)
    everything = plan_prune(listed, cut_s=T0 + 1_000)
    assert everything.removed_blobs == 3 and everything.kept_from == 30  # the writer continues after the last blob
    assert plan_prune(listed, cut_s=T0).removed == ()


def test_a_blob_committed_after_the_cut_ends_the_prefix_whatever_follows_it() -> None:
    """Parallel tasks of a backlog may commit out of offset order: nothing in the middle of a chain goes."""
    listed = _listed([(0, 9), (10, 19), (20, 29), (30, 39)], [T0, T0 + 50, T0 + 5, T0 + 60])
    plan = plan_prune(listed, cut_s=T0 + 20)
    assert plan.removed == (blob_name(0, 9),) and plan.kept_from == 10


def test_redundant_blobs_go_just_before_the_merged_blob_that_contains_them() -> None:
    """Removing the container first would put its run back into the chain for a moment."""
    listed = [
        ListedBlob(blob_name(0, 19), 300, T0 + 10),
        ListedBlob(blob_name(0, 9), 100, T0),
        ListedBlob(blob_name(10, 19), 200, T0 + 10),
        ListedBlob(blob_name(20, 29), 100, T0 + 20),
        ListedBlob(blob_name(30, 39), 100, T0 + 30),
    ]
    plan = plan_prune(listed, cut_s=T0 + 25)
    assert plan.removed == (blob_name(0, 9), blob_name(10, 19), blob_name(0, 19), blob_name(20, 29))
    assert plan.removed_blobs == 2 and plan.removed_bytes == 700 and plan.kept_from == 30


def test_a_directory_keeps_its_newest_document_at_or_before_the_cut_and_everything_after() -> None:
    names = [document_name(ms) for ms in (1_000, 2_000, 3_000, 5_000)]
    assert superseded(names, 4_000) == [document_name(1_000), document_name(2_000)]
    assert superseded(names, 3_000) == [document_name(1_000), document_name(2_000)]
    assert superseded(names, 500) == []
    assert superseded(["notes.txt", *names], 9_000) == names[:3]


def test_ages_and_their_refusals() -> None:
    assert parse_age("30d", "--older-than") == 30 * 86_400_000
    assert parse_age("90m", "--older-than") == 5_400_000
    with pytest.raises(ConfigError, match=r"--older-than: '30 days' is not an age: .*e\.g\. 30d"):
        parse_age("30 days", "--older-than")


def _archive(root: Path, chains: dict[tuple[str, int], list[float]], topic_documents: list[int]) -> None:
    """Blobs of 10 offsets each, committed at the given times; topic documents of orders at the given moments."""
    for (name, partition), times in chains.items():
        directory = root / name / str(partition)
        directory.mkdir(parents=True)
        for index, moment in enumerate(times):
            path = directory / blob_name(index * 10, index * 10 + 9)
            path.write_bytes(b"PAR1")  # a prune reads names and times only
            os.utime(path, (moment, moment))
    topic = root / "orders" / "_topic"
    topic.mkdir(parents=True)
    for moment_ms in topic_documents:
        (topic / document_name(moment_ms)).write_text("{}")


def _blobs(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if not name.startswith("."))  # not the lease's files


def _config(root: Path, table: bool = False) -> str:
    table_block = "\n  table: {format: delta, name: 'archive.{topic}'}" if table else ""
    return (
        f"clusters: {{src: {{bootstrap-servers: 'localhost:9092'}}}}\n"
        f"destination:\n  type: filesystem\n  root: {root}{table_block}\n"
        "mirrors:\n  - {name: orders, cluster: src, topic: orders, partition: 0}\n"
    )


async def test_prune_removes_the_old_prefixes_and_documents_after_recording_the_cut(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    _archive(
        root,
        {("orders", 0): [T0, T0 + 10, T0 + 20, T0 + 30], ("orders", 1): [T0 + 5, T0 + 40], ("audit", 0): [T0]},
        [int(T0 * 1000) - 5_000, int(T0 * 1000) + 12_000, int(T0 * 1000) + 35_000],
    )
    config = parse_config(_config(root), env={})
    cut_ms, now_ms = int((T0 + 25) * 1000), int((T0 + 100) * 1000)
    lines: list[str] = []
    planned = await prune(config, cut_ms, True, lines.append, now_ms)
    assert lines == [
        "orders/0: would remove 3 blobs (0.0 MB), 1 kept from offset 30",
        "orders/1: would remove 1 blobs (0.0 MB), 1 kept from offset 10",
        "orders/_topic: would remove 1 documents, 2 kept",
    ]
    assert not planned.recorded and len(_blobs(root / "orders" / "0")) == 4, "a dry run changes nothing"
    assert not (root / RETENTION_DIRECTORY).exists()

    lines.clear()
    done = await prune(config, cut_ms, False, lines.append, now_ms)
    assert [line.replace("would remove", "removed") for line in lines] == [
        "orders/0: removed 3 blobs (0.0 MB), 1 kept from offset 30",
        "orders/1: removed 1 blobs (0.0 MB), 1 kept from offset 10",
        "orders/_topic: removed 1 documents, 2 kept",
    ]
    assert summary(done, False) == (
        "pruned 2 of 3 chains: 4 blobs (0.0 MB) and 1 documents committed before 2023-11-14T22:13:45.000Z; 3 blobs "
        "kept; restore --as-of serves 2023-11-14T22:13:45.000Z and later"
    )
    archive = open_destination(config.destination).archive
    assert archive is not None
    for partition, first in ((0, 30), (1, 10)):
        store = archive.chain_store("orders", partition)
        assert (await verify_all(store))[0].first == first
        await store.close()
    assert _blobs(root / "audit" / "0") == [blob_name(0, 9)], "a chain's last blob stays"
    assert sorted(os.listdir(root / "orders" / "_topic")) == [
        document_name(int(T0 * 1000) + 12_000),
        document_name(int(T0 * 1000) + 35_000),
    ]
    documents = FilesystemDocuments(root)
    assert await archive_retention.retention(documents) == ArchiveRetention.of(cut_ms, now_ms)

    again = await prune(config, cut_ms - 20_000, False, lines.append, now_ms + 1_000)
    assert not again.recorded and again.kept.kept_since_ms == cut_ms, "an earlier cut than the recorded one is moot"


async def test_a_later_prune_leaves_one_retention_document(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    _archive(root, {("orders", 0): [T0, T0 + 10, T0 + 20, T0 + 30]}, [])
    config = parse_config(_config(root), env={})
    await prune(config, int((T0 + 5) * 1000), False, lambda _: None, int((T0 + 100) * 1000))
    await prune(config, int((T0 + 15) * 1000), False, lambda _: None, int((T0 + 200) * 1000))
    assert os.listdir(root / RETENTION_DIRECTORY) == [document_name(int((T0 + 200) * 1000))]
    assert _blobs(root / "orders" / "0") == [blob_name(20, 29), blob_name(30, 39)]


async def test_restore_as_of_before_the_cut_is_refused_in_one_line_naming_the_oldest_moment_it_serves(
    tmp_path: Path,
) -> None:
    root = tmp_path / "archive"
    _archive(root, {("orders", 0): [T0, T0 + 10, T0 + 20]}, [])
    config = parse_config(_config(root), env={})
    cut_ms = int((T0 + 15) * 1000)
    await prune(config, cut_ms, False, lambda _: None, int((T0 + 100) * 1000))
    archive = open_destination(config.destination).archive
    assert archive is not None
    await refuse_pruned_moment(archive, cut_ms)  # the cut itself is served
    with pytest.raises(ConfigError) as refused:
        await refuse_pruned_moment(archive, cut_ms - 1)
    assert str(refused.value) == (
        "--as-of: 2023-11-14T22:13:34.999Z is before what the archive keeps (pruned at 2023-11-14T22:15:00.000Z of "
        "what was committed before 2023-11-14T22:13:35.000Z): the oldest moment it can serve is "
        "2023-11-14T22:13:35.000Z"
    )


async def test_prune_refuses_a_future_cut(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    _archive(root, {("orders", 0): [T0, T0 + 10]}, [])
    with pytest.raises(ConfigError, match=r"--before: .* is in the future"):
        await prune(parse_config(_config(root), env={}), 2_000, True, lambda _: None, now_ms=1_000)


async def test_with_a_table_a_chain_loses_only_what_its_table_holds_and_the_table_drops_it_first(
    tmp_path: Path,
) -> None:
    """A Delta table holding offsets 0-19 of a chain of four blobs, all older than the cut: the table drops the two
    blobs it holds in one commit (its position stays), the chain loses those two, and the third waits for the table
    (said on a line of its own)."""
    root = tmp_path / "archive"
    files = [_table_blob(root, first, first + 9, T0 + first) for first in (0, 10, 20, 30)]
    (root / "orders" / "_topic").mkdir(parents=True)
    table = DeltaArchiveTable(str(root / "orders"), "archive.orders")
    table.commit(files[:2], {"orders/0": 20}, based_on={"orders/0": 0})
    config = parse_config(_config(root, table=True), env={})
    lines: list[str] = []
    done = await prune(config, int((T0 + 100) * 1000), False, lines.append, int((T0 + 200) * 1000))
    assert lines == [
        "orders/0: its table holds it up to offset 20: 1 more blobs wait for it",
        "orders/0: removed 2 blobs (0.0 MB), 2 kept from offset 20",
    ]
    assert done.recorded and not done.failed
    assert _blobs(root / "orders" / "0") == [blob_name(20, 29), blob_name(30, 39)]
    read = DeltaTable(str(root / "orders"))
    assert read.file_uris() == [] and read.history(1)[0]["mirror-v3.maintenance"] == "prune"
    assert table.positions(["orders/0"]).next_offsets == {"orders/0": 20}


def _table_blob(root: Path, first: int, last: int, moment: float) -> TableFile:
    records = [FakeRecord(offset, b"k", b"v") for offset in range(first, last + 1)]
    directory = root / "orders" / "0"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / blob_name(first, last)
    path.write_bytes(encode_parquet(records_table(records, "orders", 0), "zstd", None))
    os.utime(path, (moment, moment))
    return TableFile(str(path), 0, path.name)


def test_status_names_a_pruned_archives_cut() -> None:
    from commands.status import StatusReport

    text = render_table(StatusReport([], kept_since="2023-11-14T22:13:35.000Z"), now=T0)
    assert "archive: pruned, keeps what was committed since 2023-11-14T22:13:35.000Z" in text.splitlines()
