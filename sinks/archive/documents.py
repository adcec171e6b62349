"""Small JSON documents an archive keeps beside its chains (topic metadata, consumer-group positions, its retention):
added whole, never changed, named by the moment they describe; removed only by a prune, once no moment it keeps
needs them (`superseded`).

    <root or prefix>/<directory>/<moment, ms since the epoch, 13 digits>.json

Each is created whole or not at all (filesystem: written under a temporary name, made durable, then linked; S3:
one PUT with `If-None-Match: *`), so a crash never leaves half of one and a reader never sees one half-written; a
second write of the same moment is a no-op. Directories start with `_` (`<dest-name>/_topic`, `_groups/<cluster>`):
listings of chains, Spark, Hive and Athena skip them.

Cost: reading a directory is one listing and one read per document; adding is one write, removing one delete.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol, TypeVar

import msgspec

_MS_DIGITS = 13
D = TypeVar("D", bound=msgspec.Struct)


def encode(document: msgspec.Struct) -> bytes:
    """Indented JSON, one document per file: what `jq` and people read."""
    return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"


def decode(data: bytes, kind: type[D], known_format: int) -> D | None:
    """None for anything that is not a document of `kind` in `known_format` (a later format, a file put there by
    hand): readers skip those."""
    try:
        found = msgspec.json.decode(data, type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return found if getattr(found, "format", None) == known_format else None


def document_name(moment_ms: int) -> str:
    return f"{moment_ms:0{_MS_DIGITS}d}.json"


def is_document(name: str) -> bool:
    stem = name.removesuffix(".json")
    return name.endswith(".json") and len(stem) == _MS_DIGITS and stem.isdigit()


def moment_of(name: str) -> int:
    """A document's moment (ms since the epoch): its name says it."""
    return int(name.removesuffix(".json"))


def moment_text(ms: int) -> str:
    """The same moment for people: RFC 3339, UTC, milliseconds."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class ArchiveDocuments(Protocol):
    """Where an archive keeps its documents (a directory, an S3 prefix)."""

    def location(self, directory: str) -> str: ...

    async def names(self, directory: str) -> list[str]:
        """The documents of `directory`, oldest first."""
        ...

    async def listing(self, directory: str) -> list[str]:
        """Every file of `directory` (documents named otherwise too: `sinks.schemas.archived`), by name, sorted;
        never a temporary one."""
        ...

    async def read(self, directory: str, name: str) -> bytes: ...

    async def subdirectories(self, directory: str) -> list[str]:
        """The directories right below `directory`, by name, sorted."""
        ...

    async def add(self, directory: str, name: str, data: bytes) -> None:
        """Create the document unless one of that name exists (it says the same: the same moment)."""
        ...

    async def remove(self, directory: str, name: str) -> None:
        """Delete a document (a prune's); gone already is done."""
        ...

    async def close(self) -> None: ...


def superseded(names: list[str], kept_since_ms: int) -> list[str]:
    """The documents (names oldest first) no moment at or after `kept_since_ms` reads: those older than the newest
    one at or before it (which stays: it describes `kept_since_ms` itself). Pure; O(n)."""
    before = [name for name in names if is_document(name) and moment_of(name) <= kept_since_ms]
    return before[:-1]


async def read_all(store: ArchiveDocuments, directory: str, kind: type[D], known_format: int) -> list[D]:
    """Every readable document of `directory`, oldest first."""
    found = [decode(await store.read(directory, name), kind, known_format) for name in await store.names(directory)]
    return [document for document in found if document is not None]


async def read_newest(
    store: ArchiveDocuments, directory: str, kind: type[D], known_format: int, at_most_ms: int | None = None
) -> D | None:
    """The newest readable document of `directory` (of a moment at or before `at_most_ms`): one read in the usual
    case."""
    names = await store.names(directory)
    if at_most_ms is not None:
        names = [name for name in names if moment_of(name) <= at_most_ms]
    for name in reversed(names):
        found = decode(await store.read(directory, name), kind, known_format)
        if found is not None:
            return found
    return None
