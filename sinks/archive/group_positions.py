"""Consumer-group positions in a blob archive: the committed offsets of selected source groups on the archived
partitions, as seen at a moment, next to how far the archive reached then. A restore can put consumers back where
they were (`supervisor.group_archiver` writes them, `destination.archive-groups` selects the groups).

    <root or prefix>/_groups/<source cluster>/<seen at, ms, 13 digits>.json

One document per source cluster and capture that found something changed: `groups` maps each group to archived
names (the mirrors' destination names) and partitions to its committed offset; `archived` maps the same partitions
to the offset the archive was durable up to (the mirror's verified position) when the positions were read, so a
position the archive had not reached yet can be told apart. Documents are added whole and never changed
(`sinks.archive.documents`); `jq . _groups/<cluster>/*.json` reads them.
"""

from __future__ import annotations

import re

import msgspec

from sinks.archive import documents as archive_documents
from sinks.archive.documents import ArchiveDocuments, document_name

GROUPS_DIRECTORY = "_groups"
FORMAT = 1

Offsets = dict[str, dict[str, int]]  # archived name → partition (a string: a JSON key) → offset


class ArchivedPositions(msgspec.Struct, frozen=True, rename="kebab", forbid_unknown_fields=False):
    source_cluster: str
    seen_at: str  # RFC 3339 UTC
    seen_at_ms: int
    groups: dict[str, Offsets]  # group → its committed offsets on the archived partitions
    archived: Offsets  # how far the archive was durable on those partitions at the moment
    format: int = FORMAT

    def same_positions(self, other: ArchivedPositions) -> bool:
        """Whether `other` holds the same positions (whenever it was seen, however far the archive was)."""
        return (self.source_cluster, self.groups) == (other.source_cluster, other.groups)


def cluster_directory(cluster: str) -> str:
    """`_groups/<cluster>`, the name made safe for a path or key (bootstrap lists hold commas and colons)."""
    return f"{GROUPS_DIRECTORY}/{re.sub(r'[^A-Za-z0-9._-]', '_', cluster)}"


def encode(positions: ArchivedPositions) -> bytes:
    return archive_documents.encode(positions)


def decode(data: bytes) -> ArchivedPositions | None:
    return archive_documents.decode(data, ArchivedPositions, FORMAT)


async def history(store: ArchiveDocuments, cluster: str) -> list[ArchivedPositions]:
    return await archive_documents.read_all(store, cluster_directory(cluster), ArchivedPositions, FORMAT)


async def newest(store: ArchiveDocuments, cluster: str) -> ArchivedPositions | None:
    return await archive_documents.read_newest(store, cluster_directory(cluster), ArchivedPositions, FORMAT)


async def newest_of_every_cluster(store: ArchiveDocuments, as_of_ms: int | None = None) -> list[ArchivedPositions]:
    """The newest document of each source cluster the archive keeps positions of (as of `as_of_ms`: the newest
    seen at or before it; a cluster with none that old is left out)."""
    found = []
    for directory in await store.subdirectories(GROUPS_DIRECTORY):
        positions = await archive_documents.read_newest(
            store, f"{GROUPS_DIRECTORY}/{directory}", ArchivedPositions, FORMAT, as_of_ms
        )
        if positions is not None:
            found.append(positions)
    return found


async def add(store: ArchiveDocuments, positions: ArchivedPositions) -> None:
    await store.add(cluster_directory(positions.source_cluster), document_name(positions.seen_at_ms), encode(positions))
