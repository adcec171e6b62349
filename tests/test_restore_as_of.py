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
from sinks.blob.chain import BlobRange
from sinks.filesystem.documents import FilesystemDocuments
from tests.fakes import InMemoryStore


async def test_a_chain_as_of_a_moment_is_the_blobs_committed_by_then() -> None:
    store = InMemoryStore()
    chain = [BlobRange(first, first + 9) for first in range(0, 100, 10)]
    for index, blob in enumerate(chain):
        store.written_at[blob.name] = 1_000.0 + index  # one a second, in chain order
    assert await held_at(store, chain, 1_003.5) == chain[:4]
    assert await held_at(store, chain, 1_003.0) == chain[:4]  # committed at that very moment: held
    assert await held_at(store, chain, 999.0) == []
    assert await held_at(store, chain, 2_000.0) == chain


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
