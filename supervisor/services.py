"""Which process services the config asks for, built in one place (`supervisor.process_service` is their shape):
the destination says what its settings want (`sinks.destination.DestinationServices`), the entries what theirs do
(source-offset commits, the schema registries of mirrors that copy schemas)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from config.estate import Entry
from core.reachability import Outage
from kafka_clients.admin import SourceAdmins
from kafka_clients.schema_registry import RegistryAccess
from kafka_clients.settings import registry_access
from sinks.destination import Destination
from sinks.tables.upkeep import ArchiveTables
from supervisor.archive_upkeep import ArchiveUpkeep
from supervisor.group_archiver import GroupArchiver
from supervisor.group_sync import GroupSync
from supervisor.process_service import ProcessService
from supervisor.registry_watch import RegistryWatch
from supervisor.source_commits import SourceOffsetCommitter
from supervisor.table_keeper import TableKeeper
from supervisor.topic_archiver import TopicArchiver
from supervisor.topic_manager import TopicManager
from telemetry.metrics import MetricFamilies


@dataclass
class ProcessServices:
    services: list[ProcessService] = field(default_factory=list)  # in the order they start
    commits: SourceOffsetCommitter | None = None  # the actors hand it their durable positions
    registries_down: dict[str, str] = field(default_factory=dict)  # registry URL → why it does not answer (/readyz)
    tables_down: dict[str, str] = field(default_factory=dict)  # archive table → why it is not updated (/readyz)


def process_services(entries: tuple[Entry, ...], destination: Destination, families: MetricFamilies) -> ProcessServices:
    wants, archive = destination.services, destination.archive
    # One admin client per source cluster for every helper that asks the sources (made on first use).
    admins = SourceAdmins(max(entry.source.request_timeout_ms for entry in entries) / 1000)
    built = ProcessServices()
    if wants.create_topics is not None:
        built.services.append(TopicManager(wants.create_topics))
    if wants.sync_groups is not None:
        built.services.append(GroupSync(wants.sync_groups, families))
    if any(entry.source.commit_source_offsets for entry in entries):
        built.commits = SourceOffsetCommitter(admins, families)
        built.services.append(built.commits)
    if archive is not None and wants.topic_metadata_every_s is not None:
        built.services.append(TopicArchiver(archive.documents(), admins, wants.topic_metadata_every_s))
    if archive is not None and wants.group_positions is not None:
        built.services.append(GroupArchiver(archive.documents(), admins, wants.group_positions))
    if archive is not None and wants.table is not None:
        keeper = TableKeeper(archive, wants.table, wants.daily, families)
        built.tables_down = keeper.down
        built.services.append(keeper)
    if archive is not None and ArchiveUpkeep.is_wanted(wants.compaction, wants.retention):
        # Its own view of the tables (the keeper's follows positions); Iceberg commits go to the same worker process.
        tables = (
            None if wants.table is None else ArchiveTables(archive, wants.table, wants.daily, commits_elsewhere=True)
        )
        upkeep = ArchiveUpkeep(archive, wants.compaction, wants.retention, wants.daily, families, tables=tables)
        built.services.append(upkeep)
    watch = _registry_watch(entries, wants.schema_registry, families, built.registries_down)
    if watch is not None:
        built.services.append(watch)
    return built


def _registry_watch(
    entries: tuple[Entry, ...], destination: RegistryAccess | None, families: MetricFamilies, down: dict[str, str]
) -> RegistryWatch | None:
    """The schema registries the entries with `schemas` use (and the destination's, where they register), probed
    for the gauge and /readyz (None: no entry copies schemas)."""
    found: dict[str, RegistryAccess] = {}
    for entry in entries:
        registry = entry.source.schema_registry
        if entry.schemas is not None and entry.schemas.on and registry is not None:
            access = registry_access(registry, f"{entry.source_field}.schema-registry")
            found.setdefault(access.url, access)
    if found and destination is not None:
        found.setdefault(destination.url, destination)
    if not found:
        return None
    watch = RegistryWatch(list(found.values()))
    for url, reachability in watch.reachability.items():
        reachability.listen(partial(_registry_changed, families, down, url))
    return watch


def _registry_changed(families: MetricFamilies, down: dict[str, str], url: str, outage: Outage | None) -> None:
    families.schema_registry_up.labels(url).set(0 if outage is not None else 1)
    if outage is None:
        down.pop(url, None)
    else:
        down[url] = outage.cause
