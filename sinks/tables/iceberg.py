"""An archive's Iceberg tables through PyIceberg: made when first needed (the archive's columns, partitioned by source
partition, and by day of the record timestamp with `flush.daily`), read for where they are (`positions`), and
added to in one commit per table: the blobs' files as they lie in the archive (nothing is copied or rewritten; each
blob's partition from its chain) with each chain's new position in the snapshot's summary.

Blocking (run it in a thread): a catalog request per table load, then the commit's manifest and metadata writes.
PyIceberg does not refuse a file added twice unless it scans every manifest (its `check_duplicate_files`, a cost
that grows with the table); the positions are the guard: a blob is added only after the position the table's
own commits recorded. A commit that loses a race with another writer's (a shard writing other partitions) is
tried again on the refreshed table. Tables get `gc.enabled=false`: their data files are the archive's.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow.parquet as pq

from core.describe import describe_error
from core.records import KAFKA_SCHEMA
from sinks.base import DestinationError
from sinks.tables.positions import TableFile, TablePositions, position_key, walk_positions

CATALOG_DIRECTORY = "_catalog"  # a filesystem archive's SQLite catalog (`_`: no chain listing takes it for one)
WAREHOUSE_DIRECTORY = "_iceberg"  # ... and its tables' metadata
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
COMMIT_ATTEMPTS = 5  # against other writers' commits, each on the refreshed table
NAME_MAPPING = "schema.name-mapping.default"
METRICS_DEFAULT = "write.metadata.metrics.default"
METRICS_PREFIX = "write.metadata.metrics.column."
TABLE_PROPERTIES = {
    "format-version": "2",
    "gc.enabled": "false",  # the data files are the archive's: no engine's expiry may delete one
    "write.parquet.compression-codec": "zstd",
    "mirror-v3.archive": "true",
}


def refuse_moved(table: str, now: dict[str, int], based_on: dict[str, int]) -> None:
    """A commit's files were chosen from `based_on`; TableError when the table says otherwise now (another writer
    added to those chains: adding the files again would duplicate rows)."""
    if any(now.get(chain) != offset for chain, offset in based_on.items()):
        raise TableError(table, "commit", f"another writer moved its positions to {now}")


class TableError(DestinationError):
    """A table operation failed: `table` (its identifier), `operation` (create, read, commit) and the `cause`'s
    words. The mirror goes on; the table catches up when it works again."""

    def __init__(self, table: str, operation: str, cause: str) -> None:
        self.table, self.operation, self.cause = table, operation, cause
        super().__init__(f"table {table}: {operation} failed: {cause}")


@dataclass(frozen=True)
class IcebergCatalog:
    """Where an archive's tables are kept: PyIceberg catalog properties (`type`, `uri`, `warehouse`, ...), secrets
    resolved."""

    name: str
    properties: dict[str, str]
    directory: str | None = None  # made first: where an embedded catalog's database file lives

    def load(self) -> Any:
        from pyiceberg.catalog import load_catalog  # imported when a table is configured: a heavy import

        if self.directory is not None:
            os.makedirs(self.directory, exist_ok=True)
        return load_catalog(self.name, **self.properties)


class IcebergTable:
    def __init__(self, catalog: IcebergCatalog, identifier: str, daily: bool) -> None:
        self.identifier = identifier
        self._catalog = catalog
        self._daily = daily
        self._table: Any = None

    def _loaded(self) -> Any:
        if self._table is None:
            self._table = self._open()
        return self._table

    def _open(self) -> Any:
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.transforms import DayTransform

        try:
            catalog = self._catalog.load()
            namespace = self.identifier.rsplit(".", 1)[0] if "." in self.identifier else None
            if namespace:
                catalog.create_namespace_if_not_exists(namespace)
            try:
                return catalog.load_table(self.identifier)
            except NoSuchTableError:
                pass
            creating = catalog.create_table_transaction(self.identifier, KAFKA_SCHEMA, properties=TABLE_PROPERTIES)
            with creating as tx, tx.update_spec() as spec:
                spec.add_identity("partition")
                if self._daily:  # each blob holds one UTC day
                    spec.add_field("timestamp", DayTransform(), "timestamp_day")
            return catalog.load_table(self.identifier)
        except Exception as exc:
            raise TableError(self.identifier, "open", describe_error(exc)) from exc

    def positions(self, chains: Iterable[str]) -> TablePositions:
        """Where the table is for each chain, from its newest commits (`sinks.tables.positions.walk_positions`)."""
        from pyiceberg.table.snapshots import ancestors_of

        try:
            table = self._loaded()
            table.refresh()
            metadata = table.metadata
            history = list(ancestors_of(table.current_snapshot(), metadata))
        except TableError:
            raise
        except Exception as exc:
            self._table = None
            raise TableError(self.identifier, "read", describe_error(exc)) from exc
        complete = not history or history[-1].parent_snapshot_id is None
        summaries = (dict(snapshot.summary.ser_model()) if snapshot.summary else {} for snapshot in history)
        return walk_positions(summaries, chains, complete)

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        """One snapshot adding `files` (paths as the table's FileIO reads them) and recording `positions`, the files
        having been chosen from `based_on` (each chain's position then). A lost race is tried again on the
        refreshed table, COMMIT_ATTEMPTS times in all, as long as the table still says `based_on` (the winner wrote
        other chains); if it says otherwise, nothing is added (TableError)."""
        from pyiceberg.exceptions import CommitFailedException

        properties = {position_key(chain): str(offset) for chain, offset in sorted(positions.items())}
        for attempt in itertools.count(1):
            try:
                if attempt > 1:
                    refuse_moved(self.identifier, self.positions(based_on).next_offsets, based_on)
                table = self._loaded()
                # PyIceberg would retry a lost race itself, re-applying the append to the refreshed table without
                # asking whether our chains' positions still hold; this loop asks. Set on this process's view of the
                # table only (never committed: other writers' retries are theirs).
                table.metadata = table.metadata.model_copy(
                    update={"properties": {**table.metadata.properties, "commit.retry.num-retries": "0"}}
                )
                data_files = [*map(_DataFiles(table).of, files)]
                with table.transaction() as transaction:
                    if transaction.table_metadata.name_mapping() is None:  # the blobs carry no field ids: by name
                        schema = transaction.table_metadata.schema()
                        transaction.set_properties(**{NAME_MAPPING: schema.name_mapping.model_dump_json()})
                    with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
                        for data_file in data_files:
                            append.append_data_file(data_file)
                return
            except CommitFailedException as exc:
                self._table = None  # refreshed at the next attempt
                if attempt >= COMMIT_ATTEMPTS:
                    raise TableError(self.identifier, "commit", describe_error(exc)) from exc
            except TableError:
                raise
            except Exception as exc:
                self._table = None
                raise TableError(self.identifier, "commit", describe_error(exc)) from exc

    def scan(self) -> Any:
        """The table's rows as an Arrow table (what a reader of the table gets; the tests compare it)."""
        table = self._loaded()
        table.refresh()
        return table.scan().to_arrow()


class _DataFiles:
    """Blobs as one table's data files: each blob's footer statistics (what engines prune with) and its partition
    values from its chain (source partition) and, for a day-partitioned table, from its timestamps' one UTC day.
    Statistics are not needed for the partition: an archive written before blobs kept statistics of `partition` joins
    as well (PyIceberg's add_files infers the partition from them and refuses a file without).

    Cost per blob: one footer read and its statistics; what depends on the schema alone (the columns' ids, each
    statistics plan) is worked out once per table and commit, not per blob (measured: 2 560 blobs of a 256-partition
    round, 2.4 s before, of which 0.9 s was that)."""

    def __init__(self, table: Any) -> None:
        from pyiceberg.io.pyarrow import parquet_path_to_id_mapping

        self._table = table
        self._metadata = table.metadata
        self._schema, self._spec = self._metadata.schema(), self._metadata.spec()
        self._ids = parquet_path_to_id_mapping(self._schema)
        self._plans: dict[frozenset[str], Any] = {}  # the columns a blob keeps statistics of -> their plan

    def _plan(self, with_statistics: frozenset[str]) -> Any:
        """Bounds of the columns the blob keeps statistics of, nothing of the others (PyIceberg would WARN per column
        and blob that they are missing, into the mirror's log, at every commit)."""
        from pyiceberg.io.pyarrow import compute_statistics_plan

        if with_statistics not in self._plans:
            modes = {f"{METRICS_PREFIX}{column}": "full" for column in with_statistics}
            properties = {**self._metadata.properties, METRICS_DEFAULT: "none", **modes}
            self._plans[with_statistics] = compute_statistics_plan(self._schema, properties)
        return self._plans[with_statistics]

    def of(self, file: TableFile) -> Any:
        from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.transforms import DayTransform, IdentityTransform
        from pyiceberg.typedef import Record

        source = self._table.io.new_input(file.uri)
        with source.open() as stream:
            footer = pq.read_metadata(stream)
        first = footer.row_group(0) if footer.num_row_groups else None
        kept = [] if first is None else [first.column(i) for i in range(first.num_columns)]
        with_statistics = frozenset(column.path_in_schema for column in kept if column.is_stats_set)
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=footer, stats_columns=self._plan(with_statistics), parquet_column_mapping=self._ids
        )
        values: list[int] = []
        for field in self._spec.fields:
            column = self._schema.find_column_name(field.source_id)
            if column == "partition" and isinstance(field.transform, IdentityTransform):
                values.append(file.partition)
            elif column == "timestamp" and isinstance(field.transform, DayTransform):
                values.append(_utc_day(footer, file))
            else:
                raise TableError(
                    self._table.name(), "commit", f"partition field {field.name} ({field.transform}) is not ours"
                )
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=file.uri,
            file_format=FileFormat.PARQUET,
            partition=Record(*values),
            file_size_in_bytes=len(source),
            sort_order_id=None,
            spec_id=self._metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )


def _utc_day(footer: Any, file: TableFile) -> int:
    """The one UTC day (days since 1970-01-01) of a blob's record timestamps (`flush.daily` blobs hold one)."""
    days: set[int] = set()
    index = footer.schema.to_arrow_schema().get_field_index("timestamp")
    for group in range(footer.num_row_groups):
        stats = footer.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            raise TableError(file.uri, "commit", "a day-partitioned table needs the blob's timestamp statistics")
        # A timestamp without a zone in the footer is UTC (Parquet's "not adjusted to UTC" is not the archive's).
        days |= {(_as_utc(value) - EPOCH).days for value in (stats.min, stats.max)}
    if len(days) != 1:
        raise TableError(file.uri, "commit", f"the blob spans {len(days)} UTC days; a day partition holds one")
    return days.pop()


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
