"""The `BlobStore` contract, once, against every store: in memory, a directory, and S3 (moto in this process).

The blob chain (sinks/blob/chain.py) relies on exactly these behaviours, so each store is held to them here rather
than through the CLI: a staged blob (written as a Spark task does it) is committed only under a free name and what
is there stays, an answer lost after the commit landed is retried without a duplicate or a false "another writer",
listings come in name order from any `start_after`, temporaries are never listed and leftovers of interrupted
writes are cleaned, and the tail of a long chain is found with a bounded number of listings.
"""

from __future__ import annotations

import errno
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import anyio.to_thread
import pytest

import sinks.blob.chain
import sinks.filesystem.durable_dirs
import sinks.filesystem.store
from core.thread_batches import ThreadBatches
from sinks.base import DestinationError
from sinks.blob.chain import (
    BlobChain,
    BlobExistsError,
    BlobRange,
    BlobStore,
    ChainProblem,
    CorruptChainError,
    OutOfChainWriteError,
    blob_name,
    find_tail,
    is_temp_name,
    parse_blob_name,
    temp_name,
)
from sinks.blob.staging import BlobFormat, BlobStaging, StagedBlob
from sinks.filesystem.store import FilesystemStore
from sinks.retry import RetryPolicy
from sinks.s3.store import S3Connection, S3Store
from testkit.http_fault_proxy import FaultProxy, RequestInfo
from tests.fakes import InMemoryStore, MemoryStaging, moto_settings

KINDS = ["memory", "filesystem", "s3"]


@dataclass
class StoreUnderTest:
    """A store plus the means to look at it and disturb it from outside the interface."""

    store: BlobStore
    another_writer: Callable[[], BlobStore]  # a second process on the same location
    staging_of: Callable[[BlobStore], BlobStaging]  # how a task stages this store's blobs
    read: Callable[[str], bytes]
    lose_next_answer: Callable[[], None]  # the next commit lands, but its caller gets an error
    leave_leftover: Callable[[str], None]  # what a write interrupted half-way leaves behind
    place: Callable[[str, bytes], None]  # a blob put there from outside the interface (to set up long chains)
    leftovers: Callable[[], list[str]]
    # Whether a commit refuses a writer whose idea of the chain's end is stale (the memory store stands for
    # a store that cannot: the chain's listing check catches such a writer after its append).
    fences_stale_ends: bool = True
    # Make a staged blob's publish fail for good after the commit's first step (S3: its upload aborted out
    # of band, as by a second process cleaning the prefix); None where a commit is one step.
    interrupt: Callable[[StagedBlob], None] | None = None


def _memory() -> StoreUnderTest:
    store = InMemoryStore()

    def leave(name: str) -> None:
        store.blobs[temp_name(name, "deadbeef")] = b"half"

    return StoreUnderTest(
        store=store,
        another_writer=lambda: store.twin(),
        staging_of=lambda s: MemoryStaging(cast(InMemoryStore, s)),
        read=lambda name: store.blobs[name],
        lose_next_answer=lambda: setattr(store, "lose_answers", 1),
        leave_leftover=leave,
        place=store.blobs.__setitem__,
        leftovers=lambda: [n for n in store.blobs if is_temp_name(n)],
        fences_stale_ends=False,
    )


def _filesystem(directory: Path, monkeypatch: pytest.MonkeyPatch) -> StoreUnderTest:
    fsync_directory = sinks.filesystem.durable_dirs.fsync_directory

    def lose_next_answer() -> None:
        # The link has made the blob visible; the directory fsync then fails (EIO): the caller cannot know.
        # (The directory exists already, so the failure cannot hit its creation instead.)
        directory.mkdir(parents=True, exist_ok=True)
        calls = {"failed": False}

        def failing_once(path: Path) -> None:
            if not calls["failed"]:
                calls["failed"] = True
                raise OSError(errno.EIO, "Input/output error")
            fsync_directory(path)

        monkeypatch.setattr(sinks.filesystem.store, "fsync_directory", failing_once)

    def leave(name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / temp_name(name, "deadbeef")).write_bytes(b"half a file")

    def place(name: str, data: bytes) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)

    return StoreUnderTest(
        # As a running process has them: commits batched per worker-thread trip (another process: its own).
        store=FilesystemStore(directory, ThreadBatches()),
        another_writer=lambda: FilesystemStore(directory, ThreadBatches()),
        staging_of=lambda s: cast(FilesystemStore, s).staging(BlobFormat()),
        read=lambda name: (directory / name).read_bytes(),
        lose_next_answer=lose_next_answer,
        leave_leftover=leave,
        place=place,
        leftovers=lambda: [p.name for p in directory.iterdir() if is_temp_name(p.name)] if directory.exists() else [],
    )


