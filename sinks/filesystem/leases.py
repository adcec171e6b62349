"""Leases on a filesystem destination (`sinks.leases`): heartbeats under `<root>/.mirror-v3/holders/`, a lease file
in each chain's directory.

A heartbeat is a small file, `<holder id>.json`, that its process keeps open with a POSIX record lock for as long as
it runs; renewing it sets its modification time. The kernel drops the lock when the process dies, and NFSv4 honours
it across machines, so a free lock on this host proves its holder dead at once; elsewhere, where locks may not be
shared, the modification time decides. A chain's lease is `.chain.lease` in its directory, the holder's record
padded to a fixed width and overwritten in place under the chain's commit lock (`sinks.filesystem.store`), so a
lease is taken by exactly one of two processes and a crash never leaves half of one.

Blocking I/O runs in a worker thread. Cost: a renewal is one utime(2); taking a chain is one read, one locked
read-and-write with an fdatasync, and a look at its holder's heartbeat (one open, stat and lock test per holder).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import anyio.to_thread

from sinks.filesystem.durable_dirs import make_durable_dirs
from sinks.filesystem.store import LOCK_NAME
from sinks.leases import Holder, HolderSightings, LeaseHeldError, Sighting, Taken, is_live, take_each

HOLDERS_DIRECTORY = Path(".mirror-v3") / "holders"
LEASE_NAME = ".chain.lease"
_RECORD_WIDTH = 512  # bytes: more than any holder record, one sector
_FORGET_OTHER_HOSTS_AFTER_S = 7 * 24 * 3600.0  # dead heartbeats of other hosts are swept after a week
_THREADS = threading.Lock()


class FilesystemLeases:
    def __init__(self, root: Path) -> None:
        self._root = root
        self._holders = root / HOLDERS_DIRECTORY
        self._beat_fd: int | None = None

    def location(self, chain: str) -> str:
        return str(self._root / chain / LEASE_NAME)

    def _heartbeat(self, holder: Holder) -> Path:
        return self._holders / f"{holder.id}.json"

    async def beat(self, me: Holder) -> None:
        await anyio.to_thread.run_sync(self._beat, me)

    def _beat(self, me: Holder) -> None:
        if self._beat_fd is not None:
            os.utime(self._beat_fd)
            return
        make_durable_dirs(self._holders)
        _sweep_dead(self._holders, me)
        fd = os.open(self._heartbeat(me), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.pwrite(fd, me.encode(), 0)
            os.fdatasync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._beat_fd = fd

    async def stop_beating(self, me: Holder) -> None:
        await anyio.to_thread.run_sync(self._stop_beating, me)

    def _stop_beating(self, me: Holder) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._heartbeat(me).unlink()
        if self._beat_fd is not None:
            os.close(self._beat_fd)  # releases the lock
            self._beat_fd = None

    async def sight(self, holder: Holder) -> Sighting:
        return await anyio.to_thread.run_sync(_sight, self._heartbeat(holder), holder)

    async def take_many(self, chains: Sequence[str], me: Holder, seen: HolderSightings) -> Taken:
        return await take_each(self.take, chains, me, seen)

    async def take(self, chain: str, me: Holder, seen: HolderSightings) -> None:
        directory = self._root / chain
        while True:
            found = await anyio.to_thread.run_sync(_read_lease, directory)
            if found is not None and found.id != me.id:
                sighting = await seen.of(found)
                if is_live(sighting, me):
                    raise LeaseHeldError(chain, self.location(chain), sighting)
            # Written only if the lease still names what was judged: another taker may have been quicker.
            if await anyio.to_thread.run_sync(_replace_lease, directory, found, me):
                return

    async def close(self) -> None:
        if self._beat_fd is not None:
            os.close(self._beat_fd)
            self._beat_fd = None


def _sight(path: Path, holder: Holder) -> Sighting:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return Sighting(holder, renewed_s_ago=None, locked=False)
    try:
        renewed_s_ago = max(0.0, time.time() - os.fstat(fd).st_mtime)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # EAGAIN or EACCES: a live process holds it
            return Sighting(holder, renewed_s_ago, locked=True)
        return Sighting(holder, renewed_s_ago, locked=False)
    finally:
        os.close(fd)  # drops the test lock, if it was taken


def _sweep_dead(holders: Path, me: Holder) -> None:
    """Remove the heartbeats dead processes left (killed, so they could not remove their own): on this host
    those whose lock is free, from other hosts those not renewed for a week."""
    for path in holders.glob("*.json"):
        with contextlib.suppress(OSError):
            holder = Holder.decode(path.read_bytes())
            if holder is None or holder.id == me.id:
                continue
            seen = _sight(path, holder)
            mine = holder.host == me.host and seen.locked is False
            forgotten = seen.renewed_s_ago is not None and seen.renewed_s_ago > _FORGET_OTHER_HOSTS_AFTER_S
            if mine or forgotten:
                path.unlink()


def _read_lease(directory: Path) -> Holder | None:
    try:
        return Holder.decode((directory / LEASE_NAME).read_bytes())
    except FileNotFoundError:
        return None


def _replace_lease(directory: Path, expected: Holder | None, me: Holder) -> bool:
    """Under the chain's commit lock: if the lease still names `expected`, make it name `me`, durably."""
    make_durable_dirs(directory)
    with _THREADS:  # a record lock excludes processes, not the threads of one (and closing any fd drops it)
        lock = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX)
            if _read_lease(directory) != expected:
                return False
            fd = os.open(directory / LEASE_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, me.encode().ljust(_RECORD_WIDTH), 0)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            return True
        finally:
            os.close(lock)  # releases the lock
