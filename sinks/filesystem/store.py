"""Filesystem BlobStore: one directory per partition, atomic no-clobber commits.

A Spark task stages a blob as a temporary file in the partition directory and fsyncs it
(`FilesystemStaging`). The driver commits it: link the temporary to its final name (fails if the name
exists, so a second writer cannot silently replace a blob), fsync the directory, remove the temporary
name (one left by a crash is cleaned on the next start). Where hard links are not supported the commit
falls back to rename(2) after an existence check. A link or directory fsync that fails leaves the
outcome unknown: the retry then accepts the name if it is that very file.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiofiles
import aiofiles.os
import anyio.to_thread
import pyarrow as pa

from core.thread_batches import ThreadBatches
from sinks.blob.chain import BLOB_SUFFIX, BlobExistsError, ListedBlob, is_temp_name, temp_name
from sinks.blob.staging import BlobFormat, StagedBlob
from sinks.filesystem.durable_dirs import fsync_directory, make_durable_dirs

_LINK_UNSUPPORTED = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK}
# Bookkeeping beside the blobs: the chain's lock and the name of its last blob (see _commit_locked).
LOCK_NAME = ".chain.lock"
TAIL_NAME = ".chain.tail"
_TAIL_WIDTH = 256  # bytes: longer than any file name, shorter than a disk sector


def is_bookkeeping(name: str) -> bool:
    return name.startswith(".chain.")


class FilesystemStore:
    # Creates are no-clobber (link(2)); a listing per flush would grow with the directory.
    checks_for_foreign_blobs = False

    def __init__(self, directory: Path, commits: ThreadBatches | None = None) -> None:
        """`commits`: shared by the chains of a process, so the commits made together take one worker thread's
        trip (`core.thread_batches`); without, the store's own (its commits come one at a time)."""
        self._dir = directory
        self._commits = commits or ThreadBatches()
        self._dir_ready = False
        self._unsure: set[str] = set()

    @property
    def directory(self) -> Path:
        return self._dir

    def location(self, name: str) -> str:
        return str(self._dir / name)

    async def _entries(self) -> list[str]:
        try:
            return [n for n in await aiofiles.os.listdir(self._dir) if not is_bookkeeping(n)]
        except FileNotFoundError:
            return []

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        names = sorted(n for n in await self._entries() if not is_temp_name(n))
        if start_after is not None:
            names = names[bisect.bisect_right(names, start_after) :]
        return names[:max_keys], len(names) > max_keys

    async def list_details(self, start_after: str | None, max_keys: int) -> tuple[list[ListedBlob], bool]:
        names, more = await self.list_page(start_after, max_keys)
        return await anyio.to_thread.run_sync(_stat_all, self._dir, names), more

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

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        """Publish a staged temporary file as `name` unless the name is taken or the chain no longer ends
        at `after` (BlobExistsError: another writer). The check and the link happen under the chain's
        lock, so of two writers that both believe the chain ends at `after`, exactly one appends."""
        final = self._dir / name
        temp = self._dir / staged.ref
        unsure = name in self._unsure
        try:
            await self._commits.run(_commit_then_tidy, self._dir, temp, final, after, unsure, staged.size)
        except OSError:
            # The link or the directory fsync failed: the blob may be visible already.
            self._unsure.add(name)
            raise
        self._unsure.discard(name)
        return staged.size

    async def commit_merged(self, name: str, staged: StagedBlob) -> bool:
        """A hard link, not under the chain's lock: the chain's end is neither read nor moved."""
        published = await anyio.to_thread.run_sync(
            _publish_merged, self._dir, self._dir / staged.ref, name, staged.size
        )
        if not published:
            await self.remove(staged.ref)
        return published

    async def discard_staged(self, staged: StagedBlob) -> None:
        await self.remove(staged.ref)

    async def forget_before(self, first_kept: int) -> int:
        return 0  # a directory keeps nothing about a blob but the blob

    async def interrupted_commit(self, after: str | None) -> str | None:
        return None  # the tail check and the link happen under one lock: nothing is claimed in between

    def staging(self, blob_format: BlobFormat) -> FilesystemStaging:
        return FilesystemStaging(str(self._dir), blob_format)

    async def close(self) -> None:
        return None

    async def remove(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            await aiofiles.os.remove(self._dir / name)

    async def remove_redundant(self, names: Sequence[str]) -> None:
        def removed() -> None:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(self._dir / name)

        await anyio.to_thread.run_sync(removed)


def _stat_all(directory: Path, names: list[str]) -> list[ListedBlob]:
    listed = []
    for name in names:
        with contextlib.suppress(FileNotFoundError):  # removed since the listing: not there
            found = os.stat(directory / name)
            listed.append(ListedBlob(name, found.st_size, found.st_mtime))
    return listed


def _publish_merged(directory: Path, temp: Path, name: str, size: int) -> bool:
    final = directory / name
    try:
        _publish(temp, final)
    except BlobExistsError:
        if not _is_staged_file(final, temp, size):  # (ours: an earlier attempt linked it)
            return False
    fsync_directory(directory)
    with contextlib.suppress(FileNotFoundError):
        os.remove(temp)
    return True


def _commit_then_tidy(directory: Path, temp: Path, final: Path, after: str | None, unsure: bool, size: int) -> None:
    """`_commit_locked`, then the staged name removed (the blob keeps its own link), in one trip to a worker thread:
    at an estate's hundreds of commits a second, a second trip for the removal cost more of the event loop's CPU
    than the removal itself."""
    _commit_locked(directory, temp, final, after, unsure, size)
    with contextlib.suppress(FileNotFoundError):
        os.remove(temp)


def _commit_locked(directory: Path, temp: Path, final: Path, after: str | None, unsure: bool, size: int) -> None:
    """Under the chain's lock: check that the chain still ends at `after`, link, fsync, record the new end.

    The lock is a POSIX record lock (fcntl.lockf) on LOCK_NAME: the kernel drops it when its process dies,
    and NFSv4 honours it across machines. The chain's end is read from TAIL_NAME, which every commit
    rewrites under the lock, durably, before it links; it is only a shortcut: when it disagrees with `after` (a
    crash between the two steps, a chain written before it existed), the directory listing decides.

    Cost: about 0.25 ms of CPU per commit here (the record written in place and fdatasync'd, the link, the
    directory fsync); writing the record as a new file renamed over the old one cost 0.95 ms, most of it the
    data flush ext4 forces on a rename over an existing file (measured, docs/benchmarks.md).
    """
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
        moved = _recorded_tail(directory) != after and _listed_tail(directory) != after
        if moved and not (unsure and _is_staged_file(final, temp, size)):  # (unless our own attempt moved it)
            raise BlobExistsError(
                f"{directory}: the chain no longer ends at {after or 'nothing'}: another writer appends to it"
            )
        # Recorded before the link: the record is never behind the chain, so a record that equals `after`
        # proves nothing was appended after it (a crash before the link leaves it ahead: the listing decides).
        _record_tail(directory, final.name)
        try:
            _publish(temp, final)
        except BlobExistsError:
            # After a failed attempt the name may hold this very file: linked (same inode as the
            # temporary), or renamed where links are unsupported (the temporary is gone, the size
            # matches). On a first attempt a taken name always means another writer.
            if not (unsure and _is_staged_file(final, temp, size)):
                raise
        fsync_directory(directory)
    finally:
        os.close(fd)  # releases the lock


def _recorded_tail(directory: Path) -> str | None:
    try:
        return (directory / TAIL_NAME).read_text(encoding="ascii").strip() or None
    except FileNotFoundError:
        return None


def _listed_tail(directory: Path) -> str | None:
    """The chain's last blob by the listing: names sort by first offset (zero-padded)."""
    blobs = [n for n in os.listdir(directory) if n.endswith(BLOB_SUFFIX) and not is_temp_name(n) and n[0] != "."]
    return max(blobs) if blobs else None


def _record_tail(directory: Path, name: str) -> None:
    """Overwrite the record in place, padded to a fixed width (so it never needs truncating), and make it durable
    before the caller links: a record the disk lost could fall behind the chain, and a record that equals a
    writer's `after` must prove nothing was appended after it. One write inside the first sector of the file is
    never torn by a crash; were it, the garbage would equal no `after`, and the listing would decide."""
    record = name.encode("ascii").ljust(_TAIL_WIDTH)
    fd = os.open(directory / TAIL_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, record, 0)
        os.fdatasync(fd)
    finally:
        os.close(fd)


def _publish(temp: Path, final: Path) -> None:
    try:
        os.link(temp, final)
        return
    except FileExistsError:
        raise BlobExistsError(f"{final} already exists: another writer owns this chain") from None
    except OSError as exc:
        if exc.errno not in _LINK_UNSUPPORTED:
            raise
    if final.exists():
        raise BlobExistsError(f"{final} already exists: another writer owns this chain")
    os.rename(temp, final)


def _is_staged_file(final: Path, temp: Path, size: int) -> bool:
    try:
        published = final.stat()
    except OSError:
        return False
    try:
        return published.st_ino == temp.stat().st_ino
    except FileNotFoundError:
        return published.st_size == size  # renamed: the temporary is the published file now
    except OSError:
        return False


@dataclass(frozen=True)
class FilesystemStaging:
    """Stages a partition's blobs as temporary files in its directory (executor side, blocking I/O).

    The executors must see the same path as the driver: one machine, or a shared volume.
    """

    directory: str
    blob_format: BlobFormat = field(default_factory=BlobFormat)

    @property
    def stages_at_once(self) -> int:
        return 1  # compressing Parquet and writing it keeps a core busy: the task's one core is used already

    def open(self, first: int) -> FilesystemBlobOutput:
        directory = Path(self.directory)
        if self.directory not in _durable_dirs:
            make_durable_dirs(directory)
            _durable_dirs.add(self.directory)
        path = directory / temp_name(f"{first:020d}-staged{BLOB_SUFFIX}", uuid.uuid4().hex)
        return FilesystemBlobOutput(path)


# Directories this worker process has created and made durable (a task runs many blobs).
_durable_dirs: set[str] = set()


class FilesystemBlobOutput:
    def __init__(self, path: Path) -> None:
        self._path = path
        self.file = pa.OSFile(str(path), "wb")

    def finish(
        self, first: int, last: int, records: int, record_bytes: int, written_ms: int | None = None
    ) -> StagedBlob:
        if not self.file.closed:
            self.file.close()
        fd = os.open(self._path, os.O_RDONLY)
        try:
            if written_ms is not None:  # the blob's time is its modification time (`modified_at`)
                os.utime(fd, ns=(written_ms * 1_000_000,) * 2)
            os.fsync(fd)  # the bytes are on disk before the driver may link them into the chain
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        return StagedBlob(
            first=first, last=last, records=records, record_bytes=record_bytes, size=size, ref=self._path.name
        )

    def abandon(self) -> None:
        if not self.file.closed:
            self.file.close()
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
