"""A filesystem archive's documents (`sinks.archive.documents`): files under its root, each written under a
temporary name, made durable, then linked to its own (so a second write of the same moment is a no-op)."""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path

import anyio.to_thread

from sinks.archive.documents import is_document
from sinks.filesystem.durable_dirs import fsync_directory, make_durable_dirs


class FilesystemDocuments:
    def __init__(self, root: Path) -> None:
        """`root`: the archive's, resolved."""
        self._root = root

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

    async def remove(self, directory: str, name: str) -> None:
        def removed() -> None:
            with contextlib.suppress(FileNotFoundError):
                os.remove(self._root / directory / name)
            fsync_directory(self._root / directory)

        await anyio.to_thread.run_sync(removed)

    async def close(self) -> None:
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
