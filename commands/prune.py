"""`prune --config C (--older-than AGE | --before TIME) [--dry-run]`: an archive keeps what was committed since a cut.

Per chain, the oldest contiguous prefix of blobs committed before the cut goes (`sinks.blob.retention`: never a blob
in the middle, never the last one), and so do the documents no moment since the cut reads (topic metadata, group
positions: each directory keeps its newest document at or before the cut). The cut is recorded first
(`sinks.archive.retention`): from then on `restore --as-of` refuses earlier moments, naming the cut; the removals
follow, oldest first, each leaving a whole chain, so a prune killed at any point is finished by the next one and no
reader meanwhile misreads anything. The archive's schemas stay (a kept record may carry any of their IDs, and they
are a few kilobytes each).

Like `compact`, it takes each chain's lease first (a chain a live mirror holds is named and nothing changes) and
keeps them to the end. One line per chain or directory it changes on stdout, and a summary; a dry run prints what
would go and what stays."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import anyio.to_thread

from config import ConfigError
from config.model import Config
from core.errors import MirrorV3Error
from core.logs import log_event
from sinks.archive import retention as archive_retention
from sinks.archive.documents import ArchiveDocuments, moment_text
from sinks.archive.retention import ArchiveRetention, DirectoryPrune, documents_to_prune, prune_documents
from sinks.blob.pruner import apply_prune, survey_prune
from sinks.blob.retention import PrunePlan
from sinks.destination import Archive, chain_name
from sinks.destinations import open_destination
from sinks.leases import Holder

log = logging.getLogger("mirror_v3.prune")


@dataclass
class ChainPrune:
    """What a prune did to one chain (or would do: a dry run)."""

    chain: str
    name: str
    partition: int
    plan: PrunePlan
    failed: str | None = None  # a removal that failed (the chain is whole, from a later blob than before)


@dataclass
class PruneOutcome:
    kept: ArchiveRetention  # the cut the archive keeps since (recorded unless a dry run or nothing went)
    chains: list[ChainPrune] = field(default_factory=list)
    directories: list[DirectoryPrune] = field(default_factory=list)
    recorded: bool = False

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.chains) or any(d.failed for d in self.directories)


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
    if destination.services.table is not None:
        raise ConfigError(
            "destination.table",
            "an archive with a table is not pruned yet (its table would need the matching delete commit)",
        )
    destination.resolve()
    await archive.check_format()
    chains = await anyio.to_thread.run_sync(archive.chains)
    names = [(name, partition) for name, partitions in sorted(chains.items()) for partition in partitions]
    leases = destination.leases
    documents = archive.documents()
    try:
        earlier = await archive_retention.retention(documents)
        if earlier is not None and earlier.kept_since_ms > cut_ms:
            cut_ms = earlier.kept_since_ms  # moments before it are refused already: what they read may be gone
        outcome = PruneOutcome(ArchiveRetention.of(cut_ms, now_ms))
        async with anyio.create_task_group() as group:
            if leases is not None:
                await leases.take_all(chain_name(name, partition) for name, partition in names)
                group.start_soon(leases.keep_renewed)
            try:
                await _prune(archive, documents, names, outcome, dry_run, progress)
            finally:
                group.cancel_scope.cancel()
                if leases is not None:
                    await leases.release()
    finally:
        await documents.close()
    return outcome


async def _prune(
    archive: Archive,
    documents: ArchiveDocuments,
    names: list[tuple[str, int]],
    outcome: PruneOutcome,
    dry_run: bool,
    progress: Callable[[str], None],
) -> None:
    cut_s = outcome.kept.kept_since_ms / 1000
    for name, partition in names:
        store = archive.chain_store(name, partition)
        try:
            plan = await survey_prune(store, cut_s)
        finally:
            await store.close()
        outcome.chains.append(ChainPrune(chain_name(name, partition), name, partition, plan))
    outcome.directories = await documents_to_prune(documents, (name for name, _ in names), outcome.kept.kept_since_ms)
    changing = [c for c in outcome.chains if c.plan.removed]
    if dry_run:
        for chain in changing:
            progress(describe_chain(chain, dry_run))
        for directory in outcome.directories:
            progress(describe_directory(directory, dry_run))
        return
    if not changing and not outcome.directories:
        return  # nothing goes: the archive's retention is left as it was
    await archive_retention.record(documents, outcome.kept)  # first: a moment before the cut is refused from now on
    outcome.recorded = True
    log_event(log, logging.INFO, "archive retention recorded", kept_since=outcome.kept.kept_since)
    for chain in changing:
        store = archive.chain_store(chain.name, chain.partition)
        try:
            await apply_prune(store, chain.plan)
        except MirrorV3Error as exc:
            chain.failed = str(exc)
        finally:
            await store.close()
        progress(describe_chain(chain, dry_run))
    for directory in outcome.directories:
        try:
            await prune_documents(documents, directory)
        except MirrorV3Error as exc:
            directory.failed = str(exc)
        progress(describe_directory(directory, dry_run))
    await archive_retention.remove_older(documents, outcome.kept)


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def describe_chain(chain: ChainPrune, dry_run: bool) -> str:
    plan = chain.plan
    verb = "would remove" if dry_run else "removed"
    kept = f"{plan.kept_blobs} kept from offset {plan.kept_from}" if plan.kept_from is not None else "nothing kept"
    line = f"{chain.chain}: {verb} {plan.removed_blobs} blobs ({_mb(plan.removed_bytes)}), {kept}"
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
    changed = [c for c in outcome.chains if c.plan.removed]
    blobs = sum(c.plan.removed_blobs for c in changed)
    size = sum(c.plan.removed_bytes for c in changed)
    kept = sum(c.plan.kept_blobs for c in outcome.chains)
    documents = sum(len(d.removed) for d in outcome.directories)
    verb = "would prune" if dry_run else "pruned"
    line = (
        f"{verb} {len(changed)} of {len(outcome.chains)} chains: {blobs} blobs ({_mb(size)}) and {documents} "
        f"documents committed before {outcome.kept.kept_since}; {kept} blobs kept"
    )
    if outcome.recorded:
        line += f"; restore --as-of serves {outcome.kept.kept_since} and later"
    return line
