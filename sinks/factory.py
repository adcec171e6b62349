"""Build the sink each mirror writes to from the shared destination block.

Every sink is wrapped in the retry layer; S3 sinks of one process share one client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from config.estate import MirrorSpec
from config.model import (
    Destination,
    FilesystemDestination,
    KafkaDestination,
    RetryConfig,
    S3Destination,
)
from config.secrets import env_secret
from core.thread_batches import ThreadBatches
from kafka_clients.admin import destination_admin
from kafka_clients.schema_registry import RegistryAccess
from kafka_clients.settings import cluster_access, registry_access
from sinks.archive_documents import ArchiveDocuments, FilesystemDocuments, S3Documents
from sinks.base import Sink
from sinks.blob_chain import BlobStore
from sinks.blob_reading import BlobReader, FilesystemBlobReader, S3BlobReader
from sinks.blob_sink import BlobSink
from sinks.destination_health import DestinationHealth
from sinks.filesystem import filesystem_sink
from sinks.filesystem_leases import FilesystemLeases
from sinks.kafka import KafkaSink, KafkaSinkSettings, SourceLookup
from sinks.kafka_leases import KafkaLeases
from sinks.leases import Holder, Leases, LeaseStore
from sinks.retry import RetryingSink, RetryPolicy
from sinks.s3 import S3Connection, S3Store
from sinks.s3_leases import S3Leases
from sinks.s3_staging import S3Settings
from sinks.schema_archive import SchemaArchive
from sinks.schema_mapping import FIELDS
from sinks.schema_rewrite import SchemaRewrite
from sinks.staging import BlobFormat


def location(destination: Destination, destination_name: str, partition: int) -> str:
    """Where a mirror writes, as its sink's `description` says it (for `plan`, which builds no sink)."""
    if isinstance(destination, FilesystemDestination):
        return f"filesystem:{Path(destination.root).expanduser().resolve() / destination_name / str(partition)}"
    if isinstance(destination, S3Destination):
        return f"s3://{destination.bucket}/{_s3_key_prefix(destination, destination_name, partition)}/"
    return f"kafka://{destination.bootstrap_servers}/{destination_name}/{partition} ({destination.offsets})"


def root_location(destination: Destination) -> str:
    """The destination as a whole (its outages are the process's, `DestinationHealth`)."""
    if isinstance(destination, FilesystemDestination):
        return f"filesystem:{Path(destination.root).expanduser().resolve()}"
    if isinstance(destination, S3Destination):
        return f"s3://{destination.bucket}/{destination.prefix}"
    return f"kafka://{destination.bootstrap_servers}"


def _s3_key_prefix(destination: S3Destination, destination_name: str, partition: int) -> str:
    return "/".join(p for p in (destination.prefix, destination_name, str(partition)) if p)


# Read access to a mirror's source partition (the Kafka sink checks preserve-mode alignment with it); the caller
# makes it, as the destination layer builds no source client.
SourceLookups = Callable[[MirrorSpec], SourceLookup]


def chain_name(destination_name: str, partition: int) -> str:
    """How a lease names a chain (`sinks.leases`)."""
    return f"{destination_name}/{partition}"


