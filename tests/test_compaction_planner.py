"""Which runs of a chain a compaction merges (`sinks.blob.compaction.plan_merges`): pure, no store."""

from __future__ import annotations

from sinks.blob.chain import BlobRange
from sinks.blob.compaction import BlobFacts, CompactionPolicy, plan_merges

NOW = 1_000_000.0
OLD = NOW - 7200


def _chain(*sizes: int, written_s: float = OLD) -> list[BlobFacts]:
    return [BlobFacts(BlobRange(10 * i, 10 * i + 9), size, written_s) for i, size in enumerate(sizes)]


def _ranges(chain: list[BlobFacts], policy: CompactionPolicy) -> list[tuple[int, int]]:
    return [(m.merged.first, m.merged.last) for m in plan_merges(chain, policy, NOW)]


def test_adjacent_small_blobs_merge_up_to_the_target_and_the_last_blob_stays() -> None:
    policy = CompactionPolicy(target_bytes=100)
    assert _ranges(_chain(40, 40, 40, 40, 40), policy) == [(0, 19), (20, 39)]  # the last (40-49) is the writer's
    assert _ranges(_chain(10, 10, 10), policy) == [(0, 19)]
    assert _ranges(_chain(10, 10), policy) == []  # one blob besides the last: nothing to merge
    assert _ranges(_chain(60, 50, 10, 10, 5), policy) == [(10, 39)]  # 60 + 50 > 100: 60 alone stays


def test_big_or_young_blobs_end_a_run() -> None:
    policy = CompactionPolicy(target_bytes=100, min_age_s=3600)
    assert _ranges(_chain(10, 10, 100, 10, 10, 10), policy) == [(0, 19), (30, 49)]  # 100: big enough already
    chain = _chain(10, 10, 10, 10, 10, 10)
    chain[2] = BlobFacts(chain[2].blob, 10, NOW - 60)  # written a minute ago
    assert _ranges(chain, policy) == [(0, 19), (30, 49)]


def test_a_run_holds_at_most_max_blobs() -> None:
    assert _ranges(_chain(10, 10, 10, 10, 10), CompactionPolicy(target_bytes=1000, max_blobs=2)) == [(0, 19), (20, 39)]
