"""`compact --config C [--dry-run]`: the archive's runs of small blobs merged into bigger ones, once, as
destination.compaction says (target size, minimum age), for an archive nobody writes or one being written: it takes
each chain's lease first, like a writer (a chain a live mirror holds is named and the command stops, nothing
touched), and keeps them until it ends. Every reader (restart, `restore`, `restore --as-of`, `verify`, `status`)
sees the same records before, during and after, and after a kill at any point (`sinks.blob.compactor`).

All chains of the archive are surveyed first (listing only), their merges staged in one Spark job
(`workers.compaction_job`), then each merged blob committed and its run deleted. One line per chain that changes
on stdout, and a summary. A dry run counts the runs planned; with flush.daily the tasks may cut them by day.

With a table (`destination.table`) only the runs each chain's table holds are merged, and each table gets one commit
replacing them before any is deleted (`sinks.archive.compacting`); a table that cannot be read stops the command
before anything changes (TableError), one whose commit fails leaves its runs redundant (the chain's line says so)."""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import anyio
import anyio.to_thread

from commands.job_progress import JobProgress, reported, spark_job_tasks
from config import ConfigError
from config.model import Config
from core.errors import MirrorV3Error
from sinks.archive.compacting import RedundantRun, merges_within_table, retire_runs
from sinks.blob.compaction import CompactionPolicy
from sinks.blob.compactor import ChainSurvey, apply_merge, log_commit, survey_chain
from sinks.destination import Archive, DestinationServices, chain_name
from sinks.destinations import open_destination
from sinks.leases import Holder
from sinks.tables.iceberg import TableError
from sinks.tables.upkeep import ArchiveTables, TableChain, chain_topics
from workers.compaction_job import MergeWork, run_compaction_job
from workers.spark_session import SparkLaunch, started_spark
from workers.spark_start import start_spark

log = logging.getLogger("mirror_v3.compact")


@dataclass
class ChainCompaction:
    """What compaction did to one chain (or would do: a dry run)."""

    chain: str
    blobs_before: int
    size: int
    merges: int = 0
    merged_blobs: int = 0  # blobs of the runs merged
    redundant_removed: int = 0
    failed: str | None = None  # a merge that failed (the chain is unchanged by it)

    @property
    def blobs_after(self) -> int:
        return self.blobs_before - self.merged_blobs + self.merges


def policy_of(services: DestinationServices, archive: Archive | None) -> CompactionPolicy:
    """The destination's compaction settings; ConfigError where compact cannot run."""
    if archive is None or services.compaction is None:
        raise ConfigError("destination.type", "compact merges the blobs of a filesystem or S3 archive")
    settings = services.compaction
    return CompactionPolicy.of(settings)


async def compact(
    config: Config, launch: SparkLaunch, dry_run: bool, progress: Callable[[ChainCompaction], None]
) -> list[ChainCompaction]:
    """Compact every chain of the archive (see the module). Raises ConfigError, LeaseHeldError (a live writer holds
    a chain: nothing was changed), CorruptChainError, TableError (a table that cannot be read: nothing was changed)."""
    destination = open_destination(config.destination, holder=None if dry_run else Holder.of_this_process())
    archive = destination.archive
    policy = policy_of(destination.services, archive)
    assert archive is not None  # policy_of says so
    destination.resolve()
    await archive.check_format()
    listed = await anyio.to_thread.run_sync(archive.chains)
    names = [(name, partition) for name, partitions in sorted(listed.items()) for partition in partitions]
    leases = destination.leases
    async with anyio.create_task_group() as group:
        if leases is not None:
            await leases.take_all(chain_name(name, partition) for name, partition in names)
            group.start_soon(leases.keep_renewed)
        try:
            services = destination.services
            tables = None if services.table is None else ArchiveTables(archive, services.table, services.daily)
            topics = {} if services.table is None else await chain_topics(archive, services.table, names)
            chains = [TableChain(name, partition, topics.get(name, "")) for name, partition in names]
            done = await _compact_chains(
                archive, chains, tables, policy, launch, config, dry_run, progress, services.daily
            )
        finally:
            group.cancel_scope.cancel()
            if leases is not None:
                await leases.release()
    return done


