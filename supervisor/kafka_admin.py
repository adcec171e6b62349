"""Topic administration on one Kafka cluster (librdkafka's AdminClient): what a topic is, and creating, growing and
reconfiguring it. Used by `create-topics` on the source (read only) and the destination.

librdkafka's admin calls return futures; each call waits for them in a worker thread, so the event loop never
blocks. Config changes are incremental (IncrementalAlterConfigs): configs outside the change stay as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import anyio.to_thread
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic

from supervisor.topic_plan import CLEANUP_POLICY, TopicState

T = TypeVar("T")


class TopicAdminError(Exception):
    """An admin request failed; carries the cluster, the topic and what the broker said."""

    def __init__(self, where: str, topic: str, action: str, reason: str) -> None:
        self.where, self.topic, self.action, self.reason = where, topic, action, reason
        super().__init__(f"{action} topic {topic!r} on {where}: {reason}")


class TopicAdmin:
    def __init__(self, bootstrap_servers: str, properties: dict[str, str], timeout_s: float) -> None:
        self._where = bootstrap_servers
        self._timeout_s = timeout_s
        self._client = AdminClient({"bootstrap.servers": bootstrap_servers, **properties})

    async def _wait(self, topic: str, action: str, call: Callable[[], Future[T]]) -> T:
        def run() -> T:
            try:
                return call().result(timeout=self._timeout_s)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else exc
                raise TopicAdminError(self._where, topic, action, _reason(error)) from None
            except TimeoutError:
                raise TopicAdminError(self._where, topic, action, f"no answer within {self._timeout_s:g}s") from None

        return await anyio.to_thread.run_sync(run)

    async def describe(self, topic: str) -> TopicState | None:
        """The topic's partition count and the configs set on it; None if it does not exist."""

        def metadata() -> Any:
            return self._client.list_topics(topic=topic, timeout=self._timeout_s)

        try:
            found = await anyio.to_thread.run_sync(metadata)
        except KafkaException as exc:
            raise TopicAdminError(self._where, topic, "describe", _reason(exc.args[0] if exc.args else exc)) from None
        described = found.topics.get(topic)
        if described is None or described.error is not None:
            if described is not None and described.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TopicAdminError(self._where, topic, "describe", _reason(described.error))
            return None
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries: dict[str, ConfigEntry] = await self._wait(
            topic, "describe configs of", lambda: self._client.describe_configs([resource])[resource]
        )
        configs = {
            name: entry.value
            for name, entry in entries.items()
            # confluent-kafka types `source` as ConfigSource but hands over the bare int.
            if getattr(entry.source, "value", entry.source) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and entry.value is not None
        }
        policy = entries.get(CLEANUP_POLICY)
        return TopicState(len(described.partitions), configs, policy.value if policy and policy.value else "delete")

    async def create(self, topic: str, state: TopicState, replication_factor: int) -> None:
        new = NewTopic(
            topic, num_partitions=state.partitions, replication_factor=replication_factor, config=state.configs
        )
        await self._wait(topic, "create", lambda: self._client.create_topics([new])[topic])

    async def add_partitions(self, topic: str, total: int) -> None:
        await self._wait(
            topic, "add partitions to", lambda: self._client.create_partitions([NewPartitions(topic, total)])[topic]
        )

    async def alter(self, topic: str, set_configs: dict[str, str], delete_configs: tuple[str, ...]) -> None:
        changes = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in set_configs.items()
        ] + [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE) for name in delete_configs]
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=changes)
        await self._wait(
            topic, "alter configs of", lambda: self._client.incremental_alter_configs([resource])[resource]
        )


def _reason(error: object) -> str:
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    return str(error)
