"""A Kafka destination: each mirror a partition of a topic of the destination cluster, written in transactions
(`sinks.kafka.sink`, `sinks.kafka.produce`); leases are consumer-group members and transactional fencing
(`sinks.kafka.leases`). It keeps no archive, and asks the run process for the topics, group positions and loop
guard its settings name."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cached_property
from typing import Any

from config.estate import MirrorSpec
from config.model import KafkaDestination as KafkaConfig
from kafka_clients.admin import ClusterAdmin, destination_admin
from kafka_clients.schema_registry import RegistryAccess
from kafka_clients.settings import cluster_access, registry_access
from sinks.base import Sink
from sinks.destination import ClusterIds, Destination, DestinationCluster, DestinationServices, SourceRegistries
from sinks.kafka.leases import KafkaLeases
from sinks.kafka.sink import KafkaSink, KafkaSinkSettings, SourceLookup
from sinks.leases import Holder, LeaseStore
from sinks.retry import retry_policy
from sinks.schemas.rewrite import SchemaRewrite

# Read access to a mirror's source partition (the sink checks preserve-mode alignment with it); the caller makes it,
# as the destination layer builds no source client.
SourceLookups = Callable[[MirrorSpec], SourceLookup]


def kafka_settings(config: KafkaConfig) -> KafkaSinkSettings:
    """How the sinks and the tasks' producers reach the cluster; ConfigReferenceError when TLS files cannot be read."""
    access = cluster_access(config, "destination")
    return KafkaSinkSettings(
        bootstrap_servers=config.bootstrap_servers,
        client=access.aiokafka(),
        offsets=config.offsets,
        compression=None if config.compression == "none" else config.compression,
        max_batch_bytes=config.max_batch_bytes,
        request_timeout_ms=config.request_timeout_ms,
        transaction_id_prefix=config.transaction_id_prefix,
        retry=retry_policy(config.retry),
        client_properties=access.librdkafka(),
    )


class KafkaDestination(Destination, DestinationCluster):
    def __init__(
        self,
        config: KafkaConfig,
        holder: Holder | None = None,
        source_lookups: SourceLookups | None = None,
        source_registries: SourceRegistries | None = None,
    ) -> None:
        """`source_lookups`: required to build a sink."""
        super().__init__(f"kafka://{config.bootstrap_servers}", retry_policy(config.retry), holder)
        self.config = config
        self.bootstrap_servers = config.bootstrap_servers
        self.renumbers = config.offsets == "renumber"
        self.request_timeout_s = config.request_timeout_ms / 1000
        self._source_lookups = source_lookups
        self._source_registries = source_registries

    @cached_property
    def _settings(self) -> KafkaSinkSettings:
        return kafka_settings(self.config)

    def resolve(self) -> None:
        self._settings  # noqa: B018 - the TLS files read now

    @property
    def cluster(self) -> DestinationCluster:
        return self

    @property
    def services(self) -> DestinationServices:
        config = self.config
        return DestinationServices(
            create_topics=config if config.create_topics else None,
            sync_groups=config if config.sync_groups is not None else None,
            loop_guard=config if self.renumbers else None,
            schema_registry=self.schema_registry,
        )

    def location(self, destination_name: str, partition: int) -> str:
        return f"kafka://{self.bootstrap_servers}/{destination_name}/{partition} ({self.config.offsets})"

    def _lease_store(self) -> LeaseStore:
        return KafkaLeases(destination_admin(self.config), self.config.transaction_id_prefix, self.bootstrap_servers)

    def _sink(
        self,
        mirror: MirrorSpec,
        take_lease: Callable[[], Awaitable[None]] | None,
        cluster_ids: ClusterIds | None,
    ) -> Sink[Any]:
        assert self._source_lookups is not None, "a Kafka destination's sinks need source lookups"
        return KafkaSink(
            self._settings,
            mirror.destination_name,
            mirror.partition,
            source=self._source_lookups(mirror),
            source_name=f"{mirror.topic}-{mirror.partition}",
            cluster_ids=cluster_ids,
            schemas=self.schema_rewrite(mirror),
            take_lease=take_lease,
        )

    def reader_properties(self) -> dict[str, str]:
        return cluster_access(self.config, "destination").librdkafka()

    def admin(self) -> ClusterAdmin:
        return destination_admin(self.config)

    @cached_property
    def schema_registry(self) -> RegistryAccess | None:
        registry = self.config.schema_registry
        return None if registry is None else registry_access(registry, "destination.schema-registry")

    def schema_rewrite(self, mirror: MirrorSpec, read_only: bool = False) -> SchemaRewrite | None:
        schemas = mirror.schemas
        if schemas is None or self._source_registries is None:
            return None
        registry = self._source_registries(mirror)
        assert registry is not None and self.schema_registry is not None, "config.loader checks both"
        return SchemaRewrite(
            source_registry=registry,
            destination_registry=self.schema_registry,
            key=schemas.key,
            value=schemas.value,
            strategy=schemas.subject_name_strategy,
            source_topic=mirror.topic,
            destination_topic=mirror.destination_name,
            retry=self.retry,
            read_only=read_only,
        )
