"""A chain pruned (`prune`, and the running mirror's `destination.retention`): surveyed with one detailed listing,
planned (`sinks.blob.retention`, pure), then its prefix removed oldest first, so the chain is whole from a later blob
at every step, and what the store kept of the removed blobs besides them forgotten (S3: their claims).

Cost per chain: one listing with details (S3: a LIST per 1 000 names), one delete per removed blob, and on S3 one
LIST and one DeleteObjects per 1 000 claims forgotten.
"""

from __future__ import annotations

from sinks.blob.chain import BlobStore, validate_chain
from sinks.blob.compactor import list_details
from sinks.blob.retention import PrunePlan, plan_prune


async def survey_prune(store: BlobStore, cut_s: float, below: int | None = None) -> tuple[PrunePlan, PrunePlan]:
    """The chain listed and checked (CorruptChainError as every reader raises it), and its prune planned: limited to
    what ends below `below` (`plan_prune`'s), and as it would be without that limit."""
    listed = await list_details(store)
    validate_chain([entry.name for entry in listed], store)
    unlimited = plan_prune(listed, cut_s)
    return (unlimited if below is None else plan_prune(listed, cut_s, below)), unlimited


async def apply_prune(store: BlobStore, plan: PrunePlan) -> None:
    for blob in plan.removed:  # oldest first: the chain stays whole at every step
        await store.remove(blob)
    if plan.removed and plan.kept_from is not None:
        await store.forget_before(plan.kept_from)