async def _compact_chains(
    destination: Archive,
    chains: list[TableChain],
    tables: ArchiveTables | None,
    policy: CompactionPolicy,
    launch: SparkLaunch,
    config: Config,
    dry_run: bool,
    progress: Callable[[ChainCompaction], None],
    daily: bool,
) -> list[ChainCompaction]:
    now_s = time.time()
    positions: dict[str, int] = {}
    if tables is not None:
        positions, unread = await tables.positions(chains)
        if unread:  # nothing is changed without knowing what each table holds
            first, why = sorted(unread.items())[0]
            raise TableError(tables.table_of(next(c for c in chains if c.chain == first)).identifier, "read", why)
    surveys: list[tuple[TableChain, ChainSurvey]] = []
    for chain in chains:
        store = destination.chain_store(chain.name, chain.partition)
        try:
            if not dry_run:  # what a compaction (or a writer) killed before left staged: the leases are ours
                await store.clean_leftovers()
            survey = await survey_chain(store, policy, now_s)
            position = None if tables is None else positions.get(chain.chain, 0)
            surveys.append((chain, dataclasses.replace(survey, merges=merges_within_table(survey.merges, position))))
        finally:
            await store.close()
    done = [ChainCompaction(chain.chain, s.blobs, s.size) for chain, s in surveys]
    work: list[MergeWork] = []
    where: list[tuple[int, int]] = []  # per merge work: its chain's index, its merge's index
    for index, (chain, survey) in enumerate(surveys):
        name, partition = chain.name, chain.partition
        done[index].merges = len(survey.merges)
        done[index].merged_blobs = sum(len(merge.blobs) for merge in survey.merges)
        if dry_run:
            continue
        _, staging = destination.staged_chain(name, partition)
        reader = destination.reader(name, partition)
        for number, merge in enumerate(survey.merges):
            # flush.daily: the days are the records', read by the task, which cuts the run where they change.
            work.append(MergeWork(reader, staging, survey.sources(merge), merge.size, daily))
            where.append((index, number))
    if not dry_run:
        redundant = [RedundantRun(chain, c, run) for chain, survey in surveys for c, run in survey.redundant_runs]
        failed = await retire_runs(destination, tables, redundant)
        for index, (chain, survey) in enumerate(surveys):
            if chain.chain in failed:
                done[index].failed = failed[chain.chain]
            else:
                done[index].redundant_removed = len(survey.redundant)
    if work:
        await start_spark(config.spark, launch)
        group = f"mirror-v3.compact.{uuid.uuid4().hex[:12]}"
        merging = JobProgress(f"merging {len(work)} runs of blobs", "compacting")
        async with reported(merging, partial(spark_job_tasks, group)):
            outcomes = await anyio.to_thread.run_sync(lambda: run_compaction_job(started_spark(), tuple(work), group))
        committed: dict[int, list[RedundantRun]] = {}
        for (index, number), outcome in zip(where, outcomes, strict=True):
            chain, survey = surveys[index]
            planned = survey.merges[number]
            done[index].merges -= 1  # counted again below, per merged blob committed
            done[index].merged_blobs -= len(planned.blobs)
            if outcome.error is not None:
                done[index].failed = str(outcome.error)
                continue
            store = destination.chain_store(chain.name, chain.partition)
            try:
                for staged in outcome.get():  # one per run, or one per day of two blobs or more (flush.daily)
                    merge = planned.within(staged.first, staged.last)
                    await apply_merge(store, merge, staged, log_commit(log, chain.chain, merge), remove=False)
                    committed.setdefault(index, []).append(RedundantRun.of(chain, merge))
            except MirrorV3Error as exc:
                done[index].failed = str(exc)
            finally:
                await store.close()
        failed = await retire_runs(destination, tables, [run for runs in committed.values() for run in runs])
        for index, runs in committed.items():
            chain = surveys[index][0]
            if chain.chain in failed:  # committed, and redundant: the next compaction retires them
                done[index].failed = failed[chain.chain]
            done[index].merges += len(runs)
            done[index].merged_blobs += sum(len(run.run) for run in runs)
    for changed in done:
        if changed.merges or changed.redundant_removed or changed.failed:
            progress(changed)
    return done


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def describe(chain: ChainCompaction, dry_run: bool) -> str:
    """One chain's line."""
    parts = []
    if chain.merges:
        verb = "would merge" if dry_run else "merged"
        parts.append(
            f"{verb} {chain.merged_blobs} blobs into {chain.merges}: {chain.blobs_before} blobs -> {chain.blobs_after}"
        )
    if chain.redundant_removed:
        parts.append(f"removed {chain.redundant_removed} blobs a merged blob made redundant")
    if chain.failed:
        parts.append(f"a merge failed, its run is unchanged: {chain.failed}")
    return f"{chain.chain}: {'; '.join(parts)}"


def summary(done: list[ChainCompaction], dry_run: bool) -> str:
    before = sum(chain.blobs_before for chain in done)
    after = sum(chain.blobs_after for chain in done)
    size = sum(chain.size for chain in done)
    changed = sum(1 for chain in done if chain.merges)
    verb = "would compact" if dry_run else "compacted"
    return f"{verb} {changed} of {len(done)} chains ({_mb(size)}): {before} blobs -> {after}"
