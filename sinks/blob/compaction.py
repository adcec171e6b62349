"""Which runs of a chain's blobs a compaction merges: frozen facts in, merges out; no I/O, no clock.

A merge is a run of adjacent blobs whose records become one blob named after the run's whole range; the chain rule
(`sinks.blob.chain.without_redundant`) makes the run redundant from the moment the merged blob is committed, so the
run is deleted after, never before. What is merged:
- with a `window_s`, the blobs committed within one window of UTC time (an hour by default), once the whole window is
  older than `min_age_s`: each window's blobs become one merged blob (or a few of `target_bytes`), merged once and
  never again (a merged blob alone in its window is not a run), so every byte is rewritten once; without a window,
  the blobs older than `min_age_s`, a run growing round after round (its merged blob merged again with what
  followed);
- only blobs older than `min_age_s` (a reader or a table may be about to take the newest);
- never the chain's last blob: its writer continues the chain after that name;
- never a blob at or above `target_bytes` (it is big enough), which also ends a run;
- a run holds at most `target_bytes` and `max_blobs` blobs (the merge task reads them one after another, its
  memory is one row group), and at least two.
The days of a `flush.daily` archive are its records', which only reading the blobs tells: the merge task cuts a run
where they change (`sinks.blob.merging`).

Cost: one pass over the chain, O(n) for n blobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from config.model import CompactionConfig
from sinks.blob.chain import BlobRange


@dataclass(frozen=True)
class BlobFacts:
    """One blob of the chain as the planner sees it: its range, its size, when it was written (Unix seconds; a merged
    blob: when its last original was) and, with `flush.daily`, the UTC day of its records (None: not known, or not
    daily)."""

    blob: BlobRange
    size: int
    written_s: float
    day: int | None = None


@dataclass(frozen=True)
class CompactionPolicy:
    target_bytes: int = 128 * 1024 * 1024
    min_age_s: float = 3600.0
    max_blobs: int = 10_000
    window_s: float = 3600.0  # 0: no window

    @classmethod
    def of(cls, settings: CompactionConfig) -> CompactionPolicy:
        return cls(settings.target_bytes, settings.min_age_ms / 1000, window_s=settings.window_ms / 1000)

    def window_of(self, facts: BlobFacts) -> int | None:
        return int(facts.written_s // self.window_s) if self.window_s else None

    def old_enough(self, facts: BlobFacts, now_s: float) -> bool:
        """Its window ended `min_age_s` ago (without a window: it was written that long ago)."""
        window = self.window_of(facts)
        ended = facts.written_s if window is None else (window + 1) * self.window_s
        return ended <= now_s - self.min_age_s


@dataclass(frozen=True)
class Merge:
    """A run of adjacent blobs to become one."""

    blobs: tuple[BlobFacts, ...]

    @property
    def merged(self) -> BlobRange:
        return BlobRange(self.blobs[0].blob.first, self.blobs[-1].blob.last)

    @property
    def size(self) -> int:
        return sum(facts.size for facts in self.blobs)

    def within(self, first: int, last: int) -> Merge:
        """The part of this run from offset `first` to `last` (a merged blob of one day of it: flush.daily)."""
        return Merge(tuple(f for f in self.blobs if first <= f.blob.first and f.blob.last <= last))


def plan_merges(chain: Sequence[BlobFacts], policy: CompactionPolicy, now_s: float) -> list[Merge]:
    """The merges of `chain` (its blobs in chain order, without redundant ones) that `policy` allows now."""
    merges: list[Merge] = []
    run: list[BlobFacts] = []
    run_bytes = 0
    for facts in [*chain[:-1], None]:  # never the last blob; None closes the last run
        eligible = facts is not None and facts.size < policy.target_bytes and policy.old_enough(facts, now_s)
        continues = (
            eligible
            and facts is not None
            and run_bytes + facts.size <= policy.target_bytes
            and len(run) < policy.max_blobs
            and (not run or policy.window_of(run[0]) == policy.window_of(facts))
        )
        if not continues:
            if len(run) >= 2:
                merges.append(Merge(tuple(run)))
            run, run_bytes = [], 0
        if eligible and facts is not None:
            run.append(facts)
            run_bytes += facts.size
    return merges
