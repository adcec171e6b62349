"""The running mirror's archive upkeep (`supervisor.archive_upkeep`) on a real directory archive, the merge run
in-process instead of in a Spark task and time on a fake clock: its own chains compacted within the round's byte
budget, pruned to keep-ms with the cut recorded first, the metrics set, and a failure a WARN and a metric, never an
exception out of the service."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from config.loader import parse_config
from config.model import CompactionConfig, RetentionConfig, SourceConfig, TableConfig
from core.logs import _FIELDS
from sinks.archive import retention as archive_retention
from sinks.archive.documents import document_name
from sinks.archive.retention import ArchiveRetention
from sinks.blob.chain import BlobRange, blob_name, verify_all
from sinks.blob.merging import merge_blobs
from sinks.blob.staging import StagedBlob
from sinks.destination import Archive
from sinks.destinations import open_destination
from sinks.tables.iceberg import TableError
from sinks.tables.rewrites import FileChange
from sinks.tables.upkeep import ArchiveTables
from supervisor import archive_upkeep
from supervisor.archive_upkeep import ArchiveUpkeep
from supervisor.process_service import MirroredPartition, RunningProcess
from tests.fakes import FakeClock, MemoryTable, fresh_metrics
from tests.test_compaction import T0, _write_chain
from workers.compaction_job import MergeWork
from workers.range_job import Outcome

SOURCE = SourceConfig(bootstrap_servers="src:9092")


def _later_clock() -> FakeClock:
    """A clock whose wall time is an hour after the test chains' commits (at T0 and the seconds after)."""
    clock = FakeClock()
    clock.now = T0 + 3_600 - FakeClock.EPOCH
    return clock


def _archive(root: Path) -> Archive:
    config = parse_config(
        f"clusters: {{src: {{bootstrap-servers: 'src:9092'}}}}\ndestination: {{type: filesystem, root: {root}}}\n"
        "mirrors:\n  - {name: o, cluster: src, topic: orders, partition: 0}\n",
        env={},
    )
    archive = open_destination(config.destination).archive
    assert archive is not None
    return archive


def _mirrored(*partitions: int) -> list[MirroredPartition]:
    return [MirroredPartition("src", SOURCE, "clusters.src", "orders", p, "orders", 0) for p in partitions]


async def _merge_here(work: tuple[MergeWork, ...]) -> list[Outcome[list[StagedBlob]]]:
    return [Outcome(result=merge_blobs(w.reader, w.staging, w.run, w.daily)) for w in work]


def _upkeep(
    root: Path,
    compaction: CompactionConfig | None = None,
    retention: RetentionConfig | None = None,
    clock: FakeClock | None = None,
) -> tuple[ArchiveUpkeep, object]:
    families, _ = fresh_metrics()
    upkeep = ArchiveUpkeep(
        _archive(root), compaction, retention, False, families, merge=_merge_here, clock=clock or _later_clock()
    )
    return upkeep, families


async def _real_time_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(10):
        while not condition():
            await anyio.sleep(0.005)


def _sample(families: object, name: str, labels: dict[str, str]) -> float | None:
    value: float | None = families.registry.get_sample_value(name, labels)  # type: ignore[attr-defined]
    return value


async def _chain(root: Path, partition: int) -> list[BlobRange]:
    store = _archive(root).chain_store("orders", partition)
    try:
        return await verify_all(store)
    finally:
        await store.close()


