"""What a compaction or a prune changes in a table that follows the chains: frozen facts in, the files to remove and
add out; no I/O, no clock.

A table holds a chain's blobs up to its position. A compaction replaces a run of blobs the table holds with the one
merged blob that holds the same records; a prune removes the oldest blobs. Either is one commit per table, made after
the chain committed the merged blob and before the chain deletes what it replaces, so that the table never names a
file that is gone, and a step killed at any point is finished by the next one. Each change is therefore decided
against what the table holds now:
- a run the table holds whole is replaced (its merged blob added unless the table already holds it);
- a run the table holds none of is left (done by an earlier commit, or never added: the table adds the merged blob
  when it gets there, `sinks.tables.positions.next_blobs`);
- a run the table holds part of is refused (`Rewrite.partial`; the table raises TableError and commits nothing): no
  commit of ours leaves a table that way, so someone else changed it, and the chain keeps the run until a person
  looks.

Cost: one set lookup per file named.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from sinks.tables.positions import TableFile

MAINTENANCE_KEY = "mirror-v3.maintenance"  # in a rewrite commit's summary (Iceberg) or commit info (Delta)


@dataclass(frozen=True)
class FileChange:
    """Blobs that leave the table, and the one blob that holds the same records (a compaction's merged blob) or
    None (a prune: their records leave the table)."""

    removed: tuple[TableFile, ...]
    added: TableFile | None = None


@dataclass(frozen=True)
class Rewrite:
    removed: tuple[str, ...]  # the table's names of the files to remove
    added: tuple[TableFile, ...]
    changes_rows: bool  # rows leave the table (a prune), rather than moving to other files (a compaction)
    partial: str | None = None  # a file of a run the table holds only part of: nothing may be committed


def plan_rewrite(changes: Sequence[FileChange], held: Collection[str], key: Callable[[TableFile], str]) -> Rewrite:
    """The commit that applies `changes` to a table holding the files named `held` (`key`: a file's name in the
    table: its URI for Iceberg, its path under the table for Delta)."""
    removed: list[str] = []
    added: list[TableFile] = []
    changes_rows = False
    for change in changes:
        names = [key(file) for file in change.removed]
        holding = [name for name in names if name in held]
        if not holding:
            continue
        if len(holding) != len(names):
            return Rewrite((), (), False, partial=sorted(set(names) - set(holding))[0])
        removed += holding
        if change.added is None:
            changes_rows = True
        elif key(change.added) not in held:
            added.append(change.added)
    return Rewrite(tuple(removed), tuple(added), changes_rows)
