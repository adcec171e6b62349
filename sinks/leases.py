"""Leases on a destination's chains: one live writer per chain, known before anything there is touched. Each kind
keeps them in its own store (`LeaseStore`: `sinks.filesystem.leases`, `sinks.s3.leases`, `sinks.kafka.leases`).

The blob chain already refuses a second writer's commits (`sinks.blob.chain`), but only once it commits: before
that, a second process's start-up would clean the live writer's staged files (filesystem) or abort its uploads
(S3). A lease makes the second writer visible first. Two records, so that renewing costs one write per process,
not one per chain:

- a *heartbeat* per process (`Holder`: a random id, host, pid, since when), rewritten every RENEW_EVERY_S while
  it runs and removed when it stops;
- a *chain lease* per chain, naming the holder whose heartbeat it depends on, written once when the chain is taken.

A chain is free when its lease names no holder, this process, or a holder that is not live (`is_live`): its
heartbeat is gone (a clean stop), older than LEASE_TIMEOUT_S by the store's clock, left by a process of this host
that no longer runs, or (filesystem) no longer locked by its process. Taking a chain is atomic in each store (a
lock on the filesystem, a conditional create on S3), so of two processes that find a chain free, one takes it.

A lease is a courtesy, not the fence: a holder that cannot renew (the store is down) keeps writing, and a newcomer
that took over meanwhile is still refused at its first commit by the chain's own checks. What the lease adds is that
nothing of the live writer is touched first, and one clear line saying who holds what.

Cost: one write per process per RENEW_EVERY_S; taking a chain costs a read and a write of its lease, and a look at
its holder's heartbeat once per holder and pass (`HolderSightings`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import ClassVar, Protocol

import anyio

from core.errors import MirrorV3Error, first_line
from core.logs import log_event
from sinks.base import DestinationError
from sinks.retry import RetryPolicy, retry_transient

log = logging.getLogger("mirror_v3.leases")

LEASE_TIMEOUT_S = 10.0  # a heartbeat older than this is a dead holder's
RENEW_EVERY_S = 2.0  # several renewals per timeout, so one slow write does not expire a live holder
STANDBY_POLL_S = 2.0  # a standby looks again this often: takeover within LEASE_TIMEOUT_S + RENEW + POLL (14 s)
TAKES_AT_ONCE = 16  # chains taken concurrently on start (each is a few requests on S3)


@dataclass(frozen=True)
class Holder:
    """A process that holds leases: what another process needs to name it and to judge whether it still runs."""

    id: str
    host: str
    pid: int
    since: float  # Unix time it started holding

    @classmethod
    def of_this_process(cls) -> Holder:
        return cls(id=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(), since=time.time())

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.since, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"host {self.host} pid {self.pid} since {since}"

    def encode(self) -> bytes:
        return json.dumps({"id": self.id, "host": self.host, "pid": self.pid, "since": self.since}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Holder | None:
        """None for anything that is not a holder record (a torn write, a file put there by hand)."""
        try:
            fields = json.loads(data)
            return cls(
                id=str(fields["id"]), host=str(fields["host"]), pid=int(fields["pid"]), since=float(fields["since"])
            )
        except (ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Sighting:
    """What a store saw of a holder's heartbeat."""

    holder: Holder
    renewed_s_ago: float | None  # None: no heartbeat (its holder stopped cleanly, or never wrote one)
    locked: bool | None = None  # the heartbeat is locked by a running process; None: the store has no locks


def pid_runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it runs
    return True


def gone_from_this_host(
    holder: Holder, host: str, pid: int | None = None, pid_alive: Callable[[int], bool] = pid_runs
) -> bool:
    """Whether `holder` ran on this host (`host`) and runs no more: its pid is gone, or is this process's own (a
    restarted container's earlier self)."""
    return holder.host == host and (holder.pid == (os.getpid() if pid is None else pid) or not pid_alive(holder.pid))