async def test_a_round_merges_each_chains_runs_within_its_byte_budget(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    ranges = [(0, 9), (10, 19), (20, 29), (30, 39)]
    for partition in (0, 1):
        _write_chain(root / "orders" / str(partition), ranges)
    one_run = sum((root / "orders" / "0" / blob_name(f, last)).stat().st_size for f, last in ranges[:-1])
    compaction = CompactionConfig(min_age_ms=0, interval_ms=60_000, max_bytes_per_interval=one_run)
    upkeep, families = _upkeep(root, compaction)
    await upkeep.compaction_round(_mirrored(0, 1))
    assert await _chain(root, 0) == [BlobRange(0, 29), BlobRange(30, 39)]
    assert await _chain(root, 1) == [BlobRange(f, last) for f, last in ranges], "the budget was spent on partition 0"
    assert sorted(n for n in os.listdir(root / "orders" / "0") if not n.startswith(".")) == [
        blob_name(0, 29),
        blob_name(30, 39),
    ]
    labels = {"source_cluster": "src", "topic": "orders", "partition": "0", "destination": "orders"}
    assert _sample(families, "mirror_v3_archive_blobs", labels) == 4  # as listed before the merge
    assert _sample(families, "mirror_v3_archive_upkeep_blobs_total", {"task": "compaction"}) == 3
    assert _sample(families, "mirror_v3_archive_upkeep_bytes_total", {"task": "compaction"}) == one_run
    await upkeep.compaction_round(_mirrored(0, 1))  # the next round goes on where the budget stopped
    assert await _chain(root, 1) == [BlobRange(0, 29), BlobRange(30, 39)]


async def test_a_failing_merge_is_a_warn_and_a_metric_and_the_chain_is_unchanged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "archive"
    _write_chain(root / "orders" / "0", [(0, 9), (10, 19), (20, 29)])

    async def failing(work: tuple[MergeWork, ...]) -> list[Outcome[list[StagedBlob]]]:
        raise OSError("executor lost")

    families, _ = fresh_metrics()
    compaction = CompactionConfig(min_age_ms=0, interval_ms=60_000)
    upkeep = ArchiveUpkeep(_archive(root), compaction, None, False, families, merge=failing, clock=_later_clock())
    with caplog.at_level(logging.WARNING, "mirror_v3.archive_upkeep"):
        await upkeep.compaction_round(_mirrored(0))
    assert await _chain(root, 0) == [BlobRange(0, 9), BlobRange(10, 19), BlobRange(20, 29)]
    (warned,) = [r for r in caplog.records if r.getMessage() == "compaction failed, tried again next round"]
    fields = warned.__dict__[_FIELDS]
    assert fields["chain"] == "orders/0" and "executor lost" in fields["error"]
    assert _sample(families, "mirror_v3_archive_upkeep_failures_total", {"task": "compaction"}) == 1


async def test_a_prune_round_keeps_keep_ms_and_records_the_cut_first(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    chain = root / "orders" / "0"
    _write_chain(chain, [(0, 9), (10, 19), (20, 29)])  # committed at T0, T0 + 1, T0 + 2
    topic = root / "orders" / "_topic"
    topic.mkdir()
    for moment_s in (T0 - 10, T0, T0 + 5):
        (topic / document_name(round(moment_s * 1000))).write_text("{}")
    clock = FakeClock()
    clock.now = T0 + 1.5 - FakeClock.EPOCH + 3_600  # an hour after the second blob's commit
    upkeep, families = _upkeep(root, retention=RetentionConfig(keep_ms=3_600_000), clock=clock)
    await upkeep.prune_round(_mirrored(0))
    assert await _chain(root, 0) == [BlobRange(20, 29)], "the blobs of T0 and T0 + 1 were over an hour old"
    kept = await archive_retention.retention(_archive(root).documents())
    assert kept is not None and kept.kept_since_ms == round((T0 + 1.5) * 1000)
    assert sorted(os.listdir(topic)) == [document_name(round(T0 * 1000)), document_name(round((T0 + 5) * 1000))]
    assert _sample(families, "mirror_v3_archive_upkeep_blobs_total", {"task": "prune"}) == 2
    clock.advance(3_600)
    await upkeep.prune_round(_mirrored(0))
    assert await _chain(root, 0) == [BlobRange(20, 29)], "never the last blob"
    assert len(os.listdir(root / "_retention")) == 1


async def test_serving_runs_each_task_at_its_interval_until_the_drain(tmp_path: Path) -> None:
    root = tmp_path / "archive"
    _write_chain(root / "orders" / "0", [(0, 9), (10, 19), (20, 29)])
    clock = _later_clock()
    began = clock.now
    compaction = CompactionConfig(min_age_ms=0, interval_ms=600_000)
    upkeep, families = _upkeep(root, compaction, RetentionConfig(keep_ms=10 * 365 * 86_400_000), clock)
    process = RunningProcess(anyio.Event(), lambda: _mirrored(0))
    last = "mirror_v3_archive_upkeep_last_timestamp_seconds"
    async with anyio.create_task_group() as group:
        await group.start(upkeep.serve, process)
        await clock.run_for(599, step_s=1.0)
        assert _sample(families, last, {"task": "compaction"}) is None, "nothing before the first interval"
        await clock.run_for(1, step_s=1.0)  # the first compaction round is due
        # The round's file work runs in threads, which the fake clock's steps do not wait for: wait in real time.
        await _real_time_until(lambda: _sample(families, last, {"task": "compaction"}) is not None)
        assert await _chain(root, 0) == [BlobRange(0, 19), BlobRange(20, 29)]
        await clock.run_for(began + 3_590 - clock.now, step_s=10.0)
        assert _sample(families, last, {"task": "prune"}) is None, "nothing before its interval"
        await clock.run_for(began + 3_600 - clock.now, step_s=1.0)  # the first prune round is due
        await _real_time_until(lambda: _sample(families, last, {"task": "prune"}) is not None)
        process.stop_requested.set()
    assert await _chain(root, 0) == [BlobRange(0, 19), BlobRange(20, 29)], "ten years kept: nothing pruned"


def test_an_archive_with_a_table_takes_the_running_mirrors_upkeep_too() -> None:
    text = (
        "clusters: {src: {bootstrap-servers: 'src:9092'}}\n"
        "destination:\n  type: filesystem\n  root: /a\n  table: {format: delta, name: 'a.{topic}'}\n  %s\n"
        "mirrors:\n  - {name: o, cluster: src, topic: orders, partition: 0}\n"
    )
    with_table = parse_config(text % "retention: {keep-ms: 86400000}", env={}).destination
    assert getattr(with_table, "retention", None) == RetentionConfig(keep_ms=86_400_000)
    compacting = parse_config(text % "compaction: {interval-ms: 60000}", env={}).destination
    assert getattr(compacting, "compaction", None) == CompactionConfig(interval_ms=60_000)


async def test_a_prune_round_never_moves_the_archives_cut_back(tmp_path: Path) -> None:
    """An operator's `prune --before` later than now minus keep-ms: the moments it refused stay refused, and the
    round prunes to that cut."""
    root = tmp_path / "archive"
    _write_chain(root / "orders" / "0", [(0, 9), (10, 19), (20, 29)])  # committed at T0, T0 + 1, T0 + 2
    documents = _archive(root).documents()
    earlier = ArchiveRetention.of(round((T0 + 1.5) * 1000), round((T0 + 100) * 1000))
    await archive_retention.record(documents, earlier)
    upkeep, _ = _upkeep(root, retention=RetentionConfig(keep_ms=30 * 86_400_000))  # 30 days: nothing that old
    await upkeep.prune_round(_mirrored(0))
    assert await _chain(root, 0) == [BlobRange(20, 29)]
    kept = await archive_retention.retention(documents)
    assert kept is not None and kept.kept_since_ms == earlier.kept_since_ms


async def test_with_a_table_a_round_merges_only_what_the_table_holds_and_the_table_lets_go_of_a_run_first(
    tmp_path: Path,
) -> None:
    """The table holds offsets 0-19 of a chain of four blobs: only the run it holds whole is merged, and the table's
    one rewrite commit replaces the run by the merged blob before the run is deleted. When that commit fails, the run
    stays (redundant: read right by everyone) and the next round retires it, the table first."""
    root = tmp_path / "archive"
    ranges = [(0, 9), (10, 19), (20, 29), (30, 39)]
    _write_chain(root / "orders" / "0", ranges)
    archive = _archive(root)
    table = MemoryTable("archive.orders")
    files = [archive.file_uri("orders", 0, blob_name(first, last)) for first, last in ranges[:2]]
    table.files, table.summaries = list(files), [{"orders/0": 20}]
    tables = ArchiveTables(archive, TableConfig(format="iceberg", name="archive.{topic}"), False, lambda *_: table)
    compaction = CompactionConfig(min_age_ms=0, interval_ms=60_000)
    families, _ = fresh_metrics()
    upkeep = ArchiveUpkeep(
        archive, compaction, None, False, families, merge=_merge_here, clock=_later_clock(), tables=tables
    )
    working = table.rewrite

    def rewrite_failing_once(changes: list[FileChange], reason: str) -> int:  # the positions' read works
        table.rewrite = working  # type: ignore[method-assign]
        raise TableError("archive.orders", "rewrite", "the catalog is away")

    table.rewrite = rewrite_failing_once  # type: ignore[method-assign]
    await upkeep.compaction_round(_mirrored(0))
    merged = archive.file_uri("orders", 0, blob_name(0, 19))
    assert await _chain(root, 0) == [BlobRange(0, 19), BlobRange(20, 29), BlobRange(30, 39)]
    assert blob_name(0, 9) in os.listdir(root / "orders" / "0"), "the run stays while its table names it"
    assert table.files == files and table.rewrites == []
    assert _sample(families, "mirror_v3_archive_upkeep_failures_total", {"task": "compaction"}) == 1

    await upkeep.compaction_round(_mirrored(0))  # the next round retires the run: the table first
    assert table.files == [merged] and table.rewrites == ["compaction"]
    assert sorted(n for n in os.listdir(root / "orders" / "0") if not n.startswith(".")) == [
        blob_name(0, 19),
        blob_name(20, 29),
        blob_name(30, 39),
    ]


async def test_each_round_surveys_a_bounded_number_of_chains_going_on_where_the_last_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "archive"
    ranges = [(0, 9), (10, 19), (20, 29)]
    for partition in (0, 1, 2):
        _write_chain(root / "orders" / str(partition), ranges)
    monkeypatch.setattr(archive_upkeep, "CHAINS_PER_ROUND", 2)
    upkeep, _ = _upkeep(root, CompactionConfig(min_age_ms=0, interval_ms=60_000))
    merged = [BlobRange(0, 19), BlobRange(20, 29)]
    await upkeep.compaction_round(_mirrored(0, 1, 2))
    assert [await _chain(root, p) == merged for p in (0, 1, 2)] == [True, True, False]
    await upkeep.compaction_round(_mirrored(0, 1, 2))  # partition 2 first, then 0 again (wrapping)
    assert [await _chain(root, p) == merged for p in (0, 1, 2)] == [True, True, True]


async def test_a_round_due_before_the_spark_session_started_waits_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A short interval or a slow start: the round's merge job waits for the process's session instead of failing
    (the soak's first rounds logged `no session has been started in this process`)."""
    sessions = iter([None, None, "session"])
    monkeypatch.setattr(archive_upkeep, "current_spark", lambda: next(sessions))
    monkeypatch.setattr(archive_upkeep, "SESSION_POLL_S", 0.001)
    monkeypatch.setattr(archive_upkeep, "started_spark", lambda: "session")
    jobs: list[tuple[object, int, int]] = []

    def job(spark: object, work: tuple[MergeWork, ...], group: str, tasks: int) -> list[Outcome[list[StagedBlob]]]:
        jobs.append((spark, len(work), tasks))
        return []

    monkeypatch.setattr(archive_upkeep, "run_compaction_job", job)
    assert await archive_upkeep.merge_in_spark(()) == []
    assert jobs == [("session", 0, 1)]