class SinkFactory:
    def __init__(
        self,
        destination: Destination,
        source_lookups: SourceLookups | None = None,
        holder: Holder | None = None,
        source_registries: Callable[[MirrorSpec], RegistryAccess | None] | None = None,
    ) -> None:
        """`source_lookups` is required for a Kafka destination. `holder`: the process that writes, when it writes
        (`run`): its sinks take their chain's lease (`leases`) before they touch it.
        `source_registries`: the schema registry of a mirror's source cluster, for mirrors with `schemas` (`run`)."""
        self._destination = destination
        self._source_lookups = source_lookups
        self._source_registries = source_registries
        self._destination_registry: RegistryAccess | None = None
        if isinstance(destination, KafkaDestination) and destination.schema_registry is not None:
            self._destination_registry = registry_access(destination.schema_registry, "destination.schema-registry")
        self._schema_archives: dict[str, SchemaArchive] = {}  # per archived topic, shared by its partitions' sinks
        self._schema_documents: ArchiveDocuments | None = None
        self._s3: S3Connection | None = None
        self._kafka: KafkaSinkSettings | None = None
        # The filesystem chains' commits, batched per trip to a worker thread (a job's partitions commit together).
        self._commits = ThreadBatches()
        self.leases: Leases | None = None
        self.health = DestinationHealth(root_location(destination))  # from every built sink's retries
        if isinstance(destination, S3Destination):
            self._s3 = S3Connection(s3_settings(destination), destination.prefix)
            if holder is not None:
                store: LeaseStore = S3Leases(self._s3, destination.prefix)
                self.leases = Leases(store, holder, retry_policy(destination.retry))
        elif isinstance(destination, KafkaDestination):
            # Raises config.secrets.ConfigReferenceError when TLS files cannot be loaded.
            self._kafka = kafka_settings(destination)
            if holder is not None:
                kafka_store = KafkaLeases(
                    destination_admin(destination), destination.transaction_id_prefix, destination.bootstrap_servers
                )
                self.leases = Leases(kafka_store, holder, retry_policy(destination.retry))
        elif holder is not None:
            root = Path(destination.root).expanduser().resolve()
            self.leases = Leases(FilesystemLeases(root), holder, retry_policy(destination.retry))

    def _lease_taker(self, mirror: MirrorSpec) -> Callable[[], Awaitable[None]] | None:
        leases = self.leases
        if leases is None:
            return None
        chain = chain_name(mirror.destination_name, mirror.partition)
        return lambda: leases.take(chain)

    def blob_reader(self, mirror: MirrorSpec) -> BlobReader | None:
        """How a Spark task reads this mirror's blobs back; None for a Kafka destination."""
        return self.chain_reader(mirror.destination_name, mirror.partition)

    def chain_reader(self, destination_name: str, partition: int) -> BlobReader | None:
        """How a Spark task reads the blobs of one chain; None for a Kafka destination."""
        destination = self._destination
        if isinstance(destination, FilesystemDestination):
            root = Path(destination.root).expanduser().resolve()
            return FilesystemBlobReader(str(root / destination_name / str(partition)))
        if isinstance(destination, S3Destination):
            assert self._s3 is not None
            key_prefix = _s3_key_prefix(destination, destination_name, partition) + "/"
            return S3BlobReader(self._s3.settings, key_prefix, retry_policy(destination.retry))
        return None

    def documents(self) -> ArchiveDocuments | None:
        """Where a blob destination keeps its documents (topic metadata, group positions); None for Kafka."""
        destination = self._destination
        if isinstance(destination, FilesystemDestination):
            return FilesystemDocuments(destination.root)
        if isinstance(destination, S3Destination):
            assert self._s3 is not None
            return S3Documents(self._s3, destination.prefix)
        return None

    def chain_store(self, destination_name: str, partition: int) -> BlobStore:
        """The store of one chain of a blob destination, for listing it (`restore`); close it after use."""
        destination = self._destination
        if isinstance(destination, FilesystemDestination):
            return filesystem_sink(destination, destination_name, partition).chain.store
        assert isinstance(destination, S3Destination) and self._s3 is not None
        return S3Store(self._s3, _s3_key_prefix(destination, destination_name, partition) + "/")

    def build(
        self,
        mirror: MirrorSpec,
        on_retry: Callable[[int], None] = lambda _: None,
        retries: bool = True,
        cluster_ids: tuple[str, str] | None = None,
    ) -> Sink[Any]:
        destination = self._destination
        sink: Sink[Any]
        if isinstance(destination, FilesystemDestination):
            sink = filesystem_sink(
                destination,
                mirror.destination_name,
                mirror.partition,
                self._lease_taker(mirror),
                self.schema_archive(mirror),
                self._commits,
            )
        elif isinstance(destination, S3Destination):
            assert self._s3 is not None
            key_prefix = _s3_key_prefix(destination, mirror.destination_name, mirror.partition)
            store = S3Store(self._s3, key_prefix + "/")
            staging = store.staging(
                retry_policy(destination.retry), BlobFormat(destination.compression, destination.compression_level)
            )
            sink = BlobSink(
                store,
                description=f"s3://{destination.bucket}/{key_prefix}/",
                staging=staging,
                take_lease=self._lease_taker(mirror),
                schemas=self.schema_archive(mirror),
            )
        elif isinstance(destination, KafkaDestination):
            assert self._kafka is not None
            assert self._source_lookups is not None, "a Kafka destination needs source lookups"
            sink = KafkaSink(
                self._kafka,
                mirror.destination_name,
                mirror.partition,
                source=self._source_lookups(mirror),
                source_name=f"{mirror.topic}-{mirror.partition}",
                cluster_ids=cluster_ids,
                schemas=self.schema_rewrite(mirror),
                take_lease=self._lease_taker(mirror),
            )
        else:  # pragma: no cover - the config union is exhaustive
            raise TypeError(f"unsupported destination {type(destination).__name__}")
        if not retries:
            return sink
        return RetryingSink(
            sink,
            retry_policy(destination.retry),
            on_retry,
            log_fields={"mirror": mirror.name, "cluster": mirror.cluster},
            spells=self.health.spells(mirror.name),
        )

    def schema_archive(self, mirror: MirrorSpec) -> SchemaArchive | None:
        """Where a blob destination keeps the schemas of a mirror with `schemas` (one per archived topic); None for
        the others, a Kafka destination, or a factory given no source registries (`status`)."""
        schemas, destination = mirror.schemas, self._destination
        if schemas is None or self._source_registries is None or isinstance(destination, KafkaDestination):
            return None
        found = self._schema_archives.get(mirror.destination_name)
        if found is None:
            registry = self._source_registries(mirror)
            assert registry is not None, "config.loader checks it"
            if self._schema_documents is None:
                self._schema_documents = self.documents()
            assert self._schema_documents is not None
            fields = tuple(field for field in FIELDS if getattr(schemas, field) != "off")
            found = SchemaArchive(
                self._schema_documents, mirror.destination_name, registry, fields, mirror.cluster, mirror.topic
            )
            self._schema_archives[mirror.destination_name] = found
        return found

    def schema_rewrite(self, mirror: MirrorSpec, read_only: bool = False) -> SchemaRewrite | None:
        """What the tasks of a mirror with `schemas` rewrite (None: its records go as they are, or this factory was
        given no source registries: `status` builds no target). `read_only`: verify's, which registers nothing."""
        schemas, destination = mirror.schemas, self._destination
        if schemas is None or self._source_registries is None or not isinstance(destination, KafkaDestination):
            return None
        registry = self._source_registries(mirror)
        assert registry is not None and self._destination_registry is not None, "config.loader checks both"
        return SchemaRewrite(
            source_registry=registry,
            destination_registry=self._destination_registry,
            key=schemas.key,
            value=schemas.value,
            strategy=schemas.subject_name_strategy,
            source_topic=mirror.topic,
            destination_topic=mirror.destination_name,
            retry=retry_policy(destination.retry),
            read_only=read_only,
        )


