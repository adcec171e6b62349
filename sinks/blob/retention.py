"""Which blobs of a chain a prune removes: frozen facts in, the plan out; no I/O, no clock.

A prune removes the chain's oldest contiguous prefix of blobs committed before the cut, never a blob in the middle
and never the last blob (its writer continues the chain after that name, and a restart reads where from it). Every
step of the removal, oldest first, leaves a chain that starts later and is whole from there: a reader at any moment
sees a chain, and a prune killed half-way is finished by the next. Blobs a merged blob made redundant
(`sinks.blob.chain.without_redundant`) go with their container, just before it (removing the container first would
put them back into the chain for a moment).

A blob's time is the listing's (`ListedBlob.modified_s`: a merged blob's is its newest original's on a filesystem,
its merge's on S3, so a merged blob stays at least as long as its originals would have). Where parallel tasks of a
backlog committed blobs out of offset order, the prefix ends at the first blob not older than the cut.

Cost: one sort and one pass over the chain's listing, O(n log n) for n blobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sinks.blob.chain import BlobRange, ListedBlob, parse_blob_name, redundant_by_container, without_redundant


@dataclass(frozen=True)
class PrunePlan:
    """One chain's prune: the blob names to remove, in the order to remove them, and what stays."""

    removed: tuple[str, ...]
    removed_blobs: int  # blobs of the chain removed (not counting redundant ones)
    removed_bytes: int
    kept_blobs: int
    kept_from: int | None  # the offset the chain starts at afterwards; None: an empty chain


def plan_prune(listed: Sequence[ListedBlob], cut_s: float, below: int | None = None) -> PrunePlan:
    """The prune of a chain listed as `listed` (every blob, redundant ones too; the chain already validated) that
    removes what was committed before `cut_s` (Unix seconds), and with `below` only blobs ending below that offset
    (a table's position: what its table holds, so that the table can drop them first)."""
    details = {blob: entry for entry in listed if (blob := parse_blob_name(entry.name)) is not None}
    chain, redundant = without_redundant(details)
    count = 0
    for blob in chain[:-1]:  # never the last blob
        if details[blob].modified_s >= cut_s or (below is not None and blob.last >= below):
            break
        count += 1
    removed_chain = chain[:count]
    inside = redundant_by_container(chain, redundant)
    order: list[BlobRange] = []
    for blob in removed_chain:
        order += [*inside.get(blob, []), blob]
    return PrunePlan(
        removed=tuple(blob.name for blob in order),
        removed_blobs=count,
        removed_bytes=sum(details[blob].size for blob in order),
        kept_blobs=len(chain) - count,
        kept_from=chain[count].first if count < len(chain) else None,
    )
