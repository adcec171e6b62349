"""Administration of one Kafka cluster (librdkafka's AdminClient): what a topic is, and creating, growing and
reconfiguring it (`create-topics`); consumer groups, their state and committed offsets (group offset sync). The
source is only read; the destination is written.

librdkafka's admin calls return futures; each call waits for them in a worker thread, so the event loop never
blocks. Config changes are incremental (IncrementalAlterConfigs): configs outside the change stay as they are.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio.to_thread
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.admin._topic import TopicDescription
from confluent_kafka.cimpl import NewPartitions, NewTopic

from config.model import KafkaDestination, SourceConfig
from core.errors import MirrorV3Error
from kafka_clients.oauth_tokens import librdkafka_config
from kafka_clients.settings import cluster_access

T = TypeVar("T")
CLEANUP_POLICY = "cleanup.policy"
# A group's coordinator is elsewhere or not ready yet: the request was not processed, ask again.
COORDINATOR_MOVING = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE}
)


@dataclass(frozen=True)
class TopicState:
    """What a topic is, as far as mirroring it goes."""

    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # set on the topic itself (not broker defaults)
    cleanup_policy: str = "delete"  # in effect, wherever it comes from


@dataclass(frozen=True)
class TopicLayout:
    """A topic as an archive keeps it (`sinks.archive.topic_metadata`): what rebuilding it elsewhere needs."""

    partitions: int
    replication_factor: int
    topic_id: str  # Kafka's id of this incarnation of the topic (a deleted and recreated topic has a new one)
    configs: dict[str, str]  # set on the topic itself (not broker defaults)
    cleanup_policy: str  # in effect, wherever it comes from


class AdminRequestError(MirrorV3Error):
    """An admin request failed; carries the cluster, what it was about (a topic or group), and the broker's words."""

    def __init__(self, where: str, subject: str, action: str, reason: str) -> None:
        self.where, self.subject, self.action, self.reason = where, subject, action, reason
        super().__init__(f"{action} {subject} on {where}: {reason}")