def retry_policy(retry: RetryConfig) -> RetryPolicy:
    return RetryPolicy(
        initial_backoff_s=retry.initial_backoff_ms / 1000,
        max_backoff_s=retry.max_backoff_ms / 1000,
        deadline_s=retry.deadline_ms / 1000,
    )


def s3_settings(destination: S3Destination) -> S3Settings:
    def secret(field: str, variable: str | None) -> str | None:
        return None if variable is None else env_secret(variable, f"destination.{field}")

    return S3Settings(
        bucket=destination.bucket,
        region=destination.region,
        endpoint=destination.endpoint,
        path_style=destination.path_style,
        access_key_id=secret("access-key-id-env", destination.access_key_id_env),
        secret_access_key=secret("secret-access-key-env", destination.secret_access_key_env),
        session_token=secret("session-token-env", destination.session_token_env),
        part_size=destination.part_size_bytes,
        request_timeout_s=destination.request_timeout_ms / 1000,
        server_side_encryption=destination.server_side_encryption,
        sse_kms_key_id=destination.sse_kms_key_id,
        storage_class=destination.storage_class,
    )


def kafka_settings(destination: KafkaDestination) -> KafkaSinkSettings:
    access = cluster_access(destination, "destination")
    return KafkaSinkSettings(
        bootstrap_servers=destination.bootstrap_servers,
        client=access.aiokafka(),
        offsets=destination.offsets,
        compression=None if destination.compression == "none" else destination.compression,
        max_batch_bytes=destination.max_batch_bytes,
        request_timeout_ms=destination.request_timeout_ms,
        transaction_id_prefix=destination.transaction_id_prefix,
        retry=retry_policy(destination.retry),
        client_properties=access.librdkafka(),
    )
