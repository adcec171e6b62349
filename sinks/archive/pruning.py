"""An archive pruned to what was committed since a cut, in the one order that keeps every promise; shared by `prune`
and the running mirror's `destination.retention` (`supervisor.archive_upkeep`).

1. Survey: each chain's prefix to remove (`sinks.blob.pruner`); with a table, only what its table holds (the prefix
   ends below the table's position: a chain whose table is behind keeps its blobs until the table has them, one
   whose table cannot be read keeps them all this time), and the documents no kept moment reads.
2. The cut recorded (`sinks.archive.retention`): from here on `restore --as-of` refuses a moment before it.
3. With a table: one commit per table removing the prefixes' files (`sinks.tables.upkeep`); a chain whose table's
   commit failed keeps its blobs.
4. Each prefix removed, oldest first (the chain whole from a later blob at every step), then the documents, then the
   older retention documents.
A step killed at any point is finished by the next prune: the cut stays recorded, the table names nothing removed.

Cost: per chain one detailed listing and a delete per blob; per table one positions read and one commit; per
documents directory one listing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sinks.archive import retention as archive_retention
from sinks.archive.documents import ArchiveDocuments
from sinks.archive.retention import ArchiveRetention, DirectoryPrune, documents_to_prune, prune_documents
from sinks.blob.chain import BlobRange, parse_blob_name
from sinks.blob.pruner import apply_prune, survey_prune
from sinks.blob.retention import PrunePlan
from sinks.destination import Archive
from sinks.tables.upkeep import ArchiveTables, TableChain


@dataclass
class ChainPrune:
    """What a prune does to one chain: its plan (None: its survey failed), what failed (its survey, a removal: the
    chain is whole from a later blob), why its table kept it as it was (the table could not be read, or its commit
    failed), and why its table held part of it back (the table is behind the cut)."""

    chain: TableChain
    plan: PrunePlan | None
    failed: Exception | None = None
    table_failed: str | None = None
    held_back: str | None = None

    @property
    def removes(self) -> bool:
        return self.plan is not None and bool(self.plan.removed) and self.table_failed is None


@dataclass
class ArchivePrune:
    kept: ArchiveRetention
    chains: list[ChainPrune]
    directories: list[DirectoryPrune]
    recorded: bool = False  # the cut was recorded (something went)

    @property
    def changing(self) -> list[ChainPrune]:
        return [c for c in self.chains if c.removes]


async def survey_archive(
    archive: Archive,
    documents: ArchiveDocuments,
    chains: Sequence[TableChain],
    kept: ArchiveRetention,
    tables: ArchiveTables | None,
) -> ArchivePrune:
    """Step 1. A chain whose survey fails is kept with its error (`ChainPrune.failed`), the others go on."""
    cut_s = kept.kept_since_ms / 1000
    positions: dict[str, int] = {}
    unread: dict[str, str] = {}
    if tables is not None:
        positions, unread = await tables.positions(chains)
    surveyed = []
    for chain in chains:
        if chain.chain in unread:
            surveyed.append(ChainPrune(chain, None, table_failed=f"its table could not be read: {unread[chain.chain]}"))
            continue
        below = positions.get(chain.chain, 0) if tables is not None else None  # unknown: the table may hold any
        store = archive.chain_store(chain.name, chain.partition)
        try:
            plan, unlimited = await survey_prune(store, cut_s, below)
            waiting = unlimited.removed_blobs - plan.removed_blobs
            holds = (
                f"its table holds it up to offset {below}"
                if chain.chain in positions
                else "its table's history no longer says what it holds of it"
            )
            held = f"{holds}: {waiting} more blobs wait for it" if waiting else None
            surveyed.append(ChainPrune(chain, plan, held_back=held))
        except Exception as exc:
            surveyed.append(ChainPrune(chain, None, exc))
        finally:
            await store.close()
    directories = await documents_to_prune(documents, sorted({c.name for c in chains}), kept.kept_since_ms)
    return ArchivePrune(kept, surveyed, directories)


async def apply_archive_prune(
    archive: Archive,
    documents: ArchiveDocuments,
    prune: ArchivePrune,
    tables: ArchiveTables | None,
    done_chain: Callable[[ChainPrune], None] = lambda _: None,
    done_directory: Callable[[DirectoryPrune], None] = lambda _: None,
) -> None:
    """Steps 2-4; `done_chain`/`done_directory` after each chain or directory (its `failed` set if it failed)."""
    changing = prune.changing
    if not changing and not prune.directories:
        return  # nothing goes: the archive's retention is left as it was
    await archive_retention.record(documents, prune.kept)  # first: a moment before the cut is refused from now on
    prune.recorded = True
    if tables is not None:  # one commit per table, before any of its files is deleted
        failed = await tables.rewrite({c.chain: tables.removing(c.chain, _blobs(c.plan)) for c in changing}, "prune")
        for chain in changing:
            if chain.chain.chain in failed:
                chain.table_failed = f"its table's commit failed: {failed[chain.chain.chain]}"
    for chain in changing:
        if chain.table_failed is None and chain.plan is not None:
            store = archive.chain_store(chain.chain.name, chain.chain.partition)
            try:
                await apply_prune(store, chain.plan)
            except Exception as exc:
                chain.failed = exc
            finally:
                await store.close()
        done_chain(chain)
    for directory in prune.directories:
        try:
            await prune_documents(documents, directory)
        except Exception as exc:
            directory.failed = str(exc)
        done_directory(directory)
    await archive_retention.remove_older(documents, prune.kept)


def _blobs(plan: PrunePlan | None) -> list[BlobRange]:
    return [] if plan is None else [b for name in plan.removed if (b := parse_blob_name(name)) is not None]
