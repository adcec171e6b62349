"""The blob chain rule and the filesystem store's commit, without Kafka or Spark."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sinks.blob.chain import (
    BlobChain,
    BlobExistsError,
    BlobRange,
    ChainProblem,
    CorruptChainError,
    OutOfChainWriteError,
    blob_name,
    is_temp_name,
    parse_blob_name,
    temp_name,
    validate_chain,
    verify_all,
    without_redundant,
)
from sinks.blob.staging import BlobFormat, StagedBlob
from sinks.filesystem.store import FilesystemStore, is_bookkeeping
from tests.fakes import InMemoryStore, stage_bytes


def test_names_sort_numerically() -> None:
    names = [blob_name(0, 9), blob_name(10, 99), blob_name(100, 10**15)]
    assert sorted(names) == names
    assert blob_name(5, 7) == "00000000000000000005-00000000000000000007.parquet"
    assert parse_blob_name(blob_name(123, 456)) is not None
    for bad in [
        "5-7.parquet",
        "00000000000000000007-00000000000000000005.parquet",
        "x.parquet",
        blob_name(1, 2) + ".tmp",
    ]:
        assert parse_blob_name(bad) is None
    with pytest.raises(ValueError):
        blob_name(7, 5)


def test_temp_names_are_recognised() -> None:
    name = temp_name(blob_name(0, 9), "abc")
    assert is_temp_name(name) and parse_blob_name(name) is None
    assert not is_temp_name(blob_name(0, 9))


@pytest.mark.parametrize(
    ("names", "problem", "offsets", "offending"),
    [
        ([blob_name(0, 9), blob_name(5, 19)], ChainProblem.OVERLAP, (5, 9), [blob_name(0, 9), blob_name(5, 19)]),
        # A merged blob may contain others, never cut into one: 0-7 holds 0-4 and half of 5-9.
        (
            [blob_name(0, 4), blob_name(5, 9), blob_name(0, 7)],
            ChainProblem.OVERLAP,
            (5, 7),
            [blob_name(0, 7), blob_name(5, 9)],
        ),
        ([blob_name(0, 9), blob_name(11, 19)], ChainProblem.GAP, (10, 10), [blob_name(0, 9), blob_name(11, 19)]),
        ([blob_name(0, 9), "README"], ChainProblem.FOREIGN_ENTRIES, None, ["README"]),
        ([blob_name(0, 9), "1-2.parquet", "x.csv"], ChainProblem.FOREIGN_ENTRIES, None, ["1-2.parquet", "x.csv"]),
    ],
)
def test_corrupt_chains_name_the_files(
    names: list[str], problem: ChainProblem, offsets: tuple[int, int] | None, offending: list[str]
) -> None:
    store = InMemoryStore()
    with pytest.raises(CorruptChainError) as caught:
        validate_chain(names, store)
    assert caught.value.problem is problem
    assert caught.value.offsets == (None if offsets is None else BlobRange(*offsets))
    assert caught.value.files == [f"mem://{name}" for name in offending]


def test_blobs_inside_another_blobs_range_are_redundant_whatever_is_left_of_their_run() -> None:
    """A compaction commits the merged blob before it deletes the run: at every step in between (all of the run
    there, some of it, none) the chain is the same, and so is what a reader reads."""
    run = [blob_name(0, 9), blob_name(10, 19), blob_name(20, 29)]
    merged, after = blob_name(0, 29), blob_name(30, 39)
    for left in (run, run[1:], run[2:], []):
        assert validate_chain([*left, merged, after], InMemoryStore()) == [BlobRange(0, 29), BlobRange(30, 39)]
    # Merged again: the bigger blob contains the smaller merged one and whatever is left of both runs.
    again = validate_chain([*run, merged, after, blob_name(0, 39)], InMemoryStore())
    assert again == [BlobRange(0, 39)]
    kept, redundant = without_redundant(map(BlobRange, (0, 0, 10, 5), (9, 29, 19, 7)))
    assert kept == [BlobRange(0, 29)] and redundant == [BlobRange(0, 9), BlobRange(5, 7), BlobRange(10, 19)]


def test_chain_may_start_above_zero_and_temporaries_are_ignored() -> None:
    names = [blob_name(500, 599), blob_name(600, 600), temp_name(blob_name(601, 700), "x")]
    ranges = validate_chain(names, InMemoryStore())
    assert [(r.first, r.last) for r in ranges] == [(500, 599), (600, 600)]


async def test_chain_open_removes_temporaries_and_enforces_continuity() -> None:
    store = InMemoryStore()
    store.blobs = {blob_name(0, 9): b"a", temp_name(blob_name(10, 19), "t"): b"half"}
    chain = BlobChain(store)
    assert await chain.open() == 10
    assert store.removed == [temp_name(blob_name(10, 19), "t")]
    with pytest.raises(OutOfChainWriteError) as caught:
        await chain.append(stage_bytes(store, b"x", 11, 19))
    assert (caught.value.expected_first, caught.value.blob, caught.value.claimed) == (10, BlobRange(11, 19), None)
    await chain.append(stage_bytes(store, b"x", 10, 19))
    assert chain.next_offset == 20


async def test_inspect_is_read_only() -> None:
    store = InMemoryStore()
    store.blobs = {blob_name(0, 9): b"a", temp_name(blob_name(10, 19), "t"): b"half"}
    assert await BlobChain(store).inspect() == 10
    assert store.removed == []


def stage_file(store: FilesystemStore, data: bytes) -> StagedBlob:
    output = store.staging(BlobFormat()).open(0)
    output.file.write(data)
    return output.finish(0, 9, 0, 0)


async def test_filesystem_commit_is_atomic_and_no_clobber(tmp_path: Path) -> None:
    directory = tmp_path / "root" / "topic" / "0"
    store = FilesystemStore(directory)
    assert await store.list_page(None, 10) == ([], False)
    size = await store.commit_staged(blob_name(0, 9), stage_file(store, b"hello"))
    assert size == 5 and (directory / blob_name(0, 9)).read_bytes() == b"hello"
    other = stage_file(store, b"other")
    with pytest.raises(BlobExistsError):
        await store.commit_staged(blob_name(0, 9), other)
    await store.discard_staged(other)
    assert (directory / blob_name(0, 9)).read_bytes() == b"hello"
    assert sorted(n for n in os.listdir(directory) if not is_bookkeeping(n)) == [blob_name(0, 9)]  # no temporaries


async def test_a_stale_tail_record_is_checked_against_the_listing(tmp_path: Path) -> None:
    """A crash between recording the new end and linking the blob leaves the record ahead of the chain: the
    listing decides, so the chain's real end still accepts the next blob."""
    directory = tmp_path / "t" / "0"
    store = FilesystemStore(directory)
    await store.commit_staged(blob_name(0, 9), stage_file(store, b"a"), after=None)
    (directory / ".chain.tail").write_text(blob_name(10, 19))  # recorded, never linked
    await store.commit_staged(blob_name(10, 14), stage_file(store, b"b"), after=blob_name(0, 9))
    with pytest.raises(BlobExistsError):
        await store.commit_staged(blob_name(10, 19), stage_file(store, b"c"), after=blob_name(0, 9))


