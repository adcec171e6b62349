"""The last step of a compaction, shared by `compact` and the running mirror's upkeep (`supervisor.archive_upkeep`):
runs a committed merged blob made redundant leave their tables, then their chains.

With a table (`sinks.tables.upkeep`), a chain's runs are merged only where the table holds them whole (they end below
its position), and each table gets one commit replacing every run of its chains with its merged blob before any of
those runs is deleted, so that the table never names a file that is gone. A run whose table commit failed stays,
redundant (every reader reads the merged blob instead), for the next compaction to try again; so does one left by a
kill.

Cost: one commit per table; per chain one batch delete of its runs' blobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.describe import describe_error
from sinks.blob.chain import BlobRange
from sinks.blob.compaction import Merge
from sinks.destination import Archive
from sinks.tables.rewrites import FileChange
from sinks.tables.upkeep import ArchiveTables, TableChain


@dataclass(frozen=True)
class RedundantRun:
    """Blobs of a chain that a committed blob (`container`) holds all the records of."""

    chain: TableChain
    container: BlobRange
    run: tuple[BlobRange, ...]

    @classmethod
    def of(cls, chain: TableChain, merge: Merge) -> RedundantRun:
        return cls(chain, merge.merged, tuple(facts.blob for facts in merge.blobs))


def merges_within_table(merges: Sequence[Merge], position: int | None) -> tuple[Merge, ...]:
    """The merges a chain's table lets happen: each run cut to what the table holds (the blobs ending below its
    `position`), if two blobs or more are left (None: no table, every merge)."""
    if position is None:
        return tuple(merges)
    held = (Merge(tuple(facts for facts in merge.blobs if facts.blob.last < position)) for merge in merges)
    return tuple(merge for merge in held if len(merge.blobs) >= 2)


async def retire_runs(archive: Archive, tables: ArchiveTables | None, runs: Sequence[RedundantRun]) -> dict[str, str]:
    """`runs` taken out of their tables (one commit per table), then deleted from their chains; for each chain whose
    runs stay, why."""
    failed: dict[str, str] = {}
    if tables is not None and runs:
        changes: dict[TableChain, list[FileChange]] = {}
        for run in runs:
            changes.setdefault(run.chain, []).append(tables.replacing(run.chain, run.container, run.run))
        refused = await tables.rewrite(changes, "compaction")
        failed = {chain: f"its table's commit failed: {why}" for chain, why in refused.items()}
    by_chain: dict[TableChain, list[str]] = {}
    for run in runs:
        by_chain.setdefault(run.chain, []).extend(blob.name for blob in run.run)
    for chain, names in by_chain.items():
        if chain.chain in failed:
            continue
        store = archive.chain_store(chain.name, chain.partition)
        try:
            await store.remove_redundant(names)  # each strictly inside its container: any order will do
        except Exception as exc:
            failed[chain.chain] = describe_error(exc)
        finally:
            await store.close()
    return failed