async def _s3(endpoint: str, bucket: str) -> AsyncIterator[StoreUnderTest]:
    import boto3

    client: Any = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket=bucket)
    prefix = "archive/t/0/"
    with FaultProxy(endpoint) as proxy:

        def store_via(url: str) -> S3Store:
            return S3Store(S3Connection(moto_settings(url, bucket)), prefix)

        def is_complete(request: RequestInfo) -> bool:
            return request.method == "POST" and "uploadId" in request.query

        def leave(name: str) -> None:
            upload = client.create_multipart_upload(Bucket=bucket, Key=prefix + name)
            client.upload_part(Bucket=bucket, Key=prefix + name, UploadId=upload["UploadId"], PartNumber=1, Body=b"h")

        def leftovers() -> list[str]:
            return [u["Key"] for u in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])]

        stores: list[S3Store] = []

        def another_writer() -> S3Store:
            stores.append(store_via(endpoint))
            return stores[-1]

        stores.append(store_via(proxy.endpoint))
        try:
            yield StoreUnderTest(
                store=stores[0],
                another_writer=another_writer,
                staging_of=lambda s: cast(S3Store, s).staging(RetryPolicy(deadline_s=5), BlobFormat()),
                read=lambda name: bytes(client.get_object(Bucket=bucket, Key=prefix + name)["Body"].read()),
                # The completion lands, its answer is lost (aiohttp does not resend a POST by itself).
                lose_next_answer=lambda: proxy.lose_response_next(1, match=is_complete),
                leave_leftover=leave,
                place=lambda name, data: client.put_object(Bucket=bucket, Key=prefix + name, Body=data),
                leftovers=leftovers,
                interrupt=lambda staged: client.abort_multipart_upload(
                    Bucket=bucket, Key=prefix + blob_name(staged.first, staged.last), UploadId=staged.ref
                ),
            )
        finally:
            for store in stores:
                await store.close()


async def put(under_test: StoreUnderTest, name: str, data: bytes, store: BlobStore | None = None) -> int:
    """Stage `data` as a task would (blocking I/O, off the loop), then commit it under `name`."""
    store = store or under_test.store
    staged = await stage(under_test, store, name, data)
    return await store.commit_staged(name, staged)


async def stage(under_test: StoreUnderTest, store: BlobStore, name: str, data: bytes) -> StagedBlob:
    blob = parse_blob_name(name)
    assert blob is not None
    staging = under_test.staging_of(store)

    def write() -> StagedBlob:
        output = staging.open(blob.first)
        output.file.write(data)
        return output.finish(blob.first, blob.last, 0, 0)

    return await anyio.to_thread.run_sync(write)


_buckets = iter(range(1_000_000))