def _chain_of(count: int, start: int = 0, sizes: tuple[int, ...] = (1, 7, 100, 3)) -> dict[str, bytes]:
    blobs, offset = {}, start
    for index in range(count):
        size = sizes[index % len(sizes)]
        blobs[blob_name(offset, offset + size - 1)] = b""
        offset += size
    return blobs


@pytest.mark.parametrize("count", [0, 1, 999, 1000, 1001, 2500, 10_000, 50_000])
async def test_tail_is_found_with_few_listings(count: int) -> None:
    store = InMemoryStore()
    store.blobs = _chain_of(count, start=42)
    expected = None if count == 0 else max(parse_blob_name(n).last for n in store.blobs) + 1  # type: ignore[union-attr]
    assert await BlobChain(store).open() == expected
    assert store.list_calls <= 20, store.list_calls


async def test_tail_search_with_skewed_file_sizes() -> None:
    """A backlog of huge files followed by many tiny ones (idle max-time flushes)."""
    store = InMemoryStore()
    big = _chain_of(1_500, sizes=(1_000_000,))
    tail_start = max(parse_blob_name(n).last for n in big) + 1  # type: ignore[union-attr]
    store.blobs = {**big, **_chain_of(8_000, start=tail_start, sizes=(1,))}
    assert await BlobChain(store).open() == tail_start + 8_000
    assert store.list_calls <= 40