class ClusterAdmin:
    def __init__(self, bootstrap_servers: str, properties: dict[str, str], timeout_s: float) -> None:
        self._where = bootstrap_servers
        self._timeout_s = timeout_s
        self._client = AdminClient({"bootstrap.servers": bootstrap_servers, **librdkafka_config(properties)})

    async def _wait(self, subject: str, action: str, call: Callable[[], Future[T]]) -> T:
        """The call's answer. A group request the broker did not take because its coordinator is elsewhere or
        still loading (a fresh cluster creates `__consumer_offsets` on the first group request) is asked again
        until the timeout: the broker refused it unprocessed, so asking again cannot apply it twice."""
        deadline = time.monotonic() + self._timeout_s

        def run() -> T:
            pause = 0.1
            while True:
                try:
                    return call().result(timeout=max(0.1, deadline - time.monotonic()))
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else exc
                    code = error.code() if isinstance(error, KafkaError) else None
                    if code in COORDINATOR_MOVING and time.monotonic() + pause < deadline:
                        time.sleep(pause)
                        pause = min(1.0, pause * 2)
                        continue
                    raise AdminRequestError(self._where, subject, action, _reason(error)) from None
                except TimeoutError:
                    raise AdminRequestError(
                        self._where, subject, action, f"no answer within {self._timeout_s:g}s"
                    ) from None

        # A cancelled caller (the process stopping, a mirror failing) does not wait for librdkafka's answer, which
        # can take the whole timeout (a cluster that refuses the credentials is asked again until then): the thread
        # finishes on its own and its answer is dropped. What was sent is sent either way.
        return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)

    async def describe(self, topic: str) -> TopicState | None:
        """The topic's partition count and the configs set on it; None if it does not exist."""

        def metadata() -> Any:
            return self._client.list_topics(topic=topic, timeout=self._timeout_s)

        try:
            found = await anyio.to_thread.run_sync(metadata, abandon_on_cancel=True)
        except KafkaException as exc:
            raise AdminRequestError(
                self._where, f"topic {topic!r}", "describe", _reason(exc.args[0] if exc.args else exc)
            ) from None
        described = found.topics.get(topic)
        if described is None or described.error is not None:
            if described is not None and described.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise AdminRequestError(self._where, f"topic {topic!r}", "describe", _reason(described.error))
            return None
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries: dict[str, ConfigEntry] = await self._wait(
            f"topic {topic!r}", "describe configs of", lambda: self._client.describe_configs([resource])[resource]
        )
        policy = entries.get(CLEANUP_POLICY)
        return TopicState(
            len(described.partitions), _set_on_topic(entries), policy.value if policy and policy.value else "delete"
        )

    async def layouts(self, topics: Sequence[str]) -> dict[str, TopicLayout]:
        """Every one of `topics` that exists, as an archive keeps it, in two requests whatever their number (the
        topics' descriptions, then their configs); a topic that does not exist is left out."""
        if not topics:
            return {}
        described = self._client.describe_topics(TopicCollection(list(topics)))

        def existing() -> dict[str, TopicDescription]:
            found = {}
            for topic, future in described.items():
                try:
                    found[topic] = future.result(timeout=self._timeout_s)
                except KafkaException as exc:
                    error = exc.args[0] if exc.args else exc
                    if isinstance(error, KafkaError) and error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        continue
                    raise AdminRequestError(self._where, f"topic {topic!r}", "describe", _reason(error)) from None
                except TimeoutError:
                    raise AdminRequestError(
                        self._where, f"topic {topic!r}", "describe", f"no answer within {self._timeout_s:g}s"
                    ) from None
            return found

        found = await anyio.to_thread.run_sync(existing, abandon_on_cancel=True)
        resources = {topic: ConfigResource(ResourceType.TOPIC, topic) for topic in found}
        configured = self._client.describe_configs(list(resources.values())) if resources else {}
        layouts = {}
        for topic, description in found.items():
            entries: dict[str, ConfigEntry] = await self._wait(
                f"topic {topic!r}", "describe configs of", _given(configured[resources[topic]])
            )
            policy = entries.get(CLEANUP_POLICY)
            layouts[topic] = TopicLayout(
                partitions=len(description.partitions),
                replication_factor=len(description.partitions[0].replicas) if description.partitions else 0,
                topic_id=str(description.topic_id),
                configs=_set_on_topic(entries),
                cleanup_policy=policy.value if policy and policy.value else "delete",
            )
        return layouts

    async def create(self, topic: str, state: TopicState, replication_factor: int, validate_only: bool = False) -> None:
        """Create the topic (`validate_only`: only ask whether the broker would)."""
        new = NewTopic(
            topic, num_partitions=state.partitions, replication_factor=replication_factor, config=state.configs
        )
        await self._wait(
            f"topic {topic!r}", "create", lambda: self._client.create_topics([new], validate_only=validate_only)[topic]
        )

    async def add_partitions(self, topic: str, total: int) -> None:
        await self._wait(
            f"topic {topic!r}",
            "add partitions to",
            lambda: self._client.create_partitions([NewPartitions(topic, total)])[topic],
        )

    async def alter(self, topic: str, set_configs: dict[str, str], delete_configs: tuple[str, ...]) -> None:
        changes = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in set_configs.items()
        ] + [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE) for name in delete_configs]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=changes)
        await self._wait(
            f"topic {topic!r}", "alter configs of", lambda: self._client.incremental_alter_configs([resource])[resource]
        )

    async def cluster_id(self) -> str:
        """The cluster's id: the same whatever address reaches it."""

        def metadata() -> Any:
            return self._client.list_topics(timeout=self._timeout_s)

        try:
            found = await anyio.to_thread.run_sync(metadata, abandon_on_cancel=True)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else exc
            raise AdminRequestError(self._where, "the cluster", "describe", _reason(error)) from None
        if not found.cluster_id:
            raise AdminRequestError(self._where, "the cluster", "describe", "the broker sent no cluster id")
        return str(found.cluster_id)

    # -- consumer groups ------------------------------------------------------------------------------

    async def groups(self) -> list[str]:
        listed = await self._wait("consumer groups", "list", lambda: self._client.list_consumer_groups())
        return sorted(group.group_id for group in listed.valid)

    async def group_has_members(self, group: str) -> bool:
        """Whether consumers are in the group now (they own its offsets); False for a group that does not exist."""
        described = await self._wait(
            f"group {group!r}", "describe", lambda: self._client.describe_consumer_groups([group])[group]
        )
        return bool(described.members)

    async def group_offsets(self, group: str) -> dict[tuple[str, int], int]:
        """The group's committed offsets, by (topic, partition)."""
        return {tp: offset for tp, (offset, _) in (await self.group_offsets_with_metadata(group)).items()}

    async def commit_group_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Set the group's committed offsets (the group must have no members)."""
        await self._commit(
            group, [TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()]
        )

    async def group_offsets_with_metadata(
        self, group: str, partitions: Sequence[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], tuple[int, str]]:
        """The group's committed offsets with the metadata string committed beside each, by (topic, partition):
        of `partitions`, or of every partition the group committed when None. A group without offsets has none."""
        wanted = None if partitions is None else [TopicPartition(topic, partition) for topic, partition in partitions]
        request = [ConsumerGroupTopicPartitions(group, wanted)]
        answer = await self._wait(
            f"group {group!r}", "list offsets of", lambda: self._client.list_consumer_group_offsets(request)[group]
        )
        return {
            (tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in answer.topic_partitions if tp.offset >= 0
        }

    async def commit_group_offsets_with_metadata(
        self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]
    ) -> dict[tuple[str, int], str]:
        """Commit each (offset, metadata) for the group, in one request (the group must have no members). The
        broker judges each partition on its own: those it refused, with the error's name (UNKNOWN_TOPIC_OR_PART for
        a topic that does not exist); the others are committed."""
        return await self._commit(
            group,
            [
                TopicPartition(topic, partition, offset, metadata=metadata)
                for (topic, partition), (offset, metadata) in offsets.items()
            ],
        )

    async def _commit(self, group: str, partitions: list[TopicPartition]) -> dict[tuple[str, int], str]:
        request = [ConsumerGroupTopicPartitions(group, partitions)]
        answer = await self._wait(
            f"group {group!r}", "commit offsets of", lambda: self._client.alter_consumer_group_offsets(request)[group]
        )
        return {
            (tp.topic, tp.partition): tp.error.name() if isinstance(tp.error, KafkaError) else str(tp.error)
            for tp in answer.topic_partitions
            if tp.error is not None
        }

    async def delete_group(self, group: str) -> None:
        """Delete a group that has no members, with its committed offsets."""
        await self._wait(f"group {group!r}", "delete", lambda: self._client.delete_consumer_groups([group])[group])


