"""`plan`: every (cluster, topic, partition) a config would mirror, its mirror name, where it goes and,
with `--shard I/N`, which shard owns it. Reads the source clusters' metadata; writes nothing.
"""

from __future__ import annotations

from typing import Annotated

import anyio
import msgspec

from commands.output import about, table_lines
from config.estate import Shard, compile_entries
from config.model import Config
from core.errors import SourceError
from sinks.destinations import open_destination
from source.discovery import plan_estate
from source.offsets import SourceClusters


class PlannedMirror(msgspec.Struct, rename="kebab"):
    cluster: Annotated[str, about("The source cluster's name (its bootstrap list when written out in the entry).")]
    topic: Annotated[str, about("Source topic.")]
    partition: Annotated[int, about("Source partition.")]
    mirror: Annotated[str, about("Name in logs: the entry's, plus .<topic>-<partition> for a selection.")]
    entry: Annotated[str, about("The config entry that selects it, e.g. mirrors[2].")]
    destination: Annotated[str, about("Where it is written: a directory, an S3 prefix or a Kafka topic partition.")]
    owner: Annotated[int | None, about("The shard that mirrors it (with --shard I/N), else null.")] = None


class MissingTopicRow(msgspec.Struct, rename="kebab"):
    cluster: str
    topic: str
    entry: str


class PlanDocument(msgspec.Struct, rename="kebab"):
    """`plan --format json`."""

    mirrors: list[PlannedMirror]
    missing_topics: Annotated[
        list[MissingTopicRow], about("Topics an entry names that the cluster does not hold (yet).")
    ]
    shards: Annotated[int | None, about("N of --shard I/N, else null.")] = None


async def collect_plan(config: Config, timeout_s: float, shard: Shard | None) -> PlanDocument:
    clusters = SourceClusters()
    try:
        with anyio.fail_after(timeout_s):
            plan = await plan_estate(clusters, compile_entries(config), None)  # all shards: the owner is a column
    except TimeoutError:
        raise SourceError(f"reading the source clusters' topics timed out after {timeout_s:g}s") from None
    finally:
        with anyio.CancelScope(shield=True):
            await clusters.close()
    destination = open_destination(config.destination)
    rows = [
        PlannedMirror(
            cluster=spec.cluster,
            topic=spec.topic,
            partition=spec.partition,
            mirror=spec.name,
            entry=f"mirrors[{spec.entry}]",
            destination=destination.location(spec.destination_name, spec.partition),
            owner=None if shard is None else shard.owner(*spec.key),
        )
        for spec in plan.mirrors
    ]
    missing = [MissingTopicRow(m.cluster, m.topic, m.field) for m in plan.missing]
    return PlanDocument(rows, missing, None if shard is None else shard.count)


def render_json(plan: PlanDocument) -> str:
    return msgspec.json.encode(plan).decode()


def render_table(plan: PlanDocument) -> str:
    headers = ["CLUSTER", "TOPIC", "PARTITION", "MIRROR", "ENTRY", "DESTINATION"]
    if plan.shards is not None:
        headers.append("OWNER")
    body = []
    for row in plan.mirrors:
        cells = [row.cluster, row.topic, str(row.partition), row.mirror, row.entry, row.destination]
        if plan.shards is not None:
            cells.append(f"{row.owner}/{plan.shards}")
        body.append(cells)
    lines = table_lines(headers, body)
    lines.append(f"{len(plan.mirrors)} partition{'s' if len(plan.mirrors) != 1 else ''}")
    lines += [f"missing: {m.cluster}: topic {m.topic} ({m.entry}) does not exist" for m in plan.missing_topics]
    return "\n".join(lines)
