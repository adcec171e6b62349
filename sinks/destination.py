"""One configured destination, chosen once by its kind (`sinks.destinations.open_destination`) and called through
by everyone above it: where each mirror's chain lives, the sink that writes it (wrapped in the retry layer), the
leases that keep one writer per chain, its health as the mirrors' retries see it, and what else the kind offers:
a blob destination keeps an archive (`Archive`: its chains listed, read back, and its documents), a Kafka
destination is a cluster others read back (`DestinationCluster`). What the run process
keeps beside the mirrors for it is data (`DestinationServices`), so the supervisor asks no kind.

A kind is a package under `sinks/` with one subclass of `Destination`, and one line in `sinks.destinations`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from config.estate import MirrorSpec
from config.model import ArchiveGroupsConfig, CompactionConfig, KafkaDestination, RetentionConfig, TableConfig
from kafka_clients.admin import ClusterAdmin
from kafka_clients.schema_registry import RegistryAccess
from sinks.archive.format import check_format
from sinks.base import Sink
from sinks.destination_health import DestinationHealth
from sinks.leases import Holder, Leases, LeaseStore
from sinks.retry import RetryingSink, RetryPolicy

if TYPE_CHECKING:  # the kinds' packages import this module
    from sinks.archive.documents import ArchiveDocuments
    from sinks.blob.chain import BlobStore
    from sinks.blob.reading import BlobReader
    from sinks.blob.staging import BlobStaging
    from sinks.schemas.archive import SchemaArchive
    from sinks.schemas.rewrite import SchemaRewrite
    from sinks.tables.iceberg import IcebergCatalog

# A mirror's source schema registry (None: its entry copies no schemas); the caller makes it, as the destination
# layer builds no source client (tests/test_layers.py).
SourceRegistries = Callable[[MirrorSpec], RegistryAccess | None]
# Cluster ids of (the mirror's source, the destination) for renumber's loop guard (supervisor.cluster_ids).
ClusterIds = tuple[str, str]


def chain_name(destination_name: str, partition: int) -> str:
    """How a lease (and a message) names a chain: `<dest-name>/<partition>`."""
    return f"{destination_name}/{partition}"


@dataclass(frozen=True)
class DestinationServices:
    """What a destination's settings ask the run process to keep beside its mirrors; None: nothing of that."""

    create_topics: KafkaDestination | None = None  # the mirrored topics made and kept in step (topic_manager)
    sync_groups: KafkaDestination | None = None  # the source groups' positions translated (group_sync)
    loop_guard: KafkaDestination | None = None  # renumber: the clusters' ids, so no mirror writes its own source
    topic_metadata_every_s: float | None = None  # each archived topic's metadata kept (topic_archiver)
    group_positions: ArchiveGroupsConfig | None = None  # the source groups' positions kept (group_archiver)
    schema_registry: RegistryAccess | None = None  # where mirrors that copy schemas register them (watched)
    table: TableConfig | None = None  # the archive kept as a table too (table_keeper)
    daily: bool = False  # the destination's blobs each hold one UTC day (flush.daily): its table is partitioned by day
    compaction: CompactionConfig | None = None  # how its chains' small blobs are merged (compact, archive_upkeep)
    retention: RetentionConfig | None = None  # how long its chains keep what they committed (archive_upkeep)


class Destination(ABC):
    """The configured destination of a process or command.

    `holder`: the process that writes, when it writes (`run`): its sinks take their chain's lease before they touch
    it, and `leases` is kept renewed by the run process."""

    def __init__(self, where: str, retry: RetryPolicy, holder: Holder | None) -> None:
        self.where = where  # the destination as a whole, as messages and the `destination_up` gauge name it
        self.retry = retry
        self.health = DestinationHealth(where)  # from every built sink's retries
        self._holder = holder
        self._leases: Leases | None = None

    @abstractmethod
    def location(self, destination_name: str, partition: int) -> str:
        """Where a mirror writes, as its sink's `description` says it (`plan` shows it without building one)."""

    @abstractmethod
    def _lease_store(self) -> LeaseStore: ...

    @abstractmethod
    def _sink(
        self,
        mirror: MirrorSpec,
        take_lease: Callable[[], Awaitable[None]] | None,
        cluster_ids: ClusterIds | None,
    ) -> Sink[Any]: ...

    @property
    def services(self) -> DestinationServices:
        return DestinationServices()

    @property
    def archive(self) -> Archive | None:
        """The blob archive this destination keeps (None: it keeps none, as a Kafka destination)."""
        return None

    @property
    def cluster(self) -> DestinationCluster | None:
        """The Kafka cluster this destination is (None: it is none)."""
        return None

    def resolve(self) -> None:  # noqa: B027 - a kind that reads nothing from the environment has nothing to do
        """Read now what the kind needs from the environment (secrets, TLS files): ConfigReferenceError at once
        rather than at the first sink (`status` reports it as the destination's problem)."""

    @property
    def leases(self) -> Leases | None:
        """The chains' leases of a writing process (None: this one only reads)."""
        if self._leases is None and self._holder is not None:
            self._leases = Leases(self._lease_store(), self._holder, self.retry)
        return self._leases

    def sink(
        self,
        mirror: MirrorSpec,
        on_retry: Callable[[int], None] = lambda _: None,
        retries: bool = True,
        cluster_ids: ClusterIds | None = None,
    ) -> Sink[Any]:
        """The mirror's sink; `retries=False`: without the retry layer (a one-shot command that says what failed)."""
        leases = self.leases
        chain = chain_name(mirror.destination_name, mirror.partition)
        take_lease = None if leases is None else (lambda: leases.take(chain))
        sink = self._sink(mirror, take_lease, cluster_ids)
        if not retries:
            return sink
        return RetryingSink(
            sink,
            self.retry,
            on_retry,
            log_fields={"mirror": mirror.name, "cluster": mirror.cluster},
            spells=self.health.spells(mirror.name),
        )


