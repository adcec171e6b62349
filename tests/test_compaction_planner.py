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
    policy = CompactionPolicy(target_bytes=100, window_s=0)
    assert _ranges(_chain(40, 40, 40, 40, 40), policy) == [(0, 19), (20, 39)]  # the last (40-49) is the writer's
    assert _ranges(_chain(10, 10, 10), policy) == [(0, 19)]
    assert _ranges(_chain(10, 10), policy) == []  # one blob besides the last: nothing to merge
    assert _ranges(_chain(60, 50, 10, 10, 5), policy) == [(10, 39)]  # 60 + 50 > 100: 60 alone stays


def test_big_or_young_blobs_end_a_run() -> None:
    policy = CompactionPolicy(target_bytes=100, min_age_s=3600, window_s=0)
    assert _ranges(_chain(10, 10, 100, 10, 10, 10), policy) == [(0, 19), (30, 49)]  # 100: big enough already
    chain = _chain(10, 10, 10, 10, 10, 10)
    chain[2] = BlobFacts(chain[2].blob, 10, NOW - 60)  # written a minute ago
    assert _ranges(chain, policy) == [(0, 19), (30, 49)]


def test_a_run_holds_at_most_max_blobs() -> None:
    policy = CompactionPolicy(target_bytes=1000, max_blobs=2, window_s=0)
    assert _ranges(_chain(10, 10, 10, 10, 10), policy) == [(0, 19), (20, 39)]


def test_with_a_window_each_window_once_whole_and_old_enough_is_merged_once() -> None:
    """An hour's blobs become one blob once the hour ended min-age ago; blobs of two hours never share one; a merged
    blob alone in its window is left alone (every byte rewritten once)."""
    hour = 3600.0
    policy = CompactionPolicy(target_bytes=1000, min_age_s=600, window_s=hour)
    now = 10 * hour + 900  # 10:15: the 9:00 hour ended 15 minutes ago, the 10:00 one is running
    times = [  # two blobs of 8:00, three of 9:00, two of 10:00
        8 * hour + 100,
        8 * hour + 200,
        9 * hour + 100,
        9 * hour + 3000,
        9 * hour + 3500,
        10 * hour,
        10 * hour + 9,
    ]
    chain = [BlobFacts(BlobRange(10 * i, 10 * i + 9), 10, t) for i, t in enumerate(times)]
    assert [(m.merged.first, m.merged.last) for m in plan_merges(chain, policy, now)] == [(0, 19), (20, 49)]
    early = 10 * hour + 500  # 10:08: the 9:00 hour ended only 8 minutes ago
    assert [(m.merged.first, m.merged.last) for m in plan_merges(chain, policy, early)] == [(0, 19)]
    merged = [BlobFacts(BlobRange(0, 19), 20, 8 * hour + 200), *chain[2:]]
    assert [(m.merged.first, m.merged.last) for m in plan_merges(merged, policy, now)] == [(20, 49)]
