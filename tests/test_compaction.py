"""A chain compacted on a real directory (`sinks.blob.merging`, `sinks.blob.compactor`, the filesystem store), the
merge run in-process instead of in a Spark task: the merged blob holds the run's rows in order and notes its
originals and their times, its own time is its newest original's, and at every step a reader lists the same chain."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from commands.compact import policy_of
from config import ConfigError
from config.model import CompactionConfig, TableConfig
from core.records import encode_parquet
from sinks.blob.chain import BlobRange, blob_name, is_temp_name, verify_all
from sinks.blob.compaction import BlobFacts, CompactionPolicy, Merge
from sinks.blob.compactor import ChainSurvey, apply_merge, remove_redundant, survey_chain
from sinks.blob.merging import merge_blobs, merged_from
from sinks.blob.staging import BlobFormat
from sinks.destination import DestinationServices
from sinks.filesystem.reading import FilesystemBlobReader
from sinks.filesystem.store import FilesystemStore
from tests.fakes import FakeRecord, records_table

T0 = 1_700_000_000.0


def _write_chain(directory: Path, ranges: list[tuple[int, int]], days: list[int] | None = None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index, (first, last) in enumerate(ranges):
        stamp = 1_700_000_000_000 if days is None else days[index] * 86_400_000 + 3_600_000
        records = [
            FakeRecord(o, f"k{o}".encode(), f"v{o}".encode(), timestamp_ms=stamp) for o in range(first, last + 1)
        ]
        path = directory / blob_name(first, last)
        path.write_bytes(encode_parquet(records_table(records, "orders", 0), "zstd", None))
        os.utime(path, (T0 + index, T0 + index))  # committed a second apart


def _offsets(directory: Path, name: str) -> list[int]:
    offsets: list[int] = pq.read_table(directory / name).column("offset").to_pylist()
    return offsets


async def _compact(store: FilesystemStore, directory: Path, policy: CompactionPolicy) -> int:
    survey = await survey_chain(store, policy, now_s=T0 + 10_000)
    await remove_redundant(store, survey.redundant)
    staging = store.staging(BlobFormat())
    for merge in survey.merges:
        (staged,) = merge_blobs(FilesystemBlobReader(str(directory)), staging, survey.sources(merge))
        await apply_merge(store, merge, staged)
    return len(survey.merges)


async def test_a_run_becomes_one_blob_that_keeps_its_originals_and_their_times(tmp_path: Path) -> None:
    directory = tmp_path / "orders" / "0"
    _write_chain(directory, [(0, 9), (10, 19), (20, 24), (25, 39), (40, 44)])
    store = FilesystemStore(directory)
    before = await verify_all(store)
    assert await _compact(store, directory, CompactionPolicy(target_bytes=10**9, min_age_s=60, window_s=0)) == 1
    assert sorted(p.name for p in directory.iterdir() if p.suffix == ".parquet") == [
        blob_name(0, 39),
        blob_name(40, 44),  # the chain's last blob is its writer's: never merged
    ]
    assert await verify_all(store) == [BlobRange(0, 39), BlobRange(40, 44)] and before[-1] == BlobRange(40, 44)
    merged = directory / blob_name(0, 39)
    assert _offsets(directory, merged.name) == list(range(40))
    originals = [(0, 9, 1_700_000_000_000), (10, 19, 1_700_000_001_000), (20, 24, 1_700_000_002_000)]
    assert merged_from(pq.ParquetFile(merged).metadata) == [*originals, (25, 39, 1_700_000_003_000)]
    assert merged.stat().st_mtime == T0 + 3  # its newest original's: blob times still grow with offsets
    assert pq.ParquetFile(merged).metadata.num_row_groups == 1  # small blobs make one row group, not one each

    # More blobs later, and a merge of the merged blob: its originals are passed on, not itself.
    for index, (first, last) in enumerate([(45, 49), (50, 59)], start=5):
        path = directory / blob_name(first, last)
        records = [FakeRecord(o, None, b"x") for o in range(first, last + 1)]
        path.write_bytes(encode_parquet(records_table(records, "orders", 0), "zstd", None))
        os.utime(path, (T0 + index, T0 + index))
    assert await _compact(store, directory, CompactionPolicy(target_bytes=10**9, min_age_s=60, window_s=0)) == 1
    again = directory / blob_name(0, 49)
    assert _offsets(directory, again.name) == list(range(50))
    found = merged_from(pq.ParquetFile(again).metadata)
    assert found is not None and [o[:2] for o in found] == [(0, 9), (10, 19), (20, 24), (25, 39), (40, 44), (45, 49)]


@pytest.mark.parametrize("removed_before_the_crash", [0, 1, 2])
async def test_a_compaction_stopped_between_its_steps_leaves_a_redundant_run_the_next_one_removes(
    tmp_path: Path, removed_before_the_crash: int
) -> None:
    directory = tmp_path / "orders" / "0"
    _write_chain(directory, [(0, 9), (10, 19), (20, 29), (30, 39)])
    store = FilesystemStore(directory)
    survey = await survey_chain(store, CompactionPolicy(target_bytes=10**9, min_age_s=0, window_s=0), now_s=T0 + 100)
    (merge,) = survey.merges
    (staged,) = merge_blobs(FilesystemBlobReader(str(directory)), store.staging(BlobFormat()), survey.sources(merge))
    assert await store.commit_merged(merge.merged.name, staged)
    for facts in merge.blobs[:removed_before_the_crash]:  # killed while deleting the run
        await store.remove(facts.blob.name)
    assert await verify_all(store) == [BlobRange(0, 29), BlobRange(30, 39)]  # what every reader sees meanwhile
    again = await survey_chain(store, CompactionPolicy(target_bytes=10**9, min_age_s=0, window_s=0), now_s=T0 + 100)
    assert len(again.redundant) == 3 - removed_before_the_crash and again.merges == ()
    await remove_redundant(store, again.redundant)
    left = sorted(p.name for p in directory.iterdir() if p.suffix == ".parquet")
    assert left == [blob_name(0, 29), blob_name(30, 39)]


async def test_a_second_compaction_of_the_same_run_finds_it_merged_and_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "orders" / "0"
    _write_chain(directory, [(0, 9), (10, 19), (20, 29)])
    store = FilesystemStore(directory)
    survey = await survey_chain(store, CompactionPolicy(target_bytes=10**9, min_age_s=0, window_s=0), now_s=T0 + 100)
    (merge,) = survey.merges
    reader, staging = FilesystemBlobReader(str(directory)), store.staging(BlobFormat())
    (first,) = merge_blobs(reader, staging, survey.sources(merge))
    (second,) = merge_blobs(reader, staging, survey.sources(merge))  # another compaction, read before the first ends
    assert await apply_merge(store, merge, first) is True
    assert await store.commit_merged(merge.merged.name, second) is False
    assert not any(is_temp_name(name) for name in os.listdir(directory))  # the second's staged file discarded
    assert _offsets(directory, blob_name(0, 19)) == list(range(20))


def test_compact_refuses_what_it_cannot_compact_in_one_line_naming_the_setting() -> None:
    archive: Any = object()  # an archive of any kind: the settings decide
    with pytest.raises(ConfigError) as kafka:
        policy_of(DestinationServices(), None)
    assert kafka.value.where == "destination.type"
    with_table = DestinationServices(table=TableConfig(format="iceberg"), compaction=CompactionConfig())
    assert policy_of(with_table, archive) == CompactionPolicy()  # its table gets the matching rewrite commits
    settings = CompactionConfig(target_bytes=1000, min_age_ms=5000)
    assert policy_of(DestinationServices(compaction=settings), archive) == CompactionPolicy(1000, 5.0)


async def test_with_flush_daily_a_run_is_cut_where_its_records_day_changes(tmp_path: Path) -> None:
    """Each blob of a daily archive holds one UTC day; so does each merged blob: one per day of two blobs or more, a
    day of one blob left as it is."""
    directory = tmp_path / "orders" / "0"
    days = [19_700, 19_700, 19_700, 19_701, 19_702, 19_702, 19_703]
    _write_chain(directory, [(10 * i, 10 * i + 9) for i in range(7)], days)
    store = FilesystemStore(directory)
    survey = await survey_chain(store, CompactionPolicy(target_bytes=10**9, min_age_s=0, window_s=0), now_s=T0 + 100)
    (merge,) = survey.merges  # 0-59: the planner knows no days
    reader, staging = FilesystemBlobReader(str(directory)), store.staging(BlobFormat())
    staged = merge_blobs(reader, staging, survey.sources(merge), daily=True)
    assert [(s.first, s.last) for s in staged] == [(0, 29), (40, 59)]  # 30-39 alone on its day
    for blob in staged:
        await apply_merge(store, merge.within(blob.first, blob.last), blob)
    assert await verify_all(store) == [BlobRange(0, 29), BlobRange(30, 39), BlobRange(40, 59), BlobRange(60, 69)]
    for name, day in ((blob_name(0, 29), 19_700), (blob_name(40, 59), 19_702)):
        stamps = pq.read_table(directory / name).column("timestamp").cast("int64").to_pylist()
        assert {stamp // 86_400_000_000 for stamp in stamps} == {day}
    assert not any(is_temp_name(name) for name in os.listdir(directory))  # the lone day's output was abandoned


def test_a_merged_blob_keeps_its_originals_times_rounded_up_to_the_millisecond() -> None:
    """`restore --as-of` takes milliseconds: a moment is at or after a time rounded up exactly when it is at or after
    the time itself, so the merged blob answers every moment as its originals did (rounding to the nearest put an
    original written 0.4 ms after a moment inside it)."""
    facts = [BlobFacts(BlobRange(0, 9), 10, 1_000.0004), BlobFacts(BlobRange(10, 19), 10, 1_000.002)]
    survey = ChainSurvey(blobs=2, size=20, redundant=(), merges=(Merge(tuple(facts)),))
    assert [source.written_ms for source in survey.sources(survey.merges[0])] == [1_000_001, 1_000_002]
