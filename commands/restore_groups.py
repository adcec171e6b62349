"""A restore's consumer-group positions (`group-positions`): where the selected groups were, from the archive's
newest positions of each source cluster (`sinks.archive.group_positions`), committed on the destination once the records
are in, so consumers continue there as they would have at the source.

Each position is clipped to the restored range of its partition (`[first, end]`: a consumer behind the range
starts at its first record, one past it at its end). preserve commits it as it is (the offsets are the archived
ones); renumber commits the destination offset of the first restored record at or after it (its
`mirror-v3.source-offset` header), the rule of the group sync of failover. A group with members on the
destination owns its offsets there: it is left alone, with one WARN line.

Decided by `plan_positions` (frozen data in and out, no I/O); acted on by `restore_positions`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from aiokafka import TopicPartition

from config.model import GroupSelection, KafkaDestination
from config.restore import RestoreConfig
from core.errors import task_group_failures_unwrapped
from core.logs import log_event
from kafka_clients.admin import destination_admin
from kafka_clients.clients import KafkaClients
from kafka_clients.settings import cluster_access
from sinks.archive.documents import ArchiveDocuments
from sinks.archive.group_positions import ArchivedPositions, newest_of_every_cluster
from sinks.kafka.sink import destination_offset_for

log = logging.getLogger("mirror_v3.restore")

Positions = dict[str, dict[tuple[str, int], int]]  # group → (destination topic, partition) → archived offset


@dataclass(frozen=True)
class RestoredRange:
    archived: str  # the chain's archived name
    partition: int
    topic: str  # the destination topic
    first: int  # the restored range of archived offsets: [first, end)
    end: int


def plan_positions(
    documents: Sequence[ArchivedPositions], ranges: Sequence[RestoredRange], selection: GroupSelection
) -> Positions:
    """Each selected group's archived offsets on the restored partitions, clipped to the restored ranges."""
    restored = {(r.archived, r.partition): r for r in ranges}
    planned: Positions = {}
    for document in documents:
        for group, archived in sorted(document.groups.items()):
            if not selection.selects(group):
                continue
            for name, offsets in archived.items():
                for partition, offset in offsets.items():
                    found = restored.get((name, int(partition)))
                    if found is not None:
                        clipped = min(max(offset, found.first), found.end)
                        planned.setdefault(group, {})[(found.topic, found.partition)] = clipped
    return planned


async def archived_positions(
    config: RestoreConfig, ranges: Sequence[RestoredRange], store: ArchiveDocuments
) -> Positions:
    """Each selected group's archived position on the restored partitions (as of the restore's moment), clipped."""
    if config.group_positions is None:
        return {}
    documents = await newest_of_every_cluster(store, config.as_of_ms)
    return plan_positions(documents, ranges, config.group_positions)


# Translations at once: each a search of a few short reads (O(log records) at worst) through a consumer of its own.
TRANSLATIONS_AT_ONCE = 16


class DestinationPositions:
    """Where groups' archived positions lie on the destination: preserve as they are, renumber translated to the
    first restored record at or after each (read from the destination, so only once the records are in). The
    translations run at once (TRANSLATIONS_AT_ONCE), each (partition, offset) once however many groups share it:
    sequential, three groups over four partitions took 3.6 s after a 7 s restore (bench, issue 50)."""

    def __init__(self, destination: KafkaDestination, clients: KafkaClients | None = None) -> None:
        self._renumber = destination.offsets == "renumber"
        self._clients = clients or KafkaClients(  # `clients`: an in-memory destination in tests
            destination.bootstrap_servers,
            cluster_access(destination, "destination").aiokafka(),
            destination.request_timeout_ms,
        )

    async def of(self, planned: Positions) -> Positions:
        if not self._renumber:
            return {group: dict(positions) for group, positions in planned.items()}
        wanted = sorted({(tp, offset) for positions in planned.values() for tp, offset in positions.items()})
        found: dict[tuple[tuple[str, int], int], int] = {}
        limiter = anyio.CapacityLimiter(TRANSLATIONS_AT_ONCE)

        async def translate(tp: tuple[str, int], offset: int) -> None:
            async with limiter:
                found[tp, offset] = await destination_offset_for(self._clients, TopicPartition(*tp), offset)

        with task_group_failures_unwrapped():
            async with anyio.create_task_group() as translations:
                for tp, offset in wanted:
                    translations.start_soon(translate, tp, offset)
        return {
            group: {tp: found[tp, offset] for tp, offset in positions.items()} for group, positions in planned.items()
        }


async def restore_positions(
    config: RestoreConfig, ranges: Sequence[RestoredRange], store: ArchiveDocuments, *, dry_run: bool
) -> list[str]:
    """Commit (unless `dry_run`) each selected group's position; returns the lines the command prints."""
    selection = config.group_positions
    if selection is None:
        return []
    planned = await archived_positions(config, ranges, store)
    if not planned:
        return [f"no archived position of a group {_patterns(selection)} on the restored partitions"]
    destination = config.destination
    admin = destination_admin(destination)
    lines = []
    kept: Positions = {}
    for group, positions in sorted(planned.items()):
        if await admin.group_has_members(group):
            log_event(
                log, logging.WARNING, "group has members on the destination: its position is not restored", group=group
            )
            lines.append(f"group {group}: not restored (it has members on the destination)")
        elif dry_run:
            how = "as archived" if destination.offsets == "preserve" else "translated once the records are in"
            lines.append(f"would commit group {group} at {listed(positions)} ({how})")
        else:
            kept[group] = positions
    for group, targets in sorted((await DestinationPositions(destination).of(kept)).items()):
        await admin.commit_group_offsets(group, targets)
        log_event(log, logging.INFO, "group position restored", group=group, offsets=listed(targets))
        lines.append(f"group {group}: committed {listed(targets)}")
    return lines


def listed(offsets: dict[tuple[str, int], int]) -> str:
    return ",".join(f"{topic}-{partition}@{offset}" for (topic, partition), offset in sorted(offsets.items()))


def _patterns(selection: GroupSelection) -> str:
    return "matching " + " or ".join(repr(p) for p in selection.groups)
