"""The destination topics of a restore, from the archive's topic metadata (`sinks.archive.topic_metadata`): with
`create-topics`, a missing topic is created as the archive saw its source (partition count, and the configs of
`destination.topic-configs` it set); an existing one is checked against it and the differences are reported.

A topic archived before the archive kept metadata is created with as many partitions as its chains say and the
broker's defaults (a WARN says so). Configs the destination broker refuses (an older broker, a policy) are found
one by one with validate-only requests, left out, and named in one WARN line; the rest of the topic is made.

Decided by `plan_restored_topic` (frozen data in and out, no I/O); acted on by `prepare_topics`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from config.restore import RestoreConfig
from core.logs import log_event
from kafka_clients.admin import AdminRequestError, ClusterAdmin, TopicState, destination_admin
from sinks.archive.documents import ArchiveDocuments
from sinks.archive.topic_metadata import ArchivedTopic, as_of

log = logging.getLogger("mirror_v3.restore")


@dataclass(frozen=True)
class RestoredTopic:
    """One destination topic of a restore and what the archive says of it."""

    topic: str  # in the destination
    archived: str  # its archived name
    partitions_needed: int  # one more than the highest restored partition
    metadata: ArchivedTopic | None  # the archive's newest document of it (None: archived before metadata was kept)


@dataclass(frozen=True)
class TopicPlan:
    create: TopicState | None  # create it so
    problems: tuple[str, ...]  # an existing topic that differs from the archive, or a topic made without metadata


def plan_restored_topic(
    restored: RestoredTopic, existing: TopicState | None, allowed: Sequence[str], create: bool
) -> TopicPlan:
    metadata = restored.metadata
    if existing is None:
        if not create:
            return TopicPlan(None, ())  # the destination's own checks refuse it, naming the topic
        if metadata is None:
            return TopicPlan(
                TopicState(restored.partitions_needed),
                (
                    f"no topic metadata archived for {restored.archived!r}: created with {restored.partitions_needed} "
                    "partitions (its chains) and the broker's default configs",
                ),
            )
        configs = {name: value for name, value in metadata.configs.items() if name in allowed}
        partitions = max(metadata.partitions, restored.partitions_needed)
        return TopicPlan(TopicState(partitions, configs, metadata.cleanup_policy), ())
    if metadata is None:
        return TopicPlan(None, ())
    problems = []
    if existing.partitions < metadata.partitions:
        problems.append(f"{existing.partitions} partitions, the archived topic {metadata.partitions}")
    if existing.cleanup_policy != metadata.cleanup_policy:
        problems.append(f"cleanup.policy {existing.cleanup_policy}, archived {metadata.cleanup_policy}")
    for name in sorted(set(allowed) - {"cleanup.policy"}):
        archived, found = metadata.configs.get(name), existing.configs.get(name)
        if archived != found:
            problems.append(f"{name} {found or '(default)'}, archived {archived or '(default)'}")
    return TopicPlan(None, tuple(problems))


async def restored_topics(
    config: RestoreConfig,
    chosen: Sequence[tuple[str, str, int]],
    store: ArchiveDocuments | None,
    as_of_ms: int | None = None,
) -> list[RestoredTopic]:
    """`chosen`: (archived name, destination topic, partition) of every selected chain; each topic with the newest
    document of its metadata (as of `as_of_ms`: the newest seen by then, else its oldest)."""
    needed: dict[tuple[str, str], int] = {}
    for archived, topic, partition in chosen:
        needed[archived, topic] = max(needed.get((archived, topic), 0), partition + 1)
    found = []
    for (archived, topic), partitions in sorted(needed.items(), key=lambda item: item[0][1]):
        metadata = None if store is None else await as_of(store, archived, as_of_ms)
        found.append(RestoredTopic(topic, archived, partitions, metadata))
    return found


async def prepare_topics(
    config: RestoreConfig, topics: Sequence[RestoredTopic], *, dry_run: bool, quiet: bool = False
) -> dict[str, str]:
    """Create (unless `dry_run`) or check each destination topic; returns the topics created (or that a dry run
    would create), each with the line a dry run prints. `quiet`: no WARN for a difference (an early look that the
    real preparation repeats)."""
    destination = config.destination
    admin = destination_admin(destination)
    said: dict[str, str] = {}
    for restored in topics:
        existing = await admin.describe(restored.topic)
        plan = plan_restored_topic(restored, existing, destination.topic_configs, destination.create_topics)
        for problem in [] if quiet else plan.problems:
            event = "destination topic differs from the archive" if existing is not None else "topic metadata missing"
            log_event(log, logging.WARNING, event, topic=restored.topic, problem=problem)
        if plan.create is None:
            continue
        said[restored.topic] = f"would create topic {restored.topic}: {_described(plan.create)}"
        if dry_run:
            continue
        refused = await _create(admin, restored.topic, plan.create, destination.replication_factor)
        log_event(
            log,
            logging.INFO,
            "destination topic created",
            topic=restored.topic,
            archived=restored.archived,
            partitions=plan.create.partitions,
            replication_factor=destination.replication_factor,
            configs=_listed({k: v for k, v in plan.create.configs.items() if k not in refused}),
        )
    return said


async def _create(admin: ClusterAdmin, topic: str, state: TopicState, replication_factor: int) -> list[str]:
    """Create the topic; configs the broker refuses are found one by one, left out and named (one WARN)."""
    try:
        await admin.create(topic, state, replication_factor)
        return []
    except AdminRequestError as exc:
        if not state.configs or "CONFIG" not in exc.reason.upper():
            raise
        first_refusal = exc.reason
    refused = []
    for name, value in sorted(state.configs.items()):
        try:
            await admin.create(
                topic, TopicState(state.partitions, {name: value}), replication_factor, validate_only=True
            )
        except AdminRequestError:
            refused.append(name)
    kept = {name: value for name, value in state.configs.items() if name not in refused}
    await admin.create(topic, TopicState(state.partitions, kept, state.cleanup_policy), replication_factor)
    log_event(
        log,
        logging.WARNING,
        "destination refused archived topic configs, created without them",
        topic=topic,
        refused=_listed({name: state.configs[name] for name in refused}),
        error=first_refusal,
    )
    return refused


def _described(state: TopicState) -> str:
    configs = _listed(state.configs)
    return f"{state.partitions} partitions" + (f", {configs}" if configs else ", the broker's default configs")


def _listed(configs: dict[str, str]) -> str:
    return ",".join(f"{name}={value}" for name, value in sorted(configs.items()))
