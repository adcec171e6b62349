"""What an archive keeps of each archived topic beyond its records: partition count, replication factor, topic ID
and the configs set on the topic (retention, compaction, message size, timestamp type...), as seen at a moment.

Rebuilding a lost cluster from the archive needs them (`restore` creates missing topics from them), and a topic's
history of them answers "as of when". Each time the mirror sees a topic differ from the archive's newest record
(`supervisor.topic_archiver`), it adds one JSON document beside the topic's chains:

    <root or prefix>/<destination name>/_topic/<seen at, ms since the epoch, 13 digits>.json

Documents are added whole and never changed (`sinks.archive.documents`). Readable with any JSON tool
(`jq . <dest-name>/_topic/*.json`).

Cost: a document of a few hundred bytes per topic per change; reading a topic's history is one listing and one read
per document.
"""

from __future__ import annotations

import msgspec
import msgspec.structs

from sinks.archive import documents as archive_documents
from sinks.archive.documents import ArchiveDocuments, document_name

TOPIC_DIRECTORY = "_topic"
FORMAT = 1  # of the document; a reader skips documents of a format it does not know


class ArchivedTopic(msgspec.Struct, frozen=True, rename="kebab", forbid_unknown_fields=False):
    """One document: the source topic as seen at `seen_at_ms`."""

    source_cluster: str
    source_topic: str
    seen_at: str  # the same moment, RFC 3339 UTC, for people
    seen_at_ms: int
    partitions: int
    replication_factor: int
    topic_id: str
    cleanup_policy: str
    configs: dict[str, str]  # set on the topic itself; broker defaults are not the topic's
    format: int = FORMAT

    def same_topic(self, other: ArchivedTopic) -> bool:
        """Whether `other` says the same of the topic (whenever it was seen)."""
        return msgspec.structs.replace(other, seen_at=self.seen_at, seen_at_ms=self.seen_at_ms) == self


def encode(topic: ArchivedTopic) -> bytes:
    return archive_documents.encode(topic)


def decode(data: bytes) -> ArchivedTopic | None:
    return archive_documents.decode(data, ArchivedTopic, FORMAT)


def topic_directory(destination_name: str) -> str:
    return f"{destination_name}/{TOPIC_DIRECTORY}"


async def history(store: ArchiveDocuments, destination_name: str) -> list[ArchivedTopic]:
    """Every document of the archived topic, oldest first (a document this version cannot read is skipped)."""
    return await archive_documents.read_all(store, topic_directory(destination_name), ArchivedTopic, FORMAT)


async def newest(store: ArchiveDocuments, destination_name: str) -> ArchivedTopic | None:
    return await archive_documents.read_newest(store, topic_directory(destination_name), ArchivedTopic, FORMAT)


async def as_of(store: ArchiveDocuments, destination_name: str, moment_ms: int | None) -> ArchivedTopic | None:
    """The topic as last seen at or before `moment_ms` (None: the newest); when it was first seen after that
    moment, its oldest document (the archive knows nothing older of it)."""
    directory = topic_directory(destination_name)
    found = await archive_documents.read_newest(store, directory, ArchivedTopic, FORMAT, moment_ms)
    if found is None and moment_ms is not None:
        oldest = await history(store, destination_name)
        return oldest[0] if oldest else None
    return found


async def add(store: ArchiveDocuments, destination_name: str, topic: ArchivedTopic) -> None:
    await store.add(topic_directory(destination_name), document_name(topic.seen_at_ms), encode(topic))


def location(store: ArchiveDocuments, destination_name: str) -> str:
    return store.location(topic_directory(destination_name))