async def test_deep_inspection_finds_a_hole_the_tail_search_does_not_read() -> None:
    store = InMemoryStore()
    store.blobs = _chain_of(5_000)
    del store.blobs[sorted(store.blobs)[2_500]]
    assert await BlobChain(store).inspect() is not None  # the tail alone looks fine
    with pytest.raises(CorruptChainError) as caught:
        await BlobChain(store).inspect(deep=True)
    removed = parse_blob_name(sorted(store.blobs)[2_500 - 1])  # the one before the hole now
    assert caught.value.problem is ChainProblem.GAP and removed is not None
    assert caught.value.offsets is not None and caught.value.offsets.first == removed.last + 1


async def test_a_second_writer_is_detected_after_the_next_append() -> None:
    store = InMemoryStore()
    store.blobs = _chain_of(10)
    chain = BlobChain(store)
    start = await chain.open()
    assert start is not None
    store.blobs[blob_name(start, start + 4)] = b"foreign"  # a store that ignored If-None-Match
    with pytest.raises(CorruptChainError) as caught:
        await chain.append(stage_bytes(store, b"ours", start, start + 9))
    assert caught.value.problem is ChainProblem.OTHER_WRITER
    assert caught.value.files == [f"mem://{blob_name(start, start + 9)}", f"mem://{blob_name(start, start + 4)}"]


async def test_an_interrupted_commits_claim_decides_the_next_blob() -> None:
    store = InMemoryStore()
    store.blobs = _chain_of(3)  # 0-0, 1-7, 8-107
    store.claims[blob_name(8, 107)] = blob_name(108, 150)
    chain = BlobChain(store)
    assert await chain.open() == 108
    assert chain.claimed == parse_blob_name(blob_name(108, 150))
    with pytest.raises(OutOfChainWriteError) as caught:
        await chain.append(stage_bytes(store, b"x", 108, 120))
    assert (caught.value.blob, caught.value.claimed) == (BlobRange(108, 120), BlobRange(108, 150))
    await chain.append(stage_bytes(store, b"x", 108, 150))
    assert chain.claimed is None and chain.next_offset == 151


async def test_a_claim_that_does_not_continue_the_chain_is_corruption() -> None:
    store = InMemoryStore()
    store.blobs = {blob_name(0, 9): b""}
    store.claims[blob_name(0, 9)] = blob_name(12, 20)
    with pytest.raises(CorruptChainError) as caught:
        await BlobChain(store).open()
    assert caught.value.problem is ChainProblem.CLAIM_OFF_CHAIN and caught.value.offsets == BlobRange(12, 20)
    assert caught.value.files == [f"mem://{blob_name(0, 9)}", f"mem://{blob_name(12, 20)}"]


@pytest.mark.parametrize("left", [slice(0, 0), slice(0, None), slice(300, 700)], ids=["deleted", "all-left", "some"])
async def test_the_tail_and_the_whole_chain_are_found_across_pages_holding_merged_blobs(left: slice) -> None:
    """A listing's pages may cut between a merged blob and the run it contains; neither the bounded search for the
    tail nor the full check mistakes what is left of the run for a gap or an overlap."""
    store = InMemoryStore()
    run = [blob_name(offset, offset) for offset in range(1_000, 2_500)]  # 1 500 names: across pages of 1 000
    store.blobs = {name: b"" for name in [blob_name(0, 999), *run[left], blob_name(1_000, 2_499)]}
    store.blobs |= {blob_name(offset, offset): b"" for offset in range(2_500, 3_700)}
    assert await BlobChain(store).inspect() == 3_700
    whole = await verify_all(store)
    assert whole[:2] == [BlobRange(0, 999), BlobRange(1_000, 2_499)] and len(whole) == 2 + 1_200
