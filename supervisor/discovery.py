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
            topics[name] = await clusters.get(entry.source, entry.source_field).topic_partitions()
        except SourceError as exc:
            errors[name] = exc
    return ClusterRead(topics, errors)


async def plan_estate(clusters: SourceClusters, entries: tuple[Entry, ...], shard: Shard | None) -> EstatePlan:
    """The estate as the clusters hold it now; the first unreadable cluster is an error (at start, and for
    `plan` and `status`: nothing is running yet that could wait for it)."""
    read = await read_clusters(clusters, entries)
    for error in read.errors.values():
        raise error
    return expand(entries, read.topics, shard)
