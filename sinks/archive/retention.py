"""How far back an archive keeps its past, once a prune removed the oldest of it: one document at its root.

    <root or prefix>/_retention/<pruned at, ms since the epoch, 13 digits>.json

`kept-since-ms` is the cut of the prune: every blob committed before it may be gone (each chain's oldest contiguous
prefix of such blobs, never its last blob), and so may every document no moment since then reads. A moment before
it is no longer served (`restore --as-of` refuses it, naming `kept-since`); a moment at or after it is served with
what the archive kept: the records archived by then, less those committed before the cut. A prune adds its document
before it removes anything (a prune killed half-way refuses what it was about to remove), with the newest cut of
every prune so far, and removes the older documents afterwards. Added whole (`sinks.archive.documents`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from sinks.archive import documents as archive_documents
from sinks.archive.documents import ArchiveDocuments, document_name, moment_text, superseded
from sinks.archive.group_positions import GROUPS_DIRECTORY
from sinks.archive.topic_metadata import TOPIC_DIRECTORY

RETENTION_DIRECTORY = "_retention"
FORMAT = 1


class ArchiveRetention(msgspec.Struct, frozen=True, rename="kebab", forbid_unknown_fields=False):
    kept_since: str  # RFC 3339 UTC
    kept_since_ms: int  # the cut: what was committed before it may be gone
    pruned_at: str
    pruned_at_ms: int
    format: int = FORMAT

    @classmethod
    def of(cls, kept_since_ms: int, pruned_at_ms: int) -> ArchiveRetention:
        return cls(moment_text(kept_since_ms), kept_since_ms, moment_text(pruned_at_ms), pruned_at_ms)


async def retention(store: ArchiveDocuments) -> ArchiveRetention | None:
    """The archive's newest retention document; None: never pruned."""
    return await archive_documents.read_newest(store, RETENTION_DIRECTORY, ArchiveRetention, FORMAT)


async def record(store: ArchiveDocuments, kept: ArchiveRetention) -> None:
    await store.add(RETENTION_DIRECTORY, document_name(kept.pruned_at_ms), archive_documents.encode(kept))


async def remove_older(store: ArchiveDocuments, kept: ArchiveRetention) -> list[str]:
    """Remove the retention documents older than `kept`'s (each says less than it); returns their names."""
    older = [name for name in await store.names(RETENTION_DIRECTORY) if name < document_name(kept.pruned_at_ms)]
    for name in older:
        await store.remove(RETENTION_DIRECTORY, name)
    return older


@dataclass
class DirectoryPrune:
    """The documents of one directory (`<name>/_topic`, `_groups/<cluster>`) that no kept moment reads."""

    directory: str
    removed: list[str]
    kept: int
    failed: str | None = None


async def documents_to_prune(
    store: ArchiveDocuments, destination_names: Iterable[str], kept_since_ms: int
) -> list[DirectoryPrune]:
    """Per directory of the chain names' topic metadata and of every cluster's group positions, the documents older
    than its newest one at or before the cut (`sinks.archive.documents.superseded`). The schemas stay: a kept
    record may carry any of their IDs."""
    directories = [f"{name}/{TOPIC_DIRECTORY}" for name in sorted(set(destination_names))]
    directories += [f"{GROUPS_DIRECTORY}/{cluster}" for cluster in await store.subdirectories(GROUPS_DIRECTORY)]
    found = []
    for directory in directories:
        present = await store.names(directory)
        gone = superseded(present, kept_since_ms)
        if gone:
            found.append(DirectoryPrune(directory, gone, len(present) - len(gone)))
    return found


async def prune_documents(store: ArchiveDocuments, directory: DirectoryPrune) -> None:
    for name in directory.removed:
        await store.remove(directory.directory, name)
