"""A restore as of a moment: each chain up to its last blob committed by then, the topic metadata and group
positions last archived by then."""

from __future__ import annotations

from pathlib import Path

import pytest

from commands.restore import held_at
from config.errors import ConfigError
from config.restore import parse_as_of
from sinks.archive.documents import moment_text
from sinks.archive.group_positions import ArchivedPositions, newest_of_every_cluster
from sinks.archive.group_positions import add as add_positions
from sinks.archive.topic_metadata import ArchivedTopic, as_of
from sinks.archive.topic_metadata import add as add_topic
from sinks.blob.chain import BlobRange, ListedBlob
from sinks.filesystem.documents import FilesystemDocuments
from tests.fakes import InMemoryStore


async def test_a_chain_as_of_a_moment_is_the_blobs_committed_by_then() -> None:
    store = InMemoryStore()
    chain = [BlobRange(first, first + 9) for first in range(0, 100, 10)]
    for index, blob in enumerate(chain):
        store.blobs[blob.name], store.written_at[blob.name] = b"PAR1", 1_000.0 + index  # one a second, in order
    assert await held_at(store, chain, 1_003.5) == (chain[:4], 40)
    assert await held_at(store, chain, 1_003.0) == (chain[:4], 40)  # committed at that very moment: held
    assert await held_at(store, chain, 999.0) == ([], 0)
    assert await held_at(store, chain, 2_000.0) == (chain, 100)


async def test_blobs_a_backlog_wrote_out_of_offset_order_are_held_once_every_blob_before_them_is() -> None:
    """Parallel tasks of a backlog write blobs out of offset order (each is committed after the ones before it): a
    blob is held once it and every blob before it were written, before and after a compaction merged them."""
    store = InMemoryStore()
    chain = [BlobRange(first, first + 9) for first in range(0, 50, 10)]
    times = (1_000.0, 1_005.0, 1_002.0, 1_006.0, 1_007.0)
    for blob, written in zip(chain, times, strict=True):
        store.blobs[blob.name], store.written_at[blob.name] = b"PAR1", written
    moments = (999.0, 1_001.0, 1_003.0, 1_005.0, 1_006.5, 1_008.0)
    ends = {moment: (await held_at(store, chain, moment))[1] for moment in moments}
    assert ends == {999.0: 0, 1_001.0: 10, 1_003.0: 10, 1_005.0: 30, 1_006.5: 40, 1_008.0: 50}
    merged = InMemoryStore()  # the first four merged: the merged blob's time is its newest original's
    compacted = [BlobRange(0, 39), chain[-1]]
    for blob, written in zip(compacted, (1_006.0, 1_007.0), strict=True):
        merged.blobs[blob.name], merged.written_at[blob.name] = b"PAR1", written
    originals = [(b.first, b.last, round(t * 1000)) for b, t in zip(chain[:4], times, strict=False)]

    async def merged_from(blob: BlobRange) -> list[tuple[int, int, int]] | None:
        return originals if blob == compacted[0] else None

    after = {moment: (await held_at(merged, compacted, moment, merged_from))[1] for moment in ends}
    assert after == ends
    # On S3 a listing says when the merged blob was merged (later than every moment here); its metadata says its
    # newest original's time, which a HEAD reads (`modified_at`).
    on_s3 = MergedLaterInListings(merged, {compacted[0].name: 2_000.0})
    assert {moment: (await held_at(on_s3, compacted, moment, merged_from))[1] for moment in ends} == ends


class MergedLaterInListings(InMemoryStore):
    """A store whose listing gives some blobs another time than `modified_at` (S3: a merged blob's object time is
    its merge's, its metadata its newest original's)."""

    def __init__(self, store: InMemoryStore, listed_at: dict[str, float]) -> None:
        super().__init__()
        self.blobs, self.written_at, self._listed_at = store.blobs, store.written_at, listed_at

    async def list_details(self, start_after: str | None, max_keys: int) -> tuple[list[ListedBlob], bool]:
        page, more = await super().list_details(start_after, max_keys)
        return [ListedBlob(e.name, e.size, self._listed_at.get(e.name, e.modified_s)) for e in page], more


async def test_a_merged_blob_is_held_as_far_as_its_originals_were() -> None:
    """A compaction merged 10-39 (committed at 1 001, 1 002, 1 003) into one blob whose own time is its newest
    original's: as of any moment the restore reads the same offsets as before the merge."""
    store = InMemoryStore()
    chain = [BlobRange(0, 9), BlobRange(10, 39), BlobRange(40, 49)]
    for blob, written in zip(chain, (1_000.0, 1_003.0, 1_004.0), strict=True):
        store.blobs[blob.name], store.written_at[blob.name] = b"PAR1", written
    originals = [(10, 19, 1_001_000), (20, 29, 1_002_000), (30, 39, 1_003_000)]

    async def merged_from(blob: BlobRange) -> list[tuple[int, int, int]] | None:
        return originals if blob == BlobRange(10, 39) else None

    for moment, end in ((1_000.5, 10), (1_001.0, 20), (1_002.5, 30), (1_003.0, 40), (1_004.0, 50), (999.0, 0)):
        blobs, held_end = await held_at(store, chain, moment, merged_from)
        assert held_end == end, moment
        assert blobs == [blob for blob in chain if blob.first < end], moment


def topic(ms: int, partitions: int) -> ArchivedTopic:
    return ArchivedTopic("prod", "orders", moment_text(ms), ms, partitions, 1, "t-1", "delete", {})


async def test_metadata_and_positions_as_of_a_moment(tmp_path: Path) -> None:
    store = FilesystemDocuments(tmp_path)
    for ms, partitions in ((1_000, 3), (5_000, 6)):
        await add_topic(store, "orders", topic(ms, partitions))
    assert (await as_of(store, "orders", 4_999)).partitions == 3  # type: ignore[union-attr]
    assert (await as_of(store, "orders", 5_000)).partitions == 6  # type: ignore[union-attr]
    assert (await as_of(store, "orders", None)).partitions == 6  # type: ignore[union-attr]
    assert (await as_of(store, "orders", 10)).partitions == 3  # type: ignore[union-attr]  # first seen later: oldest
    for cluster, ms, offset in (("prod", 1_000, 10), ("prod", 5_000, 50), ("dr", 6_000, 60)):
        groups = {"billing": {"orders": {"0": offset}}}
        await add_positions(store, ArchivedPositions(cluster, moment_text(ms), ms, groups, {}))
    at = {p.source_cluster: p.groups["billing"]["orders"]["0"] for p in await newest_of_every_cluster(store, 5_500)}
    assert at == {"prod": 50}  # dr's only document is later: left out
    assert len(await newest_of_every_cluster(store)) == 2


def test_as_of_is_epoch_milliseconds_or_a_time_with_its_zone() -> None:
    assert parse_as_of("1767225600000") == 1_767_225_600_000
    assert parse_as_of("2026-01-01T00:00:00Z") == 1_767_225_600_000
    assert parse_as_of("2026-01-01T01:00:00+01:00") == 1_767_225_600_000
    for wrong in ("2026-01-01T00:00:00", "yesterday"):
        with pytest.raises(ConfigError) as caught:
            parse_as_of(wrong)
        assert "not a time" in str(caught.value)
