"""What the blob destinations (filesystem, S3) share: Parquet blobs in one chain per partition, an archive of
them beside documents and schemas, and the archivers those ask the run process for. A kind says where a chain
lives (`_chain_store`), how its blobs are read back and staged, and where its documents and leases are."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from config.estate import MirrorSpec
from config.model import FilesystemDestination, S3Destination
from config.secrets import env_secret
from sinks.archive.documents import ArchiveDocuments
from sinks.base import Sink
from sinks.blob.chain import BlobStore
from sinks.blob.sink import BlobSink
from sinks.blob.staging import BlobFormat, BlobStaging
from sinks.destination import Archive, ClusterIds, Destination, DestinationServices, SourceRegistries
from sinks.leases import Holder
from sinks.retry import retry_policy
from sinks.schemas.archive import SchemaArchive
from sinks.schemas.mapping import FIELDS
from sinks.tables.iceberg import IcebergCatalog


class BlobDestination(Destination, Archive):
    def __init__(
        self,
        config: FilesystemDestination | S3Destination,
        where: str,
        holder: Holder | None,
        source_registries: SourceRegistries | None,
    ) -> None:
        super().__init__(where, retry_policy(config.retry), holder)
        self._config = config
        self._format = BlobFormat(config.compression, config.compression_level)
        self._source_registries = source_registries
        self._schema_archives: dict[str, SchemaArchive] = {}  # per archived topic, shared by its partitions' sinks
        self._schema_documents: ArchiveDocuments | None = None

    @abstractmethod
    def _staged_chain(
        self, destination_name: str, partition: int, blob_format: BlobFormat
    ) -> tuple[BlobStore, BlobStaging]:
        """A chain's store, and how the Spark tasks stage its blobs for the driver to commit there."""

    def staged_chain(self, destination_name: str, partition: int) -> tuple[BlobStore, BlobStaging]:
        """A chain's store and its staging in the configured encoding (a compaction's merged blobs)."""
        return self._staged_chain(destination_name, partition, self._format)

    @property
    def archive(self) -> Archive:
        return self

    @property
    def services(self) -> DestinationServices:
        interval_ms = self._config.topic_metadata_interval_ms
        return DestinationServices(
            topic_metadata_every_s=interval_ms / 1000 if interval_ms else None,
            group_positions=self._config.archive_groups,
            table=self._config.table,
            daily=self._config.flush.daily,
            compaction=self._config.compaction,
            retention=self._config.retention,
        )

    def table_catalog(self) -> IcebergCatalog:
        table = self._config.table
        configured = None if table is None else table.catalog
        if configured is None:
            return self._default_catalog()
        properties = {"type": configured.type, **self._file_io_properties(), **configured.properties}
        for name, variable in configured.properties_env.items():
            properties[name] = env_secret(variable, f"destination.table.catalog.properties-env.{name}")
        return IcebergCatalog("mirror_v3", properties)

    @abstractmethod
    def _default_catalog(self) -> IcebergCatalog:
        """The catalog of a table block without one (ConfigError where the kind has none)."""

    def _file_io_properties(self) -> dict[str, str]:
        """What the tables' file IO needs to read the archive's files (S3: its endpoint and credentials)."""
        return {}

    def _sink(
        self,
        mirror: MirrorSpec,
        take_lease: Callable[[], Awaitable[None]] | None,
        cluster_ids: ClusterIds | None,
    ) -> Sink[Any]:
        store, staging = self._staged_chain(mirror.destination_name, mirror.partition, self._format)
        return BlobSink(
            store,
            description=self.location(mirror.destination_name, mirror.partition),
            staging=staging,
            take_lease=take_lease,
            schemas=self.schema_archive(mirror),
        )

    def schema_archive(self, mirror: MirrorSpec) -> SchemaArchive | None:
        schemas = mirror.schemas
        if schemas is None or self._source_registries is None:
            return None
        found = self._schema_archives.get(mirror.destination_name)
        if found is None:
            registry = self._source_registries(mirror)
            assert registry is not None, "config.loader checks it"
            if self._schema_documents is None:
                self._schema_documents = self.documents()
            fields = tuple(field for field in FIELDS if getattr(schemas, field) != "off")
            found = SchemaArchive(
                self._schema_documents, mirror.destination_name, registry, fields, mirror.cluster, mirror.topic
            )
            self._schema_archives[mirror.destination_name] = found
        return found
