"""The archive's tables follow its chains (`destination.table`): a process service that, every commit interval and
once more when the mirrors have drained, adds to each table the blobs its chains committed since, in one commit
per table (`sinks.tables`).

Restart correctness comes from the destination: where a table is for each chain is read from the table's own
commits (never from a local checkpoint) when the keeper starts and after any failure; what follows is listed
from the chain, only up to the offset the chain's mirror made durable. A table that cannot be read or committed
is a WARN once per spell, `mirror_v3_table_up` 0 and a degraded /readyz: the mirrors go on, and the table
catches up when it works again. A chain whose table position cannot be known (its history expired before any
mirror-v3 commit) gets nothing added, and says so: a blob added twice would be a duplicate row forever.

Cost per interval and table: one catalog commit (CPU per blob it adds: see docs/benchmarks.md; a blob's statistics
come with it from the task that wrote it, and only blobs found by listing have their footers read); nothing for
chains that did not move. The blobs come from what each mirror's actor
committed (`MirroredPartition.committed`); a chain is listed (one page per 1 000 names after the position; on a
filesystem a read of the whole directory) only where that does not reach back to the table's position: at start,
after a failure, or when more flushes than the actor remembers came between two commits.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from config.estate import MirrorSpec
from config.model import TableConfig
from core.clock import SYSTEM_CLOCK, Clock
from core.describe import describe_error
from core.logs import log_event
from sinks.destination import Archive, chain_name
from sinks.tables.following import blobs_after
from sinks.tables.kept import KeptTable, TableOpener, table_identity, table_name
from sinks.tables.positions import NextBlobs, TableFile
from supervisor.process_service import MirroredPartition, ProcessService, RunningProcess
from telemetry.metrics import MetricFamilies

log = logging.getLogger("mirror_v3.tables")
DRAINED_COMMIT_S = 20.0  # the drain's last commit waits this long at most
TABLES_AT_ONCE = 4  # tables committing at the same time (each in a thread: catalog requests, metadata writes)


@dataclass
class _Followed:
    """One table and what this process knows of it."""

    table: KeptTable
    chains: dict[str, tuple[str, int]] = field(default_factory=dict)  # chain → (dest name, partition)
    next_offsets: dict[str, int] | None = None  # chain → the table's position; None: to be read (again)
    unknown: frozenset[str] = frozenset()  # chains whose position the table's history cannot tell
    # chain → (durable position, when first seen) per round that saw it grow: how long the table has been behind
    durable_seen: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    failing: bool = False


class TableKeeper(ProcessService):
    name = "archive tables"

    def __init__(
        self,
        archive: Archive,
        settings: TableConfig,
        daily: bool,
        families: MetricFamilies,
        open_table: Callable[[str, str], KeptTable] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._archive = archive
        self._settings = settings
        self._families = families
        self._clock = clock
        # A missing secret is named now; an Iceberg commit runs in a worker process, off the mirrors' interpreter.
        self._open_table = open_table or TableOpener(settings, archive, daily, commits_elsewhere=True)
        self._tables: dict[str, _Followed] = {}  # identifier → what this process follows of it
        self.down: dict[str, str] = {}  # table → why it cannot be read or committed (/readyz)
        self._mirrored: Callable[[], Sequence[MirroredPartition]] = list  # the running mirrors, once serving
        self._round = anyio.Lock()  # one round at a time: the interval's and the drain's never overlap

    def table_of(self, spec: MirrorSpec) -> str:
        return table_identity(self._settings, self._archive, spec.topic, spec.destination_name)

    async def mirrors_added(self, mirrors: Sequence[MirrorSpec]) -> None:
        for spec in mirrors:
            identifier = self.table_of(spec)
            followed = self._tables.get(identifier)
            if followed is None:
                name = table_name(self._settings, spec.topic, spec.destination_name)
                followed = self._tables[identifier] = _Followed(self._open_table(identifier, name))
            chain = chain_name(spec.destination_name, spec.partition)
            if chain not in followed.chains:
                followed.chains[chain] = (spec.destination_name, spec.partition)
                followed.next_offsets = None  # read the new chain's position with the others'

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        self._mirrored = process.mirrored
        # Each table's positions are read now, not at the first interval's end: a catalog that cannot be reached is
        # a WARN at start, and the first commit finds its table opened and PyIceberg loaded (in this process and in
        # the commit worker), CPU that would otherwise land beside the mirrors' flushes (p99 durable: the first
        # commit's flushes were the slowest of a run, docs/benchmarks.md).
        await self.read_positions()
        interval_s = self._settings.commit_interval_ms / 1000
        while not await self._clock.wait_for(process.stop_requested, interval_s):
            await self.commit_all(process.mirrored())

    async def drained(self) -> None:
        """The blobs of the drain's last flushes, in the table before the process ends, if its catalog answers
        within DRAINED_COMMIT_S (a commit left running has an outcome the next start reads from the table)."""
        with anyio.move_on_after(DRAINED_COMMIT_S):
            await self.commit_all(self._mirrored())

    async def commit_all(self, mirrored: Sequence[MirroredPartition]) -> None:
        """One round: each table that has new blobs gets one commit."""
        async with self._round:
            await self._round_of(mirrored)

    async def read_positions(self) -> None:
        """Where each table is for its chains, for the tables not read yet (a failure counts as a commit's)."""
        async with self._round:
            await self._each_table(self._read)

    async def _round_of(self, mirrored: Sequence[MirroredPartition]) -> None:
        durable = {chain_name(m.destination_topic, m.partition): m for m in mirrored}
        await self._each_table(lambda identifier, followed: self._commit(identifier, followed, durable))

    async def _each_table(self, step: Callable[[str, _Followed], Awaitable[None]]) -> None:
        # Tables commit side by side, a few at a time: one slow catalog does not hold back the others' commits.
        limiter = anyio.CapacityLimiter(TABLES_AT_ONCE)
        async with anyio.create_task_group() as group:
            for identifier, followed in list(self._tables.items()):  # discovery may add tables meanwhile
                group.start_soon(self._keep, identifier, followed, step, limiter)

    async def _keep(
        self,
        identifier: str,
        followed: _Followed,
        step: Callable[[str, _Followed], Awaitable[None]],
        limiter: anyio.CapacityLimiter,
    ) -> None:
        async with limiter:
            try:
                await step(identifier, followed)
            except Exception as exc:  # a helper of the mirrors: it never takes them down; tried again next time
                followed.next_offsets = None  # read from the table again: it decides what is in it
                self._families.table_commit_failures.labels(identifier).inc()
                self._families.table_up.labels(identifier).set(0)
                self.down[identifier] = describe_error(exc)
                if not followed.failing:
                    followed.failing = True
                    log_event(
                        log, logging.WARNING, "table not updated, retrying", table=identifier, error=describe_error(exc)
                    )
                return
        self._families.table_up.labels(identifier).set(1)
        self.down.pop(identifier, None)
        if followed.failing:
            followed.failing = False
            log_event(log, logging.INFO, "table updated again", table=identifier)

    async def _read(self, identifier: str, followed: _Followed) -> None:
        """The table's positions of its chains, unless known."""
        if followed.next_offsets is None:
            read = await anyio.to_thread.run_sync(
                followed.table.positions, list(followed.chains), abandon_on_cancel=True
            )
            followed.next_offsets, followed.unknown = dict(read.next_offsets), read.unknown
            for chain in read.unknown:
                log_event(
                    log,
                    logging.WARNING,
                    "table position unknown: its history no longer holds a mirror-v3 commit of this chain; "
                    "nothing of it is added (a blob added twice would be a duplicate row)",
                    table=identifier,
                    chain=chain,
                )

    async def _commit(self, identifier: str, followed: _Followed, durable: dict[str, MirroredPartition]) -> None:
        await self._read(identifier, followed)
        positions = followed.next_offsets
        assert positions is not None  # just read
        added: dict[str, NextBlobs] = {}
        for chain, (name, partition) in list(followed.chains.items()):  # ... and chains
            mirror, at = durable.get(chain), positions.get(chain)
            if mirror is None or at is None:  # not running here, or its position unknown (or not read yet)
                continue
            if mirror.position > at:
                # What its actor committed since, if it remembers that far back; else the chain, listed.
                known = None if mirror.committed is None else mirror.committed.after(at, mirror.position)
                found = (
                    known
                    if known is not None
                    else await blobs_after(self._archive, name, partition, at, mirror.position)
                )
                if found.gap_at is not None:
                    log_event(
                        log,
                        logging.WARNING,
                        "table cannot follow its chain: the blob after its position does not continue it",
                        table=identifier,
                        chain=chain,
                        position=at,
                        blob=f"{found.gap_at.first}-{found.gap_at.last}",
                    )
                if found.blobs:
                    added[chain] = found
        if added:
            files = [
                TableFile(
                    self._archive.file_uri(name, partition, blob.name),
                    partition,
                    blob.name,
                    found.statistics.get(blob.first),
                )
                for chain, found in added.items()
                for name, partition in [followed.chains[chain]]
                for blob in found.blobs
            ]
            new = {**positions, **{chain: found.next_offset for chain, found in added.items()}}
            began = time.monotonic()
            await anyio.to_thread.run_sync(followed.table.commit, files, new, dict(positions), abandon_on_cancel=True)
            self._families.table_commit.labels(identifier).observe(time.monotonic() - began)
            followed.next_offsets = positions = new
            for chain in added:
                mirror = durable[chain]
                if mirror.committed is not None:
                    mirror.committed.forget_below(new[chain])
            log_event(log, logging.INFO, "table committed", table=identifier, files=len(files), chains=len(added))
        self._observe(followed, positions, durable)

    def _observe(self, followed: _Followed, positions: dict[str, int], durable: dict[str, MirroredPartition]) -> None:
        now = self._clock.monotonic()
        for chain, at in positions.items():
            mirror = durable.get(chain)
            if mirror is None:
                continue
            labels = (mirror.cluster, mirror.topic, str(mirror.partition), mirror.destination_topic)
            self._families.table_next_offset.labels(*labels).set(at)
            self._families.table_lag.labels(*labels).set(max(0, mirror.position - at))
            # The oldest moment the chain was durable beyond the table's position: the table misses records at
            # least that old (to the resolution of a round).
            seen = followed.durable_seen.setdefault(chain, [])
            if not seen or seen[-1][0] < mirror.position:
                seen.append((mirror.position, now))
            while seen and seen[0][0] <= at:
                seen.pop(0)
            self._families.table_lag_seconds.labels(*labels).set(now - seen[0][1] if seen else 0.0)
