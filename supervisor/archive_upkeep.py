"""The archive kept in shape by the process that writes it: its own chains compacted (`destination.compaction`
with `interval-ms`) and pruned (`destination.retention`) in the background, with the steps `compact` and `prune`
take (`sinks.blob.compactor`, `workers.compaction_job`, `sinks.blob.pruner`, `sinks.archive.retention`).

Only the chains of the mirrors this process runs: it holds their leases, so no other writer or compaction touches
them, and its own writers only ever append after each chain's last blob, which neither step touches.

Its budget, so that the mirrors' flushes keep their latency: one Spark job per round whose one task merges the
round's runs one after another (in the `mirror-v3.compaction` FAIR pool: at most one core, beside the flushes'
pools), at most `max-bytes-per-interval` read per round; a prune needs no Spark (listings and deletes). A failure is
a WARN and a metric (`mirror_v3_archive_upkeep_failures_total`), never a stop of a mirror; the round after tries
again, and what a failed or killed step left is what a reader already reads right (a redundant run, a shorter
prefix) and the next round finishes.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from config.model import CompactionConfig, RetentionConfig
from core.clock import SYSTEM_CLOCK, Clock
from core.describe import describe_error
from core.logs import log_event
from sinks.archive import retention as archive_retention
from sinks.archive.compacting import RedundantRun, merges_within_table, retire_runs
from sinks.archive.pruning import ChainPrune, apply_archive_prune, survey_archive
from sinks.archive.retention import ArchiveRetention
from sinks.blob.compaction import CompactionPolicy, Merge
from sinks.blob.compactor import ChainSurvey, apply_merge, log_commit, survey_chain
from sinks.blob.staging import StagedBlob
from sinks.destination import Archive, chain_name
from sinks.tables.upkeep import ArchiveTables, TableChain
from supervisor.process_service import MirroredPartition, ProcessService, RunningProcess
from telemetry.metrics import MetricFamilies
from workers.compaction_job import MergeWork, run_compaction_job
from workers.range_job import Outcome
from workers.spark_session import current_spark, started_spark

log = logging.getLogger("mirror_v3.archive_upkeep")

SESSION_POLL_S = 0.5  # how often a round due before the Spark session is ready looks again
CHAINS_PER_ROUND = 1_000  # chains a compaction round surveys (a detailed listing each); the next goes on after them
MergeRunner = Callable[[tuple[MergeWork, ...]], Awaitable[list[Outcome[list[StagedBlob]]]]]


async def merge_in_spark(work: tuple[MergeWork, ...]) -> list[Outcome[list[StagedBlob]]]:
    """A round's runs merged one after another by a Spark job of one task of the process's session: one job per
    round, at most one core. A round due while the session is still starting (a short interval, a slow start) waits
    for it: the process ends if it cannot start."""
    while current_spark() is None:
        await anyio.sleep(SESSION_POLL_S)
    group = f"mirror-v3.upkeep.{uuid.uuid4().hex[:12]}"
    return await anyio.to_thread.run_sync(lambda: run_compaction_job(started_spark(), work, group, tasks=1))


@dataclass(frozen=True)
class _Chain:
    labels: tuple[str, str, str, str]  # the mirror's metric labels
    name: str  # the chain's destination name
    partition: int

    @property
    def chain(self) -> str:
        return chain_name(self.name, self.partition)

    @property
    def table_chain(self) -> TableChain:
        return TableChain(self.name, self.partition, self.labels[1])


class ArchiveUpkeep(ProcessService):
    name = "archive upkeep"

    def __init__(
        self,
        archive: Archive,
        compaction: CompactionConfig | None,
        retention: RetentionConfig | None,
        daily: bool,
        families: MetricFamilies,
        merge: MergeRunner = merge_in_spark,
        clock: Clock = SYSTEM_CLOCK,
        tables: ArchiveTables | None = None,
    ) -> None:
        """`tables`: the archive's tables, which each compaction and prune keeps in step (`sinks.tables.upkeep`)."""
        self._archive = archive
        self._tables = tables
        self._resume_at = ""  # the chain the next compaction round starts at
        self._compaction = compaction if compaction is not None and compaction.interval_ms else None
        self._retention = retention
        self._daily = daily
        self._families = families
        self._merge = merge
        self._clock = clock

    @property
    def wanted(self) -> bool:
        return self.is_wanted(self._compaction, self._retention)

    @staticmethod
    def is_wanted(compaction: CompactionConfig | None, retention: RetentionConfig | None) -> bool:
        """Whether a process with these settings runs an upkeep: compaction with an interval, or a retention."""
        return (compaction is not None and bool(compaction.interval_ms)) or retention is not None

    async def serve(
        self, process: RunningProcess, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        due: dict[str, float] = {}  # task → when its next round is due (monotonic)
        now = self._clock.monotonic()
        if self._compaction is not None:
            due["compaction"] = now + self._compaction.interval_ms / 1000
        if self._retention is not None:
            due["prune"] = now + self._retention.interval_ms / 1000
        while due:
            task, at = min(due.items(), key=lambda item: item[1])
            if await self._clock.wait_for(process.stop_requested, max(0.0, at - self._clock.monotonic())):
                return
            if task == "compaction":
                await self.compaction_round(process.mirrored())
                assert self._compaction is not None
                due[task] = self._clock.monotonic() + self._compaction.interval_ms / 1000
            else:
                await self.prune_round(process.mirrored())
                assert self._retention is not None
                due[task] = self._clock.monotonic() + self._retention.interval_ms / 1000

    @staticmethod
    def _chains(mirrored: Sequence[MirroredPartition]) -> list[_Chain]:
        return sorted(
            {
                _Chain((m.cluster, m.topic, str(m.partition), m.destination_topic), m.destination_topic, m.partition)
                for m in mirrored
            },
            key=lambda chain: chain.chain,
        )

    def _failed(self, task: str, what: str, error: BaseException | str) -> None:
        self._families.archive_upkeep_failures.labels(task).inc()
        why = error if isinstance(error, str) else describe_error(error)
        log_event(log, logging.WARNING, f"{task} failed, tried again next round", chain=what, error=why)

    async def prune_round(self, mirrored: Sequence[MirroredPartition]) -> None:
        """Each chain's prefix committed before now minus keep-ms (with a table: what its table holds), and the
        documents no kept moment reads (`sinks.archive.pruning`)."""
        assert self._retention is not None
        now_ms = round(self._clock.wall() * 1000)
        chains = self._chains(mirrored)
        documents = self._archive.documents()
        try:
            try:
                earlier = await archive_retention.retention(documents)
                # Never back: a moment an earlier prune (a `prune --before` later than keep-ms) refused stays refused.
                cut_ms = max(now_ms - self._retention.keep_ms, earlier.kept_since_ms if earlier is not None else 0)
                targets = [chain.table_chain for chain in chains]
                done = await survey_archive(
                    self._archive, documents, targets, ArchiveRetention.of(cut_ms, now_ms), self._tables
                )
                for chain in done.chains:
                    if not chain.removes:
                        self._chain_failures(chain)
                await apply_archive_prune(self._archive, documents, done, self._tables, self._chain_failures)
            except Exception as exc:
                self._failed("prune", "the archive's retention", exc)
                return
        finally:
            await documents.close()
        for directory in done.directories:
            if directory.failed:
                self._failed("prune", directory.directory, directory.failed)
        removed = [c.plan for c in done.changing if c.failed is None and c.plan is not None]
        removed_blobs = sum(plan.removed_blobs for plan in removed)
        removed_bytes = sum(plan.removed_bytes for plan in removed)
        self._families.archive_upkeep_blobs.labels("prune").inc(removed_blobs)
        self._families.archive_upkeep_bytes.labels("prune").inc(removed_bytes)
        self._families.archive_upkeep_last.labels("prune").set(self._clock.wall())
        if removed_blobs:
            summary = {"kept_since": done.kept.kept_since, "blobs": removed_blobs, "bytes": removed_bytes}
            log_event(log, logging.INFO, "archive pruned", **summary)

    def _chain_failures(self, chain: ChainPrune) -> None:
        if chain.failed is not None:
            self._failed("prune", chain.chain.chain, chain.failed)
        elif chain.table_failed is not None:
            self._failed("prune", chain.chain.chain, chain.table_failed)

    async def compaction_round(self, mirrored: Sequence[MirroredPartition]) -> None:
        """Each chain surveyed and its merges planned until the round's byte budget is spent (with a table: the runs
        it holds whole), the runs earlier rounds left redundant retired; the runs merged by one job; then the merged
        blobs committed and their runs retired (`sinks.archive.compacting`: out of their tables first)."""
        assert self._compaction is not None
        settings = self._compaction
        policy = CompactionPolicy.of(settings)
        budget = settings.max_bytes_per_interval
        work: list[MergeWork] = []
        planned: list[tuple[_Chain, Merge]] = []
        redundant: list[RedundantRun] = []
        chains = self._this_round(self._chains(mirrored))
        positions: dict[str, int] = {}
        if self._tables is not None:
            positions, unread = await self._tables.positions([chain.table_chain for chain in chains])
            for chain_text, why in sorted(unread.items()):
                self._failed("compaction", chain_text, f"its table could not be read: {why}")
        for chain in chains:
            if self._tables is not None and chain.chain not in positions:
                continue  # its table cannot say what it holds: nothing of it is touched this round
            store, staging = self._archive.staged_chain(chain.name, chain.partition)
            try:
                survey = await survey_chain(store, policy, self._clock.wall())
                redundant += [RedundantRun(chain.table_chain, c, run) for c, run in survey.redundant_runs]
                self._observe(chain, survey)
                reader = self._archive.reader(chain.name, chain.partition)
                merges = merges_within_table(survey.merges, positions.get(chain.chain) if self._tables else None)
                for merge in merges:
                    if merge.size > budget:
                        budget = 0  # the next round goes on from here
                        break
                    budget -= merge.size
                    work.append(MergeWork(reader, staging, survey.sources(merge), merge.size, self._daily))
                    planned.append((chain, merge))
            except Exception as exc:
                self._failed("compaction", chain.chain, exc)
            finally:
                await store.close()
            self._resume_at = chain.chain if budget <= 0 else chain.chain + "\0"  # that chain again, or the next
            if budget <= 0:
                break
        await self._retire(redundant)
        merged_blobs = 0
        if work:
            try:
                outcomes = await self._merge(tuple(work))
            except Exception as exc:  # the job as a whole (Spark, its session): every planned chain waits a round
                self._failed("compaction", ", ".join(sorted({c.chain for c, _ in planned})), exc)
                outcomes = []
            committed: list[RedundantRun] = []
            for (chain, merge), outcome in zip(planned, outcomes, strict=False):
                committed += await self._commit(chain, merge, outcome)
            merged_blobs = await self._retire(committed)
        self._families.archive_upkeep_blobs.labels("compaction").inc(merged_blobs)
        self._families.archive_upkeep_last.labels("compaction").set(self._clock.wall())

    async def _retire(self, runs: list[RedundantRun]) -> int:
        """`runs` out of their tables and chains; how many blobs went. A drain waits for it (a table commit and a
        few deletes): no redundant run is left for the next start (a kill still may, which every reader reads
        right)."""
        with anyio.CancelScope(shield=True):
            failed = await retire_runs(self._archive, self._tables, runs)
        for chain_text, why in sorted(failed.items()):
            self._failed("compaction", chain_text, why)
        return sum(len(run.run) for run in runs if run.chain.chain not in failed)

    async def _commit(self, chain: _Chain, merge: Merge, outcome: Outcome[list[StagedBlob]]) -> list[RedundantRun]:
        """One run's merged blobs committed; the runs they made redundant."""
        store = self._archive.chain_store(chain.name, chain.partition)
        made: list[RedundantRun] = []
        try:
            for staged in outcome.get():  # one per run, or per day of two blobs or more (daily)
                part = merge.within(staged.first, staged.last)
                with anyio.CancelScope(shield=True):
                    await apply_merge(store, part, staged, log_commit(log, chain.chain, part), remove=False)
                made.append(RedundantRun.of(chain.table_chain, part))
            self._families.archive_upkeep_bytes.labels("compaction").inc(merge.size)
        except Exception as exc:
            self._failed("compaction", chain.chain, exc)
        finally:
            await store.close()
        return made

    def _this_round(self, chains: list[_Chain]) -> list[_Chain]:
        """At most CHAINS_PER_ROUND of `chains` (in chain order), from where the last round stopped, wrapping: each
        round's listings stay bounded at any estate size, and a round that spent its byte budget early leaves no
        chain behind for ever."""
        start = bisect.bisect_left([chain.chain for chain in chains], self._resume_at)
        return (chains[start:] + chains[:start])[:CHAINS_PER_ROUND]

    def _observe(self, chain: _Chain, survey: ChainSurvey) -> None:
        self._families.archive_blobs.labels(*chain.labels).set(survey.blobs)
        self._families.archive_bytes.labels(*chain.labels).set(survey.size)
