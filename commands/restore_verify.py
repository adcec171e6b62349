"""`verify` of a restore (`verify --config R` with a restore config): does the destination hold what the archive says
the restore put there? Read-only, three checks, each named per row:

- **topics**: each destination topic against the archive's metadata of it as of the restore's moment (partition
  count, cleanup policy, the configs `destination.topic-configs` copies), as `restore` checks an existing topic;
- **partitions**: each restored partition holds its whole range: the restore would continue at the range's end
  (where the destination ends, its last record checked against the archive with the IDs of its schemas mapped, as
  a rerun of `restore` finds it: `commands.restore.destination_position`); a destination that holds more than the
  range (records from after `as-of`) is named with how many offsets past its end;
- **groups**: each selected group's committed offsets on the restored partitions equal its archived position,
  clipped to what was restored (renumber: translated, the rule `restore` commits by). Run it before consumers
  start: a position they moved on is reported `ahead`. A group with members is not compared.

Cost: one topic description per destination topic, one inspection of each partition's last record, one offset
list per group and (renumber) O(log n) reads per translated position; no Spark job unless an entry bounds its
range by timestamps.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

import msgspec

from commands.job_progress import JobProgress, JobTasks, reported
from commands.output import about, document_schema, table_lines
from commands.restore import (
    DestinationAheadError,
    RestoreIO,
    RestorePartition,
    SparkKafkaIO,
    archive_of,
    close_all,
    destination_position,
    narrow_by_time,
    plan_schemas,
    select_partitions,
)
from commands.restore_groups import DestinationPositions, RestoredRange, archived_positions
from commands.restore_topics import plan_restored_topic, restored_topics
from config.restore import RestoreConfig
from core.describe import describe_error
from kafka_clients.admin import destination_admin
from sinks.archive.documents import ArchiveDocuments, moment_text
from workers.spark_session import SparkLaunch
from workers.spark_start import start_spark


class TopicCheck(msgspec.Struct, rename="kebab"):
    topic: Annotated[str, about("The destination topic.")]
    archived: Annotated[str, about("Its archived name.")]
    partitions: Annotated[int | None, about("Its partition count on the destination; null when it does not exist.")]
    archived_partitions: Annotated[int | None, about("The archived topic's; null when no metadata was archived.")]
    differences: Annotated[list[str], about("How the destination topic differs from the archive (empty: equal).")]
    note: Annotated[str | None, about("Why it was not compared (no metadata archived), or null.")] = None
    error: Annotated[str | None, about("Why it could not be checked, or null.")] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.partitions is not None and not self.differences


class PartitionCheck(msgspec.Struct, rename="kebab"):
    chain: Annotated[str, about("The archived chain: name/partition.")]
    topic: Annotated[str, about("The destination topic.")]
    partition: Annotated[int, about("The destination partition.")]
    first: Annotated[int, about("First archived offset of the restored range.")]
    end: Annotated[int, about("End (exclusive) of the restored range.")]
    restored_to: Annotated[
        int | None,
        about(
            "Where a rerun of the restore would continue: `end` when the range is whole. Past `end` when the "
            "destination holds more than the archive (as of the moment): where it ends, in archived offsets."
        ),
    ]
    error: Annotated[
        str | None,
        about("Why it is not the restore's (a missing topic, a foreign record, records past the range), or null."),
    ]
    beyond: Annotated[
        int | None,
        about(
            "Offsets the destination holds past the range's end (archived offsets `end` to `restored-to` - 1): more "
            "than the archive held as of the moment; null when it holds none."
        ),
    ] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.restored_to == self.end


class GroupCheck(msgspec.Struct, rename="kebab"):
    group: Annotated[str, about("The consumer group.")]
    topic: Annotated[str, about("The destination topic.")]
    partition: Annotated[int, about("The destination partition.")]
    expected: Annotated[int | None, about("Its archived position as the destination's offset (null: unknown).")]
    committed: Annotated[int | None, about("Its committed offset on the destination; null when none.")]
    result: Annotated[str, about("equal, ahead, behind, missing (nothing committed), not-compared (members), error.")]
    error: Annotated[str | None, about("Why it could not be checked, or null.")] = None

    @property
    def ok(self) -> bool:
        return self.result in ("equal", "not-compared")


class RestoreVerifyDocument(msgspec.Struct):
    """`verify --format json` with a restore config: the exit code is 0 exactly when `ok` is true."""

    ok: Annotated[bool, about("Every topic, partition and group was checked and matches the archive.")]
    as_of: Annotated[str | None, about("The restore's moment (RFC 3339), or null for the newest archive.")]
    topics: list[TopicCheck]
    partitions: list[PartitionCheck]
    groups: list[GroupCheck]


@dataclass(frozen=True)
class RestoreVerification:
    as_of: str | None
    topics: list[TopicCheck]
    partitions: list[PartitionCheck]
    groups: list[GroupCheck]

    @property
    def ok(self) -> bool:
        return all(row.ok for rows in (self.topics, self.partitions, self.groups) for row in rows)


async def verify_restore(config: RestoreConfig, launch: SparkLaunch) -> RestoreVerification:
    """Check the restore `config` describes against its archive. Raises ConfigError for entries that select
    nothing the archive holds (as `restore` does)."""
    archive = archive_of(config)
    parts = await select_partitions(config, archive)
    store = archive.documents()
    try:
        if any(p.since_ms is not None or p.until_ms is not None for p in parts):
            await start_spark(config.spark, launch)
            await narrow_by_time(config, parts)
        await plan_schemas(config, parts, store, read_only=True)  # the last record's IDs mapped, as restore maps them
        topics = await _topics(config, parts, store)
        partitions = await _partitions(config, parts, SparkKafkaIO(launch, None, 0))
        groups = await _groups(config, parts, store)
    finally:
        await close_all(parts)
        await store.close()
    as_of = None if config.as_of_ms is None else moment_text(config.as_of_ms)
    return RestoreVerification(as_of, topics, partitions, groups)


async def _topics(config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments) -> list[TopicCheck]:
    chosen = [(p.archived, p.topic, p.partition) for p in parts]
    admin = destination_admin(config.destination)
    checks = []
    for restored in await restored_topics(config, chosen, store, config.as_of_ms):
        archived_partitions = None if restored.metadata is None else restored.metadata.partitions
        row = TopicCheck(restored.topic, restored.archived, None, archived_partitions, [])
        try:
            existing = await admin.describe(restored.topic)
        except Exception as exc:
            row.error = describe_error(exc)
            checks.append(row)
            continue
        if existing is None:
            row.differences.append("missing on the destination")
        else:
            row.partitions = existing.partitions
            plan = plan_restored_topic(restored, existing, config.destination.topic_configs, create=False)
            row.differences.extend(plan.problems)
            if restored.metadata is None:
                row.note = "no topic metadata archived: not compared"
        checks.append(row)
    return checks


async def _partitions(config: RestoreConfig, parts: list[RestorePartition], io: RestoreIO) -> list[PartitionCheck]:
    """Each part as a rerun of `restore` finds it (`destination_position`: the same rule, the same schema mapping)."""
    checks: list[PartitionCheck] = []
    reading = JobProgress(f"reading {len(parts)} restored partitions", "verify reading", "partitions")
    async with reported(reading, lambda: JobTasks(len(checks), len(parts))):
        for part in parts:
            row = PartitionCheck(part.name, part.topic, part.partition, part.first, part.end, None, None)
            try:
                row.restored_to = await destination_position(config, part, io)
            except DestinationAheadError as exc:
                row.restored_to, row.beyond, row.error = exc.held_to, exc.beyond, str(exc)
            except Exception as exc:
                row.error = describe_error(exc)
            checks.append(row)
    return checks


async def _groups(config: RestoreConfig, parts: list[RestorePartition], store: ArchiveDocuments) -> list[GroupCheck]:
    ranges = [RestoredRange(p.archived, p.partition, p.topic, p.first, p.end) for p in parts]
    planned = await archived_positions(config, ranges, store)
    admin = destination_admin(config.destination)
    translate = DestinationPositions(config.destination)
    checks = []
    for group, positions in sorted(planned.items()):
        try:
            if await admin.group_has_members(group):
                checks += [
                    GroupCheck(group, topic, partition, None, None, "not-compared")
                    for topic, partition in sorted(positions)
                ]
                continue
            expected = (await translate.of({group: positions}))[group]
            committed = await admin.group_offsets(group)
        except Exception as exc:
            checks += [
                GroupCheck(group, topic, partition, None, None, "error", describe_error(exc))
                for topic, partition in sorted(positions)
            ]
            continue
        for key in sorted(expected):
            found = committed.get(key)
            checks.append(GroupCheck(group, key[0], key[1], expected[key], found, compared(expected[key], found)))
    return checks


def compared(expected: int, committed: int | None) -> str:
    if committed is None:
        return "missing"
    return "equal" if committed == expected else "ahead" if committed > expected else "behind"


def render_table(report: RestoreVerification) -> str:
    lines = [] if report.as_of is None else [f"as of {report.as_of}"]
    lines += table_lines(
        ("TOPIC", "ARCHIVED", "PARTITIONS", "ARCHIVED-PARTITIONS", "RESULT"),
        [
            [
                row.topic,
                row.archived,
                _number(row.partitions),
                _number(row.archived_partitions),
                row.error or "; ".join(row.differences) or row.note or "equal",
            ]
            for row in report.topics
        ],
    )
    lines.append("")
    lines += table_lines(
        ("CHAIN", "TOPIC", "PARTITION", "RESTORED-RANGE", "RESULT"),
        [
            [
                row.chain,
                row.topic,
                str(row.partition),
                f"{row.first}-{row.end - 1}" if row.end > row.first else "none",
                row.error or _restored(row),
            ]
            for row in report.partitions
        ],
    )
    if report.groups:
        lines.append("")
        lines += table_lines(
            ("GROUP", "TOPIC", "PARTITION", "EXPECTED", "COMMITTED", "RESULT"),
            [
                [
                    row.group,
                    row.topic,
                    str(row.partition),
                    _number(row.expected),
                    _number(row.committed),
                    row.error or row.result,
                ]
                for row in report.groups
            ],
        )
    return "\n".join(lines)


def _restored(row: PartitionCheck) -> str:
    if row.restored_to is None or row.restored_to >= row.end:
        return "whole"
    if row.restored_to <= row.first:
        return f"nothing restored: {row.end - row.first} offsets missing"
    return f"restored up to {row.restored_to - 1}: {row.end - row.restored_to} offsets missing"


def _number(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_json(report: RestoreVerification) -> str:
    document = RestoreVerifyDocument(report.ok, report.as_of, report.topics, report.partitions, report.groups)
    return msgspec.json.encode(document).decode()


def render_schema() -> str:
    schema = document_schema(RestoreVerifyDocument, "mirror-v3 verify --format json (a restore config)")
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"
