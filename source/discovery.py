"""Reads what the source clusters hold, for the estate planner (`config.estate`).

One metadata request per cluster that a selection entry reads from, however many entries and
partitions; single-form entries need none. A cluster that cannot be read is reported per cluster, so
discovery can go on with the others and try again at its next interval.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from config.estate import Entry, EstatePlan, Shard, expand
from core.errors import SourceError
from source.offsets import SourceClusters


@dataclass(frozen=True)
class ClusterRead:
    topics: dict[str, dict[str, int]]  # cluster → topic → partition count, for the clusters that answered
    errors: dict[str, SourceError]  # cluster → why it could not be read


async def read_clusters(clusters: SourceClusters, entries: Iterable[Entry]) -> ClusterRead:
    sources = {entry.cluster: entry for entry in entries if entry.single is None}
    topics: dict[str, dict[str, int]] = {}
    errors: dict[str, SourceError] = {}
    for name, entry in sources.items():
        try:
            topics[name] = await clusters.get(name, entry.source, entry.source_field).topic_partitions()
        except SourceError as exc:
            errors[name] = exc
    return ClusterRead(topics, errors)


async def plan_estate(clusters: SourceClusters, entries: tuple[Entry, ...], shard: Shard | None) -> EstatePlan:
    """The estate as the clusters hold it now; the first unreadable cluster is an error (`plan`, `verify`: they
    answer for the whole estate or not at all)."""
    plan, errors = await plan_readable(clusters, entries, shard)
    for error in errors.values():
        raise error
    return plan


async def plan_readable(
    clusters: SourceClusters, entries: tuple[Entry, ...], shard: Shard | None
) -> tuple[EstatePlan, dict[str, SourceError]]:
    """The estate as the clusters that answer hold it now, and why each other cluster could not be read: its
    selections select nothing until it answers (`run` starts the rest and discovers it later, `status` lists
    the rest and names it)."""
    read = await read_clusters(clusters, entries)
    return expand(entries, read.topics, shard), read.errors
