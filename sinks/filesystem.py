"""Filesystem BlobStore: one directory per partition, atomic no-clobber commits.

Commit = write a temporary file in the same directory, fsync it, link it to its final name
(fails if the name exists, so a second writer cannot silently replace a blob), fsync the directory,
remove the temporary name (one left by a crash is cleaned on the next start). Where hard links are
not supported the commit falls back to rename(2) after an existence check. A link or directory fsync
that fails leaves the outcome unknown: the retry then accepts the name if it holds exactly its bytes.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import uuid
from pathlib import Path

import aiofiles
import aiofiles.os
import anyio.to_thread

from config.model import FilesystemDestination
from sinks.blob_chain import BlobExistsError, is_temp_name, temp_name
from sinks.blob_sink import BlobSink

_LINK_UNSUPPORTED = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}


class FilesystemStore:
    # Creates are no-clobber (link(2)); a listing per flush would grow with the directory.
    checks_for_foreign_blobs = False

    def __init__(self, directory: Path) -> None:
        self._dir = directory
        self._dir_ready = False
        self._unsure: set[str] = set()

    @property
    def directory(self) -> Path:
        return self._dir

    def location(self, name: str) -> str:
        return str(self._dir / name)

    async def _entries(self) -> list[str]:
        try:
            return list(await aiofiles.os.listdir(self._dir))
        except FileNotFoundError:
            return []

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        names = sorted(n for n in await self._entries() if not is_temp_name(n))
        if start_after is not None:
            names = names[bisect.bisect_right(names, start_after) :]
        return names[:max_keys], len(names) > max_keys

    async def modified_at(self, name: str) -> float | None:
        try:
            return float((await aiofiles.os.stat(self._dir / name)).st_mtime)
        except FileNotFoundError:
            return None

    async def clean_leftovers(self) -> list[str]:
        removed = [n for n in await self._entries() if is_temp_name(n)]
        for name in removed:
            await self.remove(name)
        return removed

    async def put_if_absent(self, name: str, data: memoryview) -> int:
        if not self._dir_ready:
            await anyio.to_thread.run_sync(_make_durable_dirs, self._dir)
            self._dir_ready = True
        final = self._dir / name
        temp = self._dir / temp_name(name, uuid.uuid4().hex)
        try:
            async with aiofiles.open(temp, "wb") as handle:
                await handle.write(data)
                await handle.flush()
                await anyio.to_thread.run_sync(os.fsync, handle.fileno())
            try:
                await _publish(temp, final)
                await anyio.to_thread.run_sync(_fsync_directory, self._dir)
            except BlobExistsError:
                # After a failed attempt, an identical blob is that attempt's (its success went
                # unreported); on a first attempt a taken name always means another writer.
                if name in self._unsure and await anyio.to_thread.run_sync(_same_content, final, data):
                    self._unsure.discard(name)
                    await anyio.to_thread.run_sync(_fsync_directory, self._dir)
                    return len(data)
                raise
            except OSError:
                # The link or the directory fsync failed: the blob may be visible already.
                self._unsure.add(name)
                raise
        finally:
            with contextlib.suppress(FileNotFoundError):
                await aiofiles.os.remove(temp)
        return len(data)

    async def close(self) -> None:
        return None

    async def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self._dir / name)


async def _publish(temp: Path, final: Path) -> None:
    try:
        await aiofiles.os.link(temp, final)
        return
    except FileExistsError:
        raise BlobExistsError(f"{final} already exists: another writer owns this chain") from None
    except OSError as exc:
        if exc.errno not in _LINK_UNSUPPORTED:
            raise
    if await aiofiles.os.path.exists(final):
        raise BlobExistsError(f"{final} already exists: another writer owns this chain")
    await aiofiles.os.rename(temp, final)


def _same_content(path: Path, data: memoryview) -> bool:
    try:
        return path.stat().st_size == len(data) and path.read_bytes() == data
    except OSError:
        return False


def _make_durable_dirs(directory: Path) -> None:
    """Create the partition directory and fsync the parent of every level created, so the first
    blob's directory entry survives a crash too."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def filesystem_sink(destination: FilesystemDestination, destination_name: str, partition: int) -> BlobSink:
    directory = Path(destination.root).expanduser().resolve() / destination_name / str(partition)
    return BlobSink(
        FilesystemStore(directory),
        description=f"filesystem:{directory}",
        compression=destination.compression,
        compression_level=destination.compression_level,
    )