def _given(future: Future[T]) -> Callable[[], Future[T]]:
    """A call that hands over a future made already (one of a batch request's)."""
    return lambda: future


def _set_on_topic(entries: dict[str, ConfigEntry]) -> dict[str, str]:
    """The configs set on the topic itself, not the broker's defaults."""
    return {
        name: entry.value
        for name, entry in entries.items()
        # confluent-kafka types `source` as ConfigSource but hands over the bare int.
        if getattr(entry.source, "value", entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and entry.value is not None
    }


def destination_admin(destination: KafkaDestination) -> ClusterAdmin:
    access = cluster_access(destination, "destination")
    return ClusterAdmin(destination.bootstrap_servers, access.librdkafka(), destination.request_timeout_ms / 1000)


class SourceAdmins:
    """One ClusterAdmin per source cluster (its settings and the field they are written in), made on first use."""

    def __init__(self, timeout_s: float) -> None:
        self._timeout_s = timeout_s
        self.admins: dict[tuple[str, str], ClusterAdmin] = {}

    def get(self, source: SourceConfig, field: str) -> ClusterAdmin:
        key = (source.bootstrap_servers, field)
        if key not in self.admins:
            properties = cluster_access(source, field).librdkafka()
            self.admins[key] = ClusterAdmin(source.bootstrap_servers, properties, self._timeout_s)
        return self.admins[key]


def _reason(error: object) -> str:
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(error)
