"""`prune --config C (--older-than AGE | --before TIME) [--dry-run]`: an archive keeps what was committed since a cut.

Per chain, the oldest contiguous prefix of blobs committed before the cut goes (`sinks.blob.retention`: never a blob
in the middle, never the last one), and so do the documents no moment since the cut reads (topic metadata, group
positions: each directory keeps its newest document at or before the cut). The cut is recorded first
(`sinks.archive.retention`): from then on `restore --as-of` refuses earlier moments, naming the cut; the removals
follow, oldest first, each leaving a whole chain, so a prune killed at any point is finished by the next one and no
reader meanwhile misreads anything. The archive's schemas stay (a kept record may carry any of their IDs, and they
are a few kilobytes each).

With a table (`destination.table`), each chain loses only what its table holds, and each table drops those files in
one commit before any is deleted (`sinks.archive.pruning`).

Like `compact`, it takes each chain's lease first (a chain a live mirror holds is named and nothing changes) and
keeps them to the end. One line per chain or directory it changes on stdout, and a summary; a dry run prints what
would go and what stays."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread

from config import ConfigError
from config.model import Config
from core.errors import MirrorV3Error
from core.logs import log_event
from sinks.archive import retention as archive_retention
from sinks.archive.documents import moment_text
from sinks.archive.pruning import ArchivePrune, ChainPrune, apply_archive_prune, survey_archive
from sinks.archive.retention import ArchiveRetention, DirectoryPrune
from sinks.destination import chain_name
from sinks.destinations import open_destination
from sinks.leases import Holder
from sinks.tables.upkeep import ArchiveTables, TableChain, chain_topics

log = logging.getLogger("mirror_v3.prune")


@dataclass
class PruneOutcome:
    prune: ArchivePrune

    @property
    def kept(self) -> ArchiveRetention:  # the cut the archive keeps since (recorded unless a dry run or nothing went)
        return self.prune.kept

    @property
    def recorded(self) -> bool:
        return self.prune.recorded

    @property
    def failed(self) -> bool:
        chains = self.prune.chains
        return any(c.failed or c.table_failed for c in chains) or any(d.failed for d in self.prune.directories)


async def prune(
    config: Config,
    cut_ms: int,
    dry_run: bool,
    progress: Callable[[str], None],
    now_ms: int | None = None,
) -> PruneOutcome:
    """Prune the archive to what was committed since `cut_ms` (see the module). Raises ConfigError, LeaseHeldError (a
    live writer holds a chain: nothing was changed), CorruptChainError."""
    now_ms = round(time.time() * 1000) if now_ms is None else now_ms
    if cut_ms > now_ms:
        raise ConfigError("--before", f"{moment_text(cut_ms)} is in the future: nothing older than now can be kept")
    destination = open_destination(config.destination, holder=None if dry_run else Holder.of_this_process())
    archive = destination.archive
    if archive is None:
        raise ConfigError("destination.type", "prune removes the oldest blobs of a filesystem or S3 archive")
    destination.resolve()
    await archive.check_format()
    listed = await anyio.to_thread.run_sync(archive.chains)
    names = [(name, partition) for name, partitions in sorted(listed.items()) for partition in partitions]
    settings = destination.services.table
    tables = None if settings is None else ArchiveTables(archive, settings, destination.services.daily)
    topics = {} if settings is None else await chain_topics(archive, settings, names)
    chains = [TableChain(name, partition, topics.get(name, "")) for name, partition in names]
    leases = destination.leases
    documents = archive.documents()
    try:
        earlier = await archive_retention.retention(documents)
        if earlier is not None and earlier.kept_since_ms > cut_ms:
            cut_ms = earlier.kept_since_ms  # moments before it are refused already: what they read may be gone
        async with anyio.create_task_group() as group:
            if leases is not None:
                await leases.take_all(chain_name(name, partition) for name, partition in names)
                group.start_soon(leases.keep_renewed)
            try:
                done = await survey_archive(archive, documents, chains, ArchiveRetention.of(cut_ms, now_ms), tables)
                for chain in done.chains:
                    if isinstance(chain.failed, MirrorV3Error):
                        raise chain.failed  # a chain no reader can read (CorruptChainError): nothing was changed
                for line in map(describe_held_back, done.chains):
                    if line:
                        progress(line)
                if dry_run:
                    for chain in done.changing:
                        progress(describe_chain(chain, dry_run))
                    for directory in done.directories:
                        progress(describe_directory(directory, dry_run))
                else:
                    chain_done = lambda chain: progress(describe_chain(chain, dry_run))  # noqa: E731
                    directory_done = lambda d: progress(describe_directory(d, dry_run))  # noqa: E731
                    await apply_archive_prune(archive, documents, done, tables, chain_done, directory_done)
                    if done.recorded:
                        log_event(log, logging.INFO, "archive retention recorded", kept_since=done.kept.kept_since)
            finally:
                group.cancel_scope.cancel()
                if leases is not None:
                    await leases.release()
    finally:
        await documents.close()
    return PruneOutcome(done)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def describe_held_back(chain: ChainPrune) -> str | None:
    """A chain its table keeps as it is (or keeps more of)."""
    if chain.table_failed is not None:
        return f"{chain.chain.chain}: nothing removed, {chain.table_failed}"
    return None if chain.held_back is None else f"{chain.chain.chain}: {chain.held_back}"


def describe_chain(chain: ChainPrune, dry_run: bool) -> str:
    plan = chain.plan
    assert plan is not None  # only changing chains are described
    verb = "would remove" if dry_run else "removed"
    kept = f"{plan.kept_blobs} kept from offset {plan.kept_from}" if plan.kept_from is not None else "nothing kept"
    if chain.table_failed is not None:
        return f"{chain.chain.chain}: nothing removed, {chain.table_failed}"
    line = f"{chain.chain.chain}: {verb} {plan.removed_blobs} blobs ({_mb(plan.removed_bytes)}), {kept}"
    if len(plan.removed) > plan.removed_blobs:
        line += f" (and {len(plan.removed) - plan.removed_blobs} redundant blobs inside them)"
    if chain.failed:
        line += f"; a removal failed, the chain is whole from a later blob: {chain.failed}"
    return line


def describe_directory(directory: DirectoryPrune, dry_run: bool) -> str:
    verb = "would remove" if dry_run else "removed"
    line = f"{directory.directory}: {verb} {len(directory.removed)} documents, {directory.kept} kept"
    if directory.failed:
        line += f"; a removal failed: {directory.failed}"
    return line


def summary(outcome: PruneOutcome, dry_run: bool) -> str:
    done = outcome.prune
    changed = [c.plan for c in done.chains if c.removes and c.plan is not None]
    blobs = sum(plan.removed_blobs for plan in changed)
    size = sum(plan.removed_bytes for plan in changed)
    kept = sum(c.plan.kept_blobs for c in done.chains if c.plan is not None)
    documents = sum(len(d.removed) for d in done.directories)
    verb = "would prune" if dry_run else "pruned"
    line = (
        f"{verb} {len(changed)} of {len(done.chains)} chains: {blobs} blobs ({_mb(size)}) and {documents} "
        f"documents committed before {done.kept.kept_since}; {kept} blobs kept"
    )
    if done.recorded:
        line += f"; restore --as-of serves {done.kept.kept_since} and later"
    return line
