"""One Spark job for `compact`: each task merges runs of blobs into staged merged blobs (`sinks.blob.merging`) and
returns them (`workers.range_job.run_items`); the driver commits them. Runs of many chains share a job, packed by
size over the session's cores; no record reaches the driver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sinks.blob.merging import MergeSource, merge_blobs
from sinks.blob.reading import BlobReader
from sinks.blob.staging import BlobStaging, StagedBlob
from workers.job_packing import pack
from workers.range_job import JobSpec, Outcome, balanced_packs, run_items

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class MergeWork:
    """One run of one chain: read with `reader`, staged with `staging` (`daily`: cut where the UTC day changes);
    `size` weighs it for packing."""

    reader: BlobReader
    staging: BlobStaging
    run: tuple[MergeSource, ...]
    size: int
    daily: bool = False


def run_compaction_job(
    spark: SparkSession, work: tuple[MergeWork, ...], job_group: str, tasks: int | None = None
) -> list[Outcome[list[StagedBlob]]]:
    """Merge every run; one outcome per run (its merged blobs: one, or one per day), in order (a run that failed is
    its own outcome, not the job's). `tasks`: at most that many tasks (the running mirror's upkeep: 1, at most one
    core beside the flushes); None: one per core of the session."""
    spec = JobSpec(job_group, "mirror-v3.compaction", f"compact {len(work)} runs")
    weights = [max(1, item.size // (1024 * 1024)) for item in work]
    packs = balanced_packs(spark, weights) if tasks is None else pack(weights, tasks)
    return run_items(spark, work, packs, _merge, spec)


def _merge(work: MergeWork, state: dict[str, Any]) -> list[StagedBlob]:
    return merge_blobs(work.reader, work.staging, work.run, work.daily)
