"""Small JSON documents an archive keeps beside its chains (topic metadata, consumer-group positions): added
whole, never changed or removed, named by the moment they describe.

    <root or prefix>/<directory>/<moment, ms since the epoch, 13 digits>.json

Each is created whole or not at all (filesystem: written under a temporary name, made durable, then linked; S3:
one PUT with `If-None-Match: *`), so a crash never leaves half of one and a reader never sees one half-written; a
second write of the same moment is a no-op. Directories start with `_` (`<dest-name>/_topic`, `_groups/<cluster>`):
listings of chains, Spark, Hive and Athena skip them.

Cost: reading a directory is one listing and one read per document; adding is one write.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio.to_thread
import msgspec

from sinks.durable_dirs import fsync_directory, make_durable_dirs
from sinks.s3 import ConnectionUser, S3Connection
from sinks.s3_errors import PreconditionFailed

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
        """Every file of `directory` (documents named otherwise too: `sinks.archived_schemas`), by name, sorted;
        never a temporary one."""
        ...

    async def read(self, directory: str, name: str) -> bytes: ...

    async def subdirectories(self, directory: str) -> list[str]:
        """The directories right below `directory`, by name, sorted."""
        ...

    async def add(self, directory: str, name: str, data: bytes) -> None:
        """Create the document unless one of that name exists (it says the same: the same moment)."""
        ...

    async def close(self) -> None: ...


class FilesystemDocuments:
    def __init__(self, root: str) -> None:
        self._root = Path(root).expanduser().resolve()

    def location(self, directory: str) -> str:
        return str(self._root / directory)

    async def names(self, directory: str) -> list[str]:
        return [name for name in await self.listing(directory) if is_document(name)]

    async def listing(self, directory: str) -> list[str]:
        def listed() -> list[str]:
            try:
                with os.scandir(self._root / directory) as entries:
                    return sorted(e.name for e in entries if not e.name.startswith(".") and e.is_file())
            except FileNotFoundError:
                return []

        return await anyio.to_thread.run_sync(listed)

    async def read(self, directory: str, name: str) -> bytes:
        return await anyio.to_thread.run_sync((self._root / directory / name).read_bytes)

    async def subdirectories(self, directory: str) -> list[str]:
        def listed() -> list[str]:
            try:
                return sorted(entry.name for entry in (self._root / directory).iterdir() if entry.is_dir())
            except FileNotFoundError:
                return []

        return await anyio.to_thread.run_sync(listed)

    async def add(self, directory: str, name: str, data: bytes) -> None:
        await anyio.to_thread.run_sync(_add_durably, self._root / directory, name, data)

    async def close(self) -> None:
        return None


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


def _add_durably(directory: Path, name: str, data: bytes) -> None:
    make_durable_dirs(directory)
    temp = directory / f".{name}.tmp-{uuid.uuid4().hex}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        with contextlib.suppress(FileExistsError):
            os.link(temp, directory / name)
    finally:
        os.remove(temp)
    fsync_directory(directory)


class S3Documents(ConnectionUser):
    def __init__(self, connection: S3Connection, prefix: str | None) -> None:
        super().__init__(connection)
        self._root = f"{prefix.strip('/')}/" if prefix else ""

    def _prefix(self, directory: str) -> str:
        return f"{self._root}{directory}/"

    def location(self, directory: str) -> str:
        return f"s3://{self._bucket}/{self._prefix(directory)}"

    async def _pages(self, directory: str, delimiter: bool) -> list[Any]:
        """Every page of the listing under `directory` (with `delimiter`: one level, as CommonPrefixes)."""
        s3, prefix = await self._s3(), self._prefix(directory)
        pages: list[Any] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": 1000}
            if delimiter:
                params["Delimiter"] = "/"
            if token is not None:
                params["ContinuationToken"] = token
            page = await self._connection.call(f"list {self.location(directory)}", _listing(s3, params))
            pages.append(page)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or token is None:
                return pages

    async def names(self, directory: str) -> list[str]:
        return [name for name in await self.listing(directory) if is_document(name)]

    async def listing(self, directory: str) -> list[str]:
        prefix = self._prefix(directory)
        pages = await self._pages(directory, delimiter=True)  # the files right in it, not those below
        return sorted(entry["Key"][len(prefix) :] for page in pages for entry in page.get("Contents", []))

    async def subdirectories(self, directory: str) -> list[str]:
        prefix = self._prefix(directory)
        pages = await self._pages(directory, delimiter=True)
        return sorted(e["Prefix"][len(prefix) :].rstrip("/") for page in pages for e in page.get("CommonPrefixes", []))

    async def read(self, directory: str, name: str) -> bytes:
        s3, key = await self._s3(), self._prefix(directory) + name

        async def read() -> bytes:
            response = await s3.get_object(Bucket=self._bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read())

        return await self._connection.call(f"read s3://{self._bucket}/{key}", read)

    async def add(self, directory: str, name: str, data: bytes) -> None:
        s3, key = await self._s3(), self._prefix(directory) + name
        options = self._connection.settings.short_lived_object_options()  # SSE, no cold storage class: read often
        with contextlib.suppress(PreconditionFailed):  # that moment's document exists: it says the same
            await self._connection.call(
                f"write s3://{self._bucket}/{key}",
                lambda: s3.put_object(Bucket=self._bucket, Key=key, Body=data, IfNoneMatch="*", **options),
            )


def _listing(s3: Any, params: dict[str, Any]) -> Any:
    return lambda: s3.list_objects_v2(**params)
