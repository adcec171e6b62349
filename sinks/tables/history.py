"""Which of an Iceberg table's old snapshots the mirror may expire: pure, no I/O, no clock.

Every commit records the chains' positions in its snapshot's summary, so the table's metadata grows by a summary
per commit (about 50 bytes per chain: 12 KB a commit at 256 partitions) and every commit rewrites it whole. Engines'
own expiry (Iceberg's `expire_snapshots`) refuses tables with `gc.enabled=false`, which ours must have (their data
files are the archive's): so the mirror expires its tables' old snapshots itself, removing them from the metadata
(PyIceberg's `ExpireSnapshots` deletes no file; `sinks.tables.iceberg` then deletes the expired snapshots' manifest
lists and manifests, never a data file).

The rule keeps what reading the positions needs (`sinks.tables.positions.walk_positions` walks back from the newest
snapshot through its parents):
- only the oldest end of the current snapshot's ancestry goes, never one in between (the walk stops at a missing
  parent);
- every snapshot younger than the retention stays, and so does, for every chain, the newest snapshot naming it (a
  shard that commits rarely, or is stopped, keeps its position);
- the oldest snapshot kept becomes the table's `FLOOR_PROPERTY`: a walk that reaches it has seen every chain any
  expired snapshot named, so a chain no kept snapshot names is at its beginning (a partition added later), as on a
  table whose whole history is kept. Expiry happens only on such a table: where someone else expired snapshots
  before, positions of unnamed chains stay unknown, and nothing claims otherwise.

Cost: one pass over the ancestry's summaries (snapshots × chains named).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FLOOR_PROPERTY = "mirror-v3.history-floor"  # the oldest snapshot kept by the mirror's expiry


@dataclass(frozen=True)
class SnapshotFacts:
    snapshot_id: int
    timestamp_ms: int
    chains: frozenset[str]  # the chains whose positions its summary records


@dataclass(frozen=True)
class OldestSnapshot:
    snapshot_id: int
    sequence_number: int | None
    parent_id: int | None


@dataclass(frozen=True)
class Expiry:
    snapshot_ids: tuple[int, ...]  # to remove from the metadata, oldest last
    floor: int  # the oldest snapshot kept


def history_complete(oldest: OldestSnapshot | None, floor: int | None) -> bool:
    """Whether a walk back to `oldest` (None: the table has no snapshot) saw every chain any commit of the table
    named: it reached the table's first snapshot, or the floor the mirror's expiry left. The first is the one with
    sequence number 1 (format 2), not merely one without a parent: PyIceberg's expiry clears the parent of the
    oldest snapshot it keeps."""
    if oldest is None or oldest.snapshot_id == floor:
        return True
    if oldest.sequence_number:  # format 2: numbered from 1
        return oldest.sequence_number == 1
    return oldest.parent_id is None  # format 1: no numbers


def expiry(ancestry_newest_first: Sequence[SnapshotFacts], keep_after_ms: int) -> Expiry | None:
    """The snapshots of a table's (complete) ancestry to expire: the oldest ones, older than `keep_after_ms`, past
    every chain's newest naming snapshot. None: nothing to expire."""
    named: set[str] = set()
    oldest_needed = 0
    for index, snapshot in enumerate(ancestry_newest_first):
        if snapshot.timestamp_ms >= keep_after_ms or not snapshot.chains <= named:
            oldest_needed = index
        named |= snapshot.chains
    expired = tuple(snapshot.snapshot_id for snapshot in ancestry_newest_first[oldest_needed + 1 :])
    if not expired:
        return None
    return Expiry(expired, ancestry_newest_first[oldest_needed].snapshot_id)