class Archive(ABC):
    """What a blob destination keeps beyond the sinks' chains, for the readers of the archive (`restore`, `verify`,
    the archivers): its chains listed, each one listed and read back, its documents, and the schemas it kept."""

    where: str
    root: str  # how messages name the archive: its directory, or s3://bucket/prefix

    @abstractmethod
    def chains(self) -> dict[str, list[int]]:
        """{dest-name: partitions} the archive holds. Blocking (run it in a thread)."""

    @abstractmethod
    def chain_store(self, destination_name: str, partition: int) -> BlobStore:
        """The store of one chain, for listing it; close it after use."""

    @abstractmethod
    def reader(self, destination_name: str, partition: int) -> BlobReader:
        """How a Spark task reads the blobs of one chain."""

    @abstractmethod
    def staged_chain(self, destination_name: str, partition: int) -> tuple[BlobStore, BlobStaging]:
        """A chain's store and how a Spark task stages blobs there in the configured encoding (a compaction's)."""

    @abstractmethod
    def file_uri(self, destination_name: str, partition: int, name: str) -> str:
        """A blob's address as a table's file IO reads it (a local path, `s3://bucket/key`)."""

    @abstractmethod
    def chain_directory(self, destination_name: str) -> str:
        """Where a chain name's partitions lie (a directory, `s3://bucket/prefix/<dest-name>`): a Delta table's root."""

    @abstractmethod
    def table_catalog(self) -> IcebergCatalog:
        """Where the archive's tables are registered (`destination.table.catalog`, or the kind's default);
        ConfigReferenceError for a secret property whose variable is not set."""

    def delta_storage(self) -> dict[str, str] | None:
        """How delta-rs reaches the archive's Delta tables (its `storage_options`); None: a local path needs none."""
        return None

    @abstractmethod
    def documents(self) -> ArchiveDocuments:
        """Where the archive keeps its documents (topic metadata, group positions, schemas); one per call, to close."""

    async def check_format(self, writes: bool = False) -> int:
        """The archive's layout version (`sinks.archive.format`): NewerArchiveFormatError for one this release does
        not know; `writes`: a writer records this release's where none is recorded yet."""
        documents = self.documents()
        try:
            return await check_format(documents, self.root, writes)
        finally:
            await documents.close()

    @abstractmethod
    def schema_archive(self, mirror: MirrorSpec) -> SchemaArchive | None:
        """Where the schemas of a mirror with `schemas` are kept (None: it copies none, or this destination was
        opened without source registries, as by `status`)."""


class DestinationCluster(ABC):
    """A destination that is a Kafka cluster, as what reads it back sees it (`verify`, `migrate-schemas`, the
    renumber loop guard)."""

    config: KafkaDestination
    bootstrap_servers: str
    renumbers: bool  # offsets: renumber (each record carries its source offset in a header)
    request_timeout_s: float

    @abstractmethod
    def reader_properties(self) -> dict[str, str]:
        """librdkafka's settings for a task that reads the destination's partitions."""

    @abstractmethod
    def admin(self) -> ClusterAdmin: ...

    @property
    @abstractmethod
    def schema_registry(self) -> RegistryAccess | None:
        """Where mirrors that copy schemas register them (None: no entry may)."""

    @abstractmethod
    def schema_rewrite(self, mirror: MirrorSpec, read_only: bool = False) -> SchemaRewrite | None:
        """What the tasks of a mirror with `schemas` rewrite (None: its records go as they are, or this destination
        was opened without source registries). `read_only`: verify's, which registers nothing."""
