"""Which table a chain follows, and that table opened in its format: for the run process's keeper
(`supervisor.table_keeper`) and for `status`, which reads where each table is."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from config.model import TableConfig
from sinks.destination import Archive
from sinks.tables.delta import DeltaArchiveTable
from sinks.tables.elsewhere import ElsewhereIcebergTable, start_worker
from sinks.tables.iceberg import IcebergCatalog, IcebergTable
from sinks.tables.positions import TableFile, TablePositions
from sinks.tables.rewrites import FileChange


class KeptTable(Protocol):
    """A table that follows chains (`IcebergTable`, `DeltaArchiveTable`; tests give an in-memory one)."""

    identifier: str

    def positions(self, chains: Iterable[str]) -> TablePositions: ...

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None: ...

    def rewrite(self, changes: list[FileChange], reason: str) -> int: ...


def table_name(settings: TableConfig, topic: str, destination_name: str) -> str:
    return settings.name.format(topic=topic, dest=destination_name)


def table_identity(settings: TableConfig, archive: Archive, topic: str, destination_name: str) -> str:
    """How the table of a chain name is known: its catalog identifier (iceberg), its location (delta)."""
    if settings.format == "delta":
        return archive.chain_directory(destination_name)
    return table_name(settings, topic, destination_name)


class TableOpener:
    """Opens the tables of one archive in its configured format. Raises ConfigReferenceError at once for a secret
    catalog property whose variable is not set."""

    def __init__(self, settings: TableConfig, archive: Archive, daily: bool, commits_elsewhere: bool = False) -> None:
        """`commits_elsewhere`: Iceberg commits run in a worker process (the run process: `sinks.tables.elsewhere`)."""
        self._settings, self._daily, self._elsewhere = settings, daily, commits_elsewhere
        self._catalog: IcebergCatalog | None = None if settings.format == "delta" else archive.table_catalog()
        self._delta_storage = archive.delta_storage() if settings.format == "delta" else None
        if commits_elsewhere and self._catalog is not None:
            start_worker()

    def __call__(self, identifier: str, name: str) -> KeptTable:
        if self._catalog is None:
            return DeltaArchiveTable(identifier, name, self._delta_storage)
        table = IcebergTable(self._catalog, identifier, self._daily, self._settings.keep_snapshots_ms)
        return ElsewhereIcebergTable(table) if self._elsewhere else table
