"""`table-sync`: an archive's chains joined to their tables in one run (an archive written before its table was
configured, or a table that fell behind while its catalog was away). The same commits as the run process's table
keeper: each table's positions read from its own commits, the blobs after them added in order, each commit
recording the chains' new positions. Commits carry at most `batch` blobs, so a sync cut short (Ctrl-C, kill -9)
resumes from its last commit, and a sync of a table that is in step adds nothing: idempotent.

A running mirror may keep the same table meanwhile: whichever commit comes second finds the positions moved and
adds nothing (`sinks.tables.iceberg.refuse_moved`); the next round of either goes on from the new positions.

Cost per table: the listing of every chain after its position (one page per LIST_PAGE names), one catalog commit
per `batch` blobs, each reading the footers of its blobs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio.to_thread

from config.estate import MirrorSpec
from config.model import TableConfig
from sinks.blob.chain import BlobRange
from sinks.destination import Archive, chain_name
from sinks.tables.following import blobs_after
from sinks.tables.kept import KeptTable, TableOpener, table_identity, table_name
from sinks.tables.positions import TableFile

BATCH_BLOBS = 2000  # blobs per commit: a commit's manifest stays small, and a sync cut short loses little


@dataclass
class TableSync:
    """What one table's sync did: blobs added, commits made, where each chain ended, and what it could not add."""

    table: str
    chains: int
    added: int = 0
    commits: int = 0
    ends: dict[str, int] = field(default_factory=dict)  # chain → the table's position after the sync
    unknown: list[str] = field(default_factory=list)  # chains whose position the table's history cannot tell
    gaps: dict[str, str] = field(default_factory=dict)  # chain → the blob that does not continue it


Progress = Callable[[TableSync, int], None]  # after each commit: the table's sync so far, blobs still to add


async def sync_tables(
    archive: Archive,
    settings: TableConfig,
    daily: bool,
    mirrors: Sequence[MirrorSpec],
    progress: Progress,
    batch: int = BATCH_BLOBS,
    open_table: Callable[[str, str], KeptTable] | None = None,
) -> list[TableSync]:
    """Each table of `mirrors`' chains brought up to its chains' ends, table by table. Raises TableError when a
    table cannot be read or committed (its commits so far stay)."""
    opener = open_table or TableOpener(settings, archive, daily)
    tables: dict[str, tuple[str, dict[str, tuple[str, int]]]] = {}
    for spec in mirrors:
        identifier = table_identity(settings, archive, spec.topic, spec.destination_name)
        name = table_name(settings, spec.topic, spec.destination_name)
        chains = tables.setdefault(identifier, (name, {}))[1]
        chains[chain_name(spec.destination_name, spec.partition)] = (spec.destination_name, spec.partition)
    done = []
    for identifier, (name, chains) in sorted(tables.items()):
        done.append(await _sync_one(archive, opener(identifier, name), chains, progress, batch))
    return done


async def _sync_one(
    archive: Archive, table: KeptTable, chains: dict[str, tuple[str, int]], progress: Progress, batch: int
) -> TableSync:
    read = await anyio.to_thread.run_sync(table.positions, list(chains), abandon_on_cancel=True)
    sync = TableSync(table.identifier, len(chains), ends=dict(read.next_offsets), unknown=sorted(read.unknown))
    pending: dict[str, list[BlobRange]] = {}
    for chain, at in sorted(read.next_offsets.items()):
        found = await blobs_after(archive, *chains[chain], at)
        if found.gap_at is not None:
            sync.gaps[chain] = found.gap_at.name
        if found.blobs:
            pending[chain] = list(found.blobs)
    left = sum(len(blobs) for blobs in pending.values())
    while pending:
        files: list[TableFile] = []
        moved: dict[str, int] = {}
        for chain in sorted(pending):
            if len(files) >= batch:
                break
            destination_name, partition = chains[chain]
            taken, pending[chain] = pending[chain][: batch - len(files)], pending[chain][batch - len(files) :]
            files += [
                TableFile(archive.file_uri(destination_name, partition, b.name), partition, b.name) for b in taken
            ]
            moved[chain] = taken[-1].last + 1
            if not pending[chain]:
                del pending[chain]
        positions = {**sync.ends, **moved}
        await anyio.to_thread.run_sync(table.commit, files, positions, dict(sync.ends), abandon_on_cancel=True)
        sync.ends, sync.added, sync.commits = positions, sync.added + len(files), sync.commits + 1
        left -= len(files)
        progress(sync, left)
    return sync