def is_live(seen: Sighting, me: Holder, pid_alive: Callable[[int], bool] = pid_runs) -> bool:
    """Whether `seen`'s holder still writes what it holds (never true of this process itself).

    A lock held on the heartbeat proves a live process; on this host a free lock, a pid that no longer runs, or
    this process's own pid (a restarted container's earlier self) proves a dead one. Otherwise, as on a shared
    filesystem whose locks may not reach other hosts, or on S3, only the heartbeat's age tells."""
    holder = seen.holder
    if holder.id == me.id:
        return False
    if seen.locked:
        return True
    if seen.renewed_s_ago is None:
        return False
    if holder.host == me.host and seen.locked is False:  # its lock is free: the kernel let go of a dead process's
        return False
    if gone_from_this_host(holder, me.host, me.pid, pid_alive):
        return False
    return seen.renewed_s_ago <= LEASE_TIMEOUT_S


class LeaseHeldError(DestinationError):
    """Another live process holds the lease of `chain` (`<destination name>/<partition>`, whose lease is at `where`):
    its `holder`, as `seen`."""

    headline: ClassVar[str | None] = "another writer holds the destination"

    def __init__(self, chain: str, where: str, seen: Sighting) -> None:
        self.chain, self.where, self.holder, self.seen = chain, where, seen.holder, seen
        renewed = "" if seen.renewed_s_ago is None else f", renewed {seen.renewed_s_ago:.0f}s ago"
        super().__init__(
            f"{where}: another writer holds this chain's lease ({seen.holder.describe()}{renewed}); stop that process "
            f"first, or start this one with --standby to take over when it stops"
        )


class LeaseLostError(DestinationError):
    """Another process's lease now names `chain`, which this process held (a rival took it in the same moment,
    or judged this process dead while it could not renew), as found at `where`."""

    headline: ClassVar[str | None] = "lost the destination's lease"

    def __init__(self, chain: str, where: str, holder: Holder) -> None:
        self.chain, self.where, self.holder = chain, where, holder
        super().__init__(
            f"{where}: now held by another writer ({holder.describe()}); this process stops so that only one "
            f"writes; stop one of the two, or start the other with --standby"
        )


@dataclass(frozen=True)
class Taken:
    """What one `LeaseStore.take_many` did: the chains it holds now, and the refusal that stopped it (None when it
    took every chain)."""

    chains: tuple[str, ...]
    refused: LeaseHeldError | None = None


class HolderSightings:
    """Heartbeats looked at during one pass over many chains: each holder once, however many chains it holds."""

    def __init__(self, look: Callable[[Holder], Awaitable[Sighting]]) -> None:
        self._look = look
        self._seen: dict[str, Sighting] = {}

    async def of(self, holder: Holder) -> Sighting:
        if holder.id not in self._seen:
            self._seen[holder.id] = await self._look(holder)
        return self._seen[holder.id]


class LeaseStore(Protocol):
    """A destination's lease records (a filesystem root, an S3 prefix). `chain` is `<destination name>/<partition>`."""

    def location(self, chain: str) -> str:
        """Where the chain's lease lives, for messages."""
        ...

    async def beat(self, me: Holder) -> None:
        """Write (or renew) this process's heartbeat."""
        ...

    async def stop_beating(self, me: Holder) -> None:
        """Remove this process's heartbeat: every chain it holds is free from now on."""
        ...

    async def sight(self, holder: Holder) -> Sighting:
        """Look at a holder's heartbeat (never this process's own)."""
        ...

    async def take_many(self, chains: Sequence[str], me: Holder, seen: HolderSightings) -> Taken:
        """For each chain, atomically: unless its lease names a holder that `is_live`, make it name `me`; of two
        processes taking one chain, one wins. Stops at the first chain a live holder keeps and says which (`Taken`).
        A failure to reach the store is raised (a TransientDestinationError is safe to retry: what was taken is
        found taken)."""
        ...

    async def close(self) -> None: ...


async def take_each(
    take: Callable[[str, Holder, HolderSightings], Awaitable[None]],
    chains: Sequence[str],
    me: Holder,
    seen: HolderSightings,
) -> Taken:
    """`LeaseStore.take_many` for a store that takes one chain at a time (`take` raises LeaseHeldError for a chain
    a live holder keeps): TAKES_AT_ONCE at a time, stopping at the first refusal. Another failure is raised as
    itself once the chains in flight are done."""
    taken: list[str] = []
    refused: list[LeaseHeldError] = []
    failed: list[Exception] = []
    limit = anyio.Semaphore(TAKES_AT_ONCE)

    async def take_one(chain: str, scope: anyio.CancelScope) -> None:
        async with limit:
            try:
                await take(chain, me, seen)
                taken.append(chain)
            except LeaseHeldError as exc:
                refused.append(exc)
                scope.cancel()
            except Exception as exc:
                failed.append(exc)
                scope.cancel()

    async with anyio.create_task_group() as tasks:
        for chain in chains:
            tasks.start_soon(take_one, chain, tasks.cancel_scope)
    if refused:
        return Taken(tuple(taken), refused[0])
    if failed:
        raise failed[0]
    return Taken(tuple(taken))


