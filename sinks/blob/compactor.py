"""A chain compacted, around the merge job: what to merge is surveyed here, the merged blobs are staged by Spark tasks
(`workers.compaction_job`), and committed here, each before the run it replaces is deleted (`sinks.blob.chain`:
the run is redundant from the merged blob's commit on, so a reader sees the same records at every step, and a
crash leaves at most a redundant run, deleted by the next compaction).

Cost per chain: one listing with details (S3: a LIST request per 1 000 names), then per merge one conditional
create and one delete per blob of its run.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.logs import log_event
from sinks.blob.chain import (
    PAGE,
    BlobRange,
    BlobStore,
    ListedBlob,
    parse_blob_name,
    redundant_by_container,
    validate_chain,
    without_redundant,
)
from sinks.blob.compaction import BlobFacts, CompactionPolicy, Merge, plan_merges
from sinks.blob.merging import MergeSource
from sinks.blob.staging import StagedBlob


@dataclass(frozen=True)
class ChainSurvey:
    """One chain as a compaction found it: its blobs and bytes (without redundant ones), the redundant blobs an
    earlier compaction left, and the merges the policy allows now."""

    blobs: int
    size: int
    redundant: tuple[str, ...]
    merges: tuple[Merge, ...]
    # each kept blob that makes others redundant, with them (what a table holding them replaces them with)
    redundant_runs: tuple[tuple[BlobRange, tuple[BlobRange, ...]], ...] = ()

    def sources(self, merge: Merge) -> tuple[MergeSource, ...]:
        """A run's blobs as the merge task reads them, each with its time in whole milliseconds rounded up: a moment
        (`restore --as-of` takes milliseconds) is at or after the rounded time exactly when it is at or after the
        blob's own, so a merged blob answers every moment as its originals did."""
        return tuple(
            MergeSource(f.blob.name, f.blob.first, f.blob.last, math.ceil(f.written_s * 1000)) for f in merge.blobs
        )


async def list_details(store: BlobStore) -> list[ListedBlob]:
    listed: list[ListedBlob] = []
    start_after: str | None = None
    while True:
        page, more = await store.list_details(start_after, PAGE)
        listed += page
        if not more or not page:
            return listed
        start_after = page[-1].name


async def survey_chain(store: BlobStore, policy: CompactionPolicy, now_s: float) -> ChainSurvey:
    """The chain listed and checked (CorruptChainError as every reader raises it), and its merges planned."""
    listed = await list_details(store)
    validate_chain([entry.name for entry in listed], store)
    by_name = {entry.name: entry for entry in listed}
    kept, redundant = without_redundant(blob for entry in listed if (blob := parse_blob_name(entry.name)) is not None)
    facts = [BlobFacts(blob, by_name[blob.name].size, by_name[blob.name].modified_s) for blob in kept]
    return ChainSurvey(
        blobs=len(kept),
        size=sum(f.size for f in facts),
        redundant=tuple(blob.name for blob in redundant),
        merges=tuple(plan_merges(facts, policy, now_s)),
        redundant_runs=tuple((c, tuple(run)) for c, run in redundant_by_container(kept, redundant).items()),
    )


async def remove_redundant(store: BlobStore, names: Sequence[str]) -> None:
    """Delete blobs a merged blob made redundant (left by a compaction that stopped between its two steps)."""
    if names:
        await store.remove_redundant(names)


def log_commit(log: logging.Logger, chain: str, merge: Merge) -> Callable[[bool], None]:
    """`apply_merge`'s `committed`: one INFO line naming the chain, the merged blob and how many it replaces."""

    def committed(published: bool) -> None:
        log_event(
            log,
            logging.INFO,
            "merged blob committed" if published else "merged blob found committed",
            chain=chain,
            blob=merge.merged.name,
            replaces=len(merge.blobs),
        )

    return committed


async def apply_merge(
    store: BlobStore,
    merge: Merge,
    staged: StagedBlob,
    committed: Callable[[bool], None] = lambda _: None,
    remove: bool = True,
) -> bool:
    """Commit the merged blob, then delete its run (`remove` false: the caller does, after its table let go of the
    run); True when this call committed it (False: it was there already, from a compaction of the same run: the run
    is redundant all the same). `committed(published)` is called in between."""
    if len(merge.blobs) < 2 or BlobRange(staged.first, staged.last) != merge.merged:
        raise ValueError(f"not a merge of a run: {merge.merged.name} from {len(merge.blobs)} blobs")  # a caller's bug
    published = await store.commit_merged(merge.merged.name, staged)
    committed(published)
    if remove:
        # Each strictly inside the merged range (never the merged blob itself), and redundant alone: any order will do.
        await store.remove_redundant([facts.blob.name for facts in merge.blobs])
    return published
