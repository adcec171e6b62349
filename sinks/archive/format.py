"""Which layout an archive is written in, so that an archive outlives releases: one small document at its root.

    <root or prefix>/_mirror-v3/format.json    {"format": 1, "written-by": "0.1.0"}

Format 1 is the layout of today (chains of `<from>-<to>.parquet`, a blob inside another's range redundant, the
documents of `sinks.archive`). An archive without the document is format 1 too: the releases before it wrote that
layout, so whatever they wrote stays readable. The first `run` of a release writes the document (create-if-absent,
never changed); every reader (`run`, `restore`, `verify`, `compact`, `prune`, `table-sync`) reads it first, and one
that meets a format newer than it knows refuses in one line instead of misreading the archive. A release that
changes the layout raises FORMAT and keeps reading the older ones.

Cost: one listing (and one read when present) per command, one write per archive's life.
"""

from __future__ import annotations

import msgspec

from core.version import installed_version
from sinks.archive import documents as archive_documents
from sinks.archive.documents import ArchiveDocuments
from sinks.base import DestinationError

FORMAT = 1
FORMAT_DIRECTORY = "_mirror-v3"
FORMAT_NAME = "format.json"


class ArchiveFormat(msgspec.Struct, frozen=True, rename="kebab", forbid_unknown_fields=False):
    format: int
    written_by: str = ""


class NewerArchiveFormatError(DestinationError):
    """The archive at `where` is in `found` format (written by `written_by`), newer than this release's `known`."""

    headline = "archive format unknown"

    def __init__(self, where: str, found: int, written_by: str, known: int) -> None:
        self.where, self.found, self.written_by, self.known = where, found, written_by, known
        by = f" (written by mirror-v3 {written_by})" if written_by else ""
        super().__init__(
            f"the archive at {where} is in format {found}{by}; this release reads formats up to {known}: upgrade "
            "mirror-v3 to read or write it"
        )


class UnreadableArchiveFormatError(DestinationError):
    """The archive's format document at `location` is not one any release wrote."""

    def __init__(self, location: str) -> None:
        self.location = location
        super().__init__(
            f"{location}: not an archive format document; restore it, or remove it if the archive is format 1 "
            "(every archive written before the document existed is)"
        )


async def check_format(store: ArchiveDocuments, where: str, writes: bool) -> int:
    """The archive's format (1 when it has no document); raises NewerArchiveFormatError for a format this release
    does not know. `writes`: a writer records format 1 where no document is yet."""
    if FORMAT_NAME in await store.listing(FORMAT_DIRECTORY):
        data = await store.read(FORMAT_DIRECTORY, FORMAT_NAME)
        try:
            found = msgspec.json.decode(data, type=ArchiveFormat)
        except (msgspec.ValidationError, msgspec.DecodeError):
            raise UnreadableArchiveFormatError(f"{store.location(FORMAT_DIRECTORY)}/{FORMAT_NAME}") from None
        if found.format > FORMAT:
            raise NewerArchiveFormatError(where, found.format, found.written_by, FORMAT)
        return found.format
    if writes:
        written = ArchiveFormat(FORMAT, installed_version("mirror-v3") or "")
        await store.add(FORMAT_DIRECTORY, FORMAT_NAME, archive_documents.encode(written))
    return FORMAT
