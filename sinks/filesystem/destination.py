"""A filesystem destination: each chain a directory, `<root>/<dest-name>/<partition>/`, of Parquet blobs
committed by a hard link (`sinks.filesystem.store`); leases are lock files (`sinks.filesystem.leases`); documents
are files under the root (`sinks.filesystem.documents`)."""

from __future__ import annotations

from pathlib import Path

from config.model import FilesystemDestination as FilesystemConfig
from core.thread_batches import ThreadBatches
from sinks.blob.chain import BlobStore
from sinks.blob.destination import BlobDestination
from sinks.blob.staging import BlobFormat, BlobStaging
from sinks.destination import SourceRegistries
from sinks.filesystem.catalog import filesystem_chains
from sinks.filesystem.documents import FilesystemDocuments
from sinks.filesystem.leases import FilesystemLeases
from sinks.filesystem.reading import FilesystemBlobReader
from sinks.filesystem.store import FilesystemStore
from sinks.leases import Holder, LeaseStore
from sinks.tables.iceberg import CATALOG_DIRECTORY, WAREHOUSE_DIRECTORY, IcebergCatalog


class FilesystemDestination(BlobDestination):
    def __init__(
        self, config: FilesystemConfig, holder: Holder | None = None, source_registries: SourceRegistries | None = None
    ) -> None:
        self.directory = Path(config.root).expanduser().resolve()  # relative to the working directory
        self.root = str(self.directory)
        super().__init__(config, f"filesystem:{self.directory}", holder, source_registries)
        # The chains' commits, batched per trip to a worker thread (a job's partitions commit together).
        self._commits = ThreadBatches()

    def _directory(self, destination_name: str, partition: int) -> Path:
        return self.directory / destination_name / str(partition)

    def location(self, destination_name: str, partition: int) -> str:
        return f"filesystem:{self._directory(destination_name, partition)}"

    def _lease_store(self) -> LeaseStore:
        return FilesystemLeases(self.directory)

    def _staged_chain(
        self, destination_name: str, partition: int, blob_format: BlobFormat
    ) -> tuple[BlobStore, BlobStaging]:
        store = FilesystemStore(self._directory(destination_name, partition), self._commits)
        return store, store.staging(blob_format)

    def chains(self) -> dict[str, list[int]]:
        return filesystem_chains(self.directory)

    def chain_store(self, destination_name: str, partition: int) -> BlobStore:
        return FilesystemStore(self._directory(destination_name, partition), self._commits)

    def reader(self, destination_name: str, partition: int) -> FilesystemBlobReader:
        return FilesystemBlobReader(str(self._directory(destination_name, partition)))

    def chain_directory(self, destination_name: str) -> str:
        return str(self.directory / destination_name)

    def file_uri(self, destination_name: str, partition: int, name: str) -> str:
        return str(self._directory(destination_name, partition) / name)

    def _default_catalog(self) -> IcebergCatalog:
        # SQLite beside the chains: no server, and the catalog moves, is backed up and pruned with the archive.
        return IcebergCatalog(
            "mirror_v3",
            {
                "type": "sql",
                "uri": f"sqlite:///{self.directory / CATALOG_DIRECTORY / 'iceberg.db'}",
                "warehouse": f"file://{self.directory / WAREHOUSE_DIRECTORY}",
                "init_catalog_tables": "true",
            },
            directory=str(self.directory / CATALOG_DIRECTORY),
        )

    def documents(self) -> FilesystemDocuments:
        return FilesystemDocuments(self.directory)