class Leases:
    """This process's leases on one destination: its heartbeat, kept renewed, and the chains it took."""

    def __init__(self, store: LeaseStore, me: Holder, retry: RetryPolicy) -> None:
        self._store = store
        self.me = me
        self._retry = retry
        self._held: set[str] = set()
        self._beating = False
        self._lock = anyio.Lock()

    @property
    def held(self) -> frozenset[str]:
        return frozenset(self._held)

    async def take(self, chain: str) -> None:
        """Take one chain (a no-op when held already); LeaseHeldError when a live process holds it."""
        await self.take_all([chain])

    async def take_all(self, chains: Iterable[str]) -> None:
        """Take every chain; the first LeaseHeldError stops the rest and is raised."""
        pending = [chain for chain in chains if chain not in self._held]
        if not pending:
            return
        async with self._lock:
            if not self._beating:  # others must see this process live before any chain names it
                await retry_transient(lambda: self._store.beat(self.me), self._retry, "write the lease heartbeat")
                self._beating = True
        seen = HolderSightings(self._store.sight)
        # Safe to repeat: a take that landed but whose answer was lost finds this process's own lease.
        taken = await retry_transient(
            lambda: self._store.take_many(pending, self.me, seen),
            self._retry,
            f"take {self._store.location(pending[0])}" + (f" and {len(pending) - 1} more" if len(pending) > 1 else ""),
        )
        self._held.update(taken.chains)
        if taken.refused is not None:
            raise taken.refused

    async def wait_for_all(self, chains: Iterable[str], stop: anyio.Event) -> bool:
        """Standby: take every chain, waiting (STANDBY_POLL_S between looks) while live holders keep some;
        False when `stop` was set first. Logs the holder waited for whenever it changes."""
        wanted = list(chains)
        waited_for: str | None = None
        while not stop.is_set():
            try:
                await self.take_all(wanted)
                if waited_for is not None:
                    log_event(log, logging.INFO, "standby: took over", chains=len(wanted))
                return True
            except LeaseHeldError as exc:
                if exc.holder.id != waited_for:
                    waited_for = exc.holder.id
                    log_event(
                        log,
                        logging.INFO,
                        "standby: waiting for the live writer",
                        chain=exc.chain,
                        holder=exc.holder.describe(),
                        held=len(wanted) - len(self._held),
                    )
            with anyio.move_on_after(STANDBY_POLL_S):
                await stop.wait()
        return False

    async def keep_renewed(self) -> None:
        """Renew the heartbeat every RENEW_EVERY_S until cancelled. A failed renewal is logged once (WARN) and
        retried; the lease is not given up, since the chain's own checks fence a writer that lost it. A store that
        finds at a renewal that another process holds one of this one's chains raises LeaseLostError."""
        failing_since: float | None = None
        while True:
            await anyio.sleep(RENEW_EVERY_S)
            if not self._beating:
                continue
            try:
                await self._store.beat(self.me)
            except LeaseLostError:
                raise  # another process writes now: this one must stop
            except MirrorV3Error as exc:
                if failing_since is None:
                    failing_since = time.monotonic()
                    log_event(log, logging.WARNING, "lease renewal failing", error=first_line(exc))
                continue
            if failing_since is not None:
                log_event(log, logging.INFO, "lease renewed again", down_s=round(time.monotonic() - failing_since, 1))
                failing_since = None

    async def release(self) -> None:
        """Stop beating (best effort, bounded): a standby takes over at its next look."""
        with anyio.CancelScope(shield=True):
            if self._beating:
                with contextlib.suppress(Exception), anyio.move_on_after(5):
                    await self._store.stop_beating(self.me)
                self._beating = False
                self._held.clear()
            await self._store.close()
