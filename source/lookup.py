"""Read access to a mirror's source partition for the Kafka sink's preserve-mode alignment check."""

from __future__ import annotations

from aiokafka import TopicPartition

from config.estate import MirrorSpec
from kafka_clients.clients import KafkaClients, KafkaRecord
from kafka_clients.schema_registry import RegistryAccess
from kafka_clients.settings import cluster_access, registry_access


class KafkaSourceLookup:
    """SourceLookup over the mirror's source cluster (aiokafka, at the mirror's isolation level)."""

    def __init__(self, clients: KafkaClients, topic: str, partition: int, isolation: str) -> None:
        self._clients = clients
        self._tp = TopicPartition(topic, partition)
        self._isolation = isolation

    async def log_start(self) -> int:
        start, _ = await self._clients.watermarks(self._tp, self._isolation)
        return start

    async def record_at(self, offset: int) -> KafkaRecord | None:
        return await self._clients.record_at(self._tp, offset, self._isolation)


def source_lookup(mirror: MirrorSpec) -> KafkaSourceLookup:
    """The lookup of `mirror`'s source partition, with clients of its source cluster (made per call).

    Raises config.secrets.ConfigReferenceError when the security block's files cannot be loaded."""
    source = mirror.source
    clients = KafkaClients(
        source.bootstrap_servers,
        cluster_access(source, mirror.source_field).aiokafka(),
        source.request_timeout_ms,
    )
    return KafkaSourceLookup(clients, mirror.topic, mirror.partition, source.isolation_level)


def source_registry(mirror: MirrorSpec) -> RegistryAccess | None:
    """How to reach the schema registry of `mirror`'s source cluster (None: it has none)."""
    registry = mirror.source.schema_registry
    if registry is None:
        return None
    return registry_access(registry, f"{mirror.source_field}.schema-registry")