@pytest.fixture(params=KINDS)
async def under_test(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[StoreUnderTest]:
    if request.param == "memory":
        yield _memory()
    elif request.param == "filesystem":
        yield _filesystem(tmp_path / "t" / "0", monkeypatch)
    else:
        async for s3 in _s3(request.getfixturevalue("moto_endpoint"), f"contract-{next(_buckets)}"):
            yield s3


async def test_a_free_name_is_created_once(under_test: StoreUnderTest) -> None:
    store = under_test.store
    assert await store.list_page(None, 10) == ([], False)
    assert await put(under_test, blob_name(0, 9), b"first") == 5
    assert under_test.read(blob_name(0, 9)) == b"first"
    assert await store.list_page(None, 10) == ([blob_name(0, 9)], False)
    modified = await store.modified_at(blob_name(0, 9))
    assert modified is not None and abs(time.time() - modified) < 60


async def test_a_taken_name_is_refused_and_what_is_there_stays(under_test: StoreUnderTest) -> None:
    name = blob_name(0, 9)
    await put(under_test, name, b"first")
    with pytest.raises(BlobExistsError):
        await put(under_test, name, b"second")
    with pytest.raises(BlobExistsError):
        await put(under_test, name, b"third", under_test.another_writer())
    assert under_test.read(name) == b"first"


async def test_identical_bytes_from_another_writer_are_still_a_conflict(under_test: StoreUnderTest) -> None:
    """Two processes on one mirror read the same records and encode the same bytes: the second one must fail."""
    await put(under_test, blob_name(0, 9), b"same")
    with pytest.raises(BlobExistsError):
        await put(under_test, blob_name(0, 9), b"same", under_test.another_writer())


async def test_a_lost_answer_is_retried_without_a_duplicate(under_test: StoreUnderTest) -> None:
    """The write landed but its caller saw an error: the retry (the same bytes, from the same writer) succeeds."""
    store, name = under_test.store, blob_name(0, 9)
    staged = await stage(under_test, store, name, b"the chunk")
    under_test.lose_next_answer()
    with pytest.raises(Exception) as lost:  # each store reports it its own way (OSError, 5xx, a reset)
        await store.commit_staged(name, staged)
    assert not isinstance(lost.value, BlobExistsError)
    assert await store.commit_staged(name, staged) == len(b"the chunk")
    assert under_test.read(name) == b"the chunk"
    assert await store.list_page(None, 10) == ([name], False)
    # The retry's tolerance covers only its own blob: other bytes under that name are another writer's.
    with pytest.raises(BlobExistsError):
        await put(under_test, name, b"other bytes")


async def test_listings_come_in_name_order_after_any_start_after(under_test: StoreUnderTest) -> None:
    names = [blob_name(first, first + 9) for first in range(0, 70, 10)]
    for name in reversed(names):  # creation order must not matter (placed: a chain only ever grows at its end)
        under_test.place(name, b"x")
    store = under_test.store
    assert await store.list_page(None, 3) == (names[:3], True)
    assert await store.list_page(names[2], 3) == (names[3:6], True)
    assert await store.list_page(names[5], 3) == (names[6:], False)
    assert await store.list_page(names[6], 3) == ([], False)
    # A probe key between two names (the tail search's): the listing starts at the next name.
    assert await store.list_page(f"{25:020d}-{'9' * 20}", 2) == (names[3:5], True)


async def test_leftovers_are_never_listed_and_are_cleaned(under_test: StoreUnderTest) -> None:
    await put(under_test, blob_name(0, 9), b"x")
    under_test.leave_leftover(blob_name(10, 19))
    assert await under_test.store.list_page(None, 10) == ([blob_name(0, 9)], False)
    assert under_test.leftovers()
    removed = await under_test.store.clean_leftovers()
    assert len(removed) == 1 and blob_name(10, 19) in removed[0]
    assert under_test.leftovers() == []
    assert await under_test.store.list_page(None, 10) == ([blob_name(0, 9)], False)


class CountingStore:
    """Counts the listings a search makes, whatever the store."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self.checks_for_foreign_blobs = store.checks_for_foreign_blobs
        self.lists = 0

    def location(self, name: str) -> str:
        return self._store.location(name)

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        self.lists += 1
        return await self._store.list_page(start_after, max_keys)

    async def modified_at(self, name: str) -> float | None:
        return await self._store.modified_at(name)

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        return await self._store.commit_staged(name, staged, after)

    async def discard_staged(self, staged: StagedBlob) -> None:
        await self._store.discard_staged(staged)

    async def interrupted_commit(self, after: str | None) -> str | None:
        return await self._store.interrupted_commit(after)

    async def clean_leftovers(self) -> list[str]:
        return await self._store.clean_leftovers()

    async def close(self) -> None:
        await self._store.close()


async def test_the_tail_of_a_long_chain_is_found_with_few_listings(
    under_test: StoreUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 pages of blobs of skewed sizes (pages of 10 names stand in for S3's 1 000)."""
    monkeypatch.setattr(sinks.blob.chain, "PAGE", 10)
    offset = 0
    for index in range(300):
        size = (1, 7, 1000, 3)[index % 4] if index < 200 else 1  # large blobs, then a run of tiny ones
        under_test.place(blob_name(offset, offset + size - 1), b"x")
        offset += size
    counting = CountingStore(under_test.store)
    tail = await find_tail(counting)
    assert tail[-1].last + 1 == offset
    assert counting.lists <= 20, counting.lists


async def test_a_writer_whose_chain_end_is_stale_is_refused(under_test: StoreUnderTest) -> None:
    """Two writers that both believe the chain ends at 0-9, cutting their next blobs at other offsets (their
    names never collide): exactly one appends; the other is refused as a second writer."""
    if not under_test.fences_stale_ends:
        pytest.skip("this store stands for one that cannot fence (see test_blob_chain: the listing check)")
    first, second = under_test.store, under_test.another_writer()
    await put(under_test, blob_name(0, 9), b"a")
    await first.commit_staged(
        blob_name(10, 19), await stage(under_test, first, blob_name(10, 19), b"b"), blob_name(0, 9)
    )
    late = await stage(under_test, second, blob_name(10, 29), b"c")
    with pytest.raises(BlobExistsError):
        await second.commit_staged(blob_name(10, 29), late, after=blob_name(0, 9))
    await second.discard_staged(late)
    await first.commit_staged(
        blob_name(20, 29), await stage(under_test, first, blob_name(20, 29), b"d"), blob_name(10, 19)
    )
    assert (await first.list_page(None, 10))[0] == [blob_name(0, 9), blob_name(10, 19), blob_name(20, 29)]
    assert under_test.read(blob_name(10, 19)) == b"b"


async def test_a_commit_interrupted_after_its_claim_is_continued_by_the_next_writer(under_test: StoreUnderTest) -> None:
    """The claim landed, the publish never will: whoever opens the chain next must write exactly that blob, and
    nothing else can take its place."""
    if under_test.interrupt is None:
        pytest.skip("this store commits in one step: nothing can be left half-way")
    await put(under_test, blob_name(0, 9), b"a")
    staged = await stage(under_test, under_test.store, blob_name(10, 19), b"b")
    under_test.interrupt(staged)
    with pytest.raises(DestinationError):  # AWS: NoSuchUpload; moto: a 500
        await under_test.store.commit_staged(blob_name(10, 19), staged, blob_name(0, 9))
    chain = BlobChain(under_test.another_writer())
    assert await chain.open() == 10 and chain.claimed == BlobRange(10, 19)
    with pytest.raises(OutOfChainWriteError) as caught:
        await chain.append(await stage(under_test, chain.store, blob_name(10, 14), b"other cut"))
    assert caught.value.claimed == BlobRange(10, 19)
    await chain.append(await stage(under_test, chain.store, blob_name(10, 19), b"b again"))
    assert await under_test.store.list_page(None, 10) == ([blob_name(0, 9), blob_name(10, 19)], False)


async def test_claims_left_by_removed_blobs_are_reported_not_obeyed(under_test: StoreUnderTest) -> None:
    if under_test.interrupt is None:
        pytest.skip("this store keeps no claims")
    store = cast(S3Store, under_test.store)
    await put(under_test, blob_name(0, 9), b"a")
    await store.commit_staged(
        blob_name(10, 19), await stage(under_test, store, blob_name(10, 19), b"b"), blob_name(0, 9)
    )
    for name in (blob_name(0, 9), blob_name(10, 19)):
        await store.remove(name)  # by hand, leaving the claims
    with pytest.raises(CorruptChainError) as caught:
        await BlobChain(store).open()
    claims = store.location("").replace("/t/0/", "/t/_claims/0/")
    assert caught.value.problem is ChainProblem.STALE_CLAIM and caught.value.files == [f"{claims}{10:020d}"]


async def test_a_prune_forgets_what_the_store_kept_of_the_removed_blobs_and_the_chain_goes_on(
    under_test: StoreUnderTest,
) -> None:
    """After the oldest blobs are removed (a prune), `forget_before` removes what else the store kept of them (S3:
    their claims) and nothing a later commit needs: the chain opens at its tail and continues."""
    store = under_test.store
    await put(under_test, blob_name(0, 9), b"a")
    for first in (10, 20):
        name = blob_name(first, first + 9)
        await store.commit_staged(name, await stage(under_test, store, name, b"b"), blob_name(first - 10, first - 1))
    for name in (blob_name(0, 9), blob_name(10, 19)):
        await store.remove(name)
    forgotten = await store.forget_before(20)
    if under_test.interrupt is not None:  # S3: the start claim and the claim of 10-19
        s3 = cast(S3Store, store)
        assert forgotten == 2 and await s3.interrupted_commit(blob_name(20, 29)) is None
    chain = BlobChain(under_test.another_writer())
    assert await chain.open() == 30 and chain.claimed is None
    await chain.append(await stage(under_test, chain.store, blob_name(30, 39), b"c"))
    assert await store.list_page(None, 10) == ([blob_name(20, 29), blob_name(30, 39)], False)
    assert await store.forget_before(20) == 0, "nothing before offset 20 is left"


async def test_redundant_blobs_are_removed_in_one_batch_and_gone_ones_are_no_error(under_test: StoreUnderTest) -> None:
    names = [blob_name(first, first + 9) for first in range(0, 40, 10)]
    for name in names:
        under_test.place(name, b"x")
    await under_test.store.remove_redundant(names[1:3])
    assert await under_test.store.list_page(None, 10) == ([names[0], names[3]], False)
    await under_test.store.remove_redundant(names[1:3])  # a compaction killed after it: done already
    await under_test.store.remove_redundant([])
    assert await under_test.store.list_page(None, 10) == ([names[0], names[3]], False)
