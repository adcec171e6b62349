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

import contextlib
import itertools
import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow.parquet as pq

from core.describe import describe_error
from core.file_statistics import BOUNDED_COLUMNS, FileStatistics, file_statistics
from core.records import KAFKA_SCHEMA
from sinks.base import DestinationError
from sinks.tables.history import FLOOR_PROPERTY, Expiry, OldestSnapshot, SnapshotFacts, expiry, history_complete
from sinks.tables.positions import TableFile, TablePositions, position_key, positions_of, walk_positions
from sinks.tables.rewrites import MAINTENANCE_KEY, FileChange, plan_rewrite

T = TypeVar("T")
CATALOG_DIRECTORY = "_catalog"  # a filesystem archive's SQLite catalog (`_`: no chain listing takes it for one)
WAREHOUSE_DIRECTORY = "_iceberg"  # ... and its tables' metadata
_MICROS_PER_DAY = 86_400_000_000
COMMIT_ATTEMPTS = 5  # against other writers' commits, each on the refreshed table
NAME_MAPPING = "schema.name-mapping.default"
TABLE_PROPERTIES = {
    "format-version": "2",
    "gc.enabled": "false",  # the data files are the archive's: no engine's expiry may delete one
    "write.parquet.compression-codec": "zstd",
    "mirror-v3.archive": "true",
}
# What keeps a table's metadata from growing by a file per commit, for tables made before these were set too (unless
# their owner set them): a commit merges the manifests of earlier ones (Iceberg's default in Java, not in PyIceberg),
# and the metadata files older than the last few are deleted (they are the catalog's past, read by no one).
MAINTENANCE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
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


def commit_attempts(
    table: str,
    operation: str,
    once: Callable[[int], T],
    lost_race: Callable[[Exception], bool],
    forget: Callable[[], None],
) -> T:
    """`once(attempt)` until it returns: after a commit that lost a race to another writer's (`lost_race`), again on
    the refreshed table (`forget` drops the loaded one), COMMIT_ATTEMPTS times in all. Anything else is a TableError
    at once (a TableError of `once`'s own passes as it is). Both formats' commits and rewrites go through it."""
    for attempt in itertools.count(1):
        try:
            return once(attempt)
        except TableError:
            raise
        except Exception as exc:
            forget()
            if attempt >= COMMIT_ATTEMPTS or not lost_race(exc):
                raise TableError(table, operation, describe_error(exc)) from exc
    raise AssertionError("unreachable")  # itertools.count never ends


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
    def __init__(
        self,
        catalog: IcebergCatalog,
        identifier: str,
        daily: bool,
        keep_snapshots_ms: int = 0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        """`keep_snapshots_ms`: each commit also removes from the table's metadata the snapshots older than that
        which reading the positions does not need (`sinks.tables.history`); 0: none."""
        self.identifier = identifier
        self.catalog = catalog
        self.daily = daily
        self.keep_snapshots_ms = keep_snapshots_ms
        self._wall = wall
        self._table: Any = None

    def open(self) -> None:
        """Load the table now (made if it is new) and its current manifest list, which the next commit reads: at start,
        not within the first commit."""
        table = self._loaded()
        snapshot = table.current_snapshot()
        if snapshot is not None:
            snapshot.manifests(table.io)

    def _loaded(self) -> Any:
        if self._table is None:
            self._table = self._open()
        return self._table

    def _open(self) -> Any:
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.transforms import DayTransform

        try:
            catalog = self.catalog.load()
            namespace = self.identifier.rsplit(".", 1)[0] if "." in self.identifier else None
            if namespace:
                catalog.create_namespace_if_not_exists(namespace)
            try:
                return catalog.load_table(self.identifier)
            except NoSuchTableError:
                pass
            properties = TABLE_PROPERTIES | MAINTENANCE_PROPERTIES
            creating = catalog.create_table_transaction(self.identifier, KAFKA_SCHEMA, properties=properties)
            with creating as tx, tx.update_spec() as spec:
                spec.add_identity("partition")
                if self.daily:  # each blob holds one UTC day
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
        return walk_positions(map(_summary, history), chains, _complete(metadata, history))

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        """One snapshot adding `files` (paths as the table's FileIO reads them) and recording `positions`, the files
        having been chosen from `based_on` (each chain's position then). A lost race is tried again on the
        refreshed table, COMMIT_ATTEMPTS times in all, as long as the table still says `based_on` (the winner wrote
        other chains); if it says otherwise, nothing is added (TableError)."""
        from pyiceberg.table.update.snapshot import ExpireSnapshots

        properties = {position_key(chain): str(offset) for chain, offset in sorted(positions.items())}

        def once(attempt: int) -> None:
            if attempt > 1:
                refuse_moved(self.identifier, self.positions(based_on).next_offsets, based_on)
            table = self._unretried()
            data_files = [*map(DataFiles(table).of, files)]
            with table.transaction() as transaction:
                if transaction.table_metadata.name_mapping() is None:  # the blobs carry no field ids: by name
                    schema = transaction.table_metadata.schema()
                    transaction.set_properties(**{NAME_MAPPING: schema.name_mapping.model_dump_json()})
                missing = {k: v for k, v in MAINTENANCE_PROPERTIES.items() if k not in table.metadata.properties}
                if missing:
                    transaction.set_properties(**missing)
                expired = self._expiry(table)  # of the snapshots before this commit's
                with transaction.update_snapshot(snapshot_properties=properties).merge_append() as append:
                    for data_file in data_files:
                        append.append_data_file(data_file)
                if expired is not None:  # in the same commit: one metadata write per interval
                    ExpireSnapshots(transaction).by_ids(list(expired.snapshot_ids)).commit()
                    transaction.set_properties(**{FLOOR_PROPERTY: str(expired.floor)})
                    before = [table.metadata.snapshot_by_id(i) for i in expired.snapshot_ids]
            if expired is not None:
                _remove_metadata_of(table, [snapshot for snapshot in before if snapshot is not None])

        self._attempts("commit", once)

    def rewrite(self, changes: list[FileChange], reason: str) -> int:
        """One commit applying a compaction's or a prune's `changes` (`sinks.tables.rewrites`) to what the table holds
        now; how many files it removed (0: nothing to do, nothing committed). A compaction's commit is a `replace`
        snapshot (its rows are the same: readers of changes skip it), a prune's a `delete`. It carries no positions:
        reading them walks past it. A lost race is tried again on the refreshed table."""

        def once(_: int) -> int:
            table = self._loaded()
            table.refresh()
            held = _held_files(table)
            plan = plan_rewrite(changes, held, key=lambda file: file.uri)
            if plan.partial is not None:
                raise TableError(self.identifier, "rewrite", f"it holds part of a run, not {plan.partial}")
            if not plan.removed:
                return 0
            table = self._unretried()
            data_files = [*map(DataFiles(table).of, plan.added)]
            properties = {MAINTENANCE_KEY: reason}
            with table.transaction() as tx, _rewrite_snapshot(tx, table.io, properties, plan.changes_rows) as files:
                for name in plan.removed:
                    files.delete_data_file(held[name])
                for data_file in data_files:
                    files.append_data_file(data_file)
            return len(plan.removed)

        return self._attempts("rewrite", once)

    def _unretried(self) -> Any:
        """The table, loaded, with PyIceberg's own retry of a lost race turned off: it would re-apply the change to
        the refreshed table without asking whether it still holds (our positions, the files a rewrite names);
        `_attempts` asks. Set on this process's view of the table only (never committed: other writers' retries are
        theirs)."""
        table = self._loaded()
        table.metadata = table.metadata.model_copy(
            update={"properties": {**table.metadata.properties, "commit.retry.num-retries": "0"}}
        )
        return table

    def _attempts(self, operation: str, once: Callable[[int], T]) -> T:
        """`commit_attempts` of this table: a lost race is PyIceberg's CommitFailedException."""
        from pyiceberg.exceptions import CommitFailedException

        def forget() -> None:
            self._table = None  # refreshed at the next attempt

        return commit_attempts(
            self.identifier, operation, once, lambda exc: isinstance(exc, CommitFailedException), forget
        )

    def _expiry(self, table: Any) -> Expiry | None:
        """The old snapshots to remove with this commit, if the table keeps them for a limited time and its whole
        history (or the mirror's floor) is there to choose from."""
        from pyiceberg.table.snapshots import ancestors_of

        if not self.keep_snapshots_ms:
            return None
        metadata = table.metadata
        history = list(ancestors_of(table.current_snapshot(), metadata))
        if not _complete(metadata, history):
            return None
        facts = [SnapshotFacts(s.snapshot_id, s.timestamp_ms, frozenset(positions_of(_summary(s)))) for s in history]
        return expiry(facts, round(self._wall() * 1000) - self.keep_snapshots_ms)

    def scan(self) -> Any:
        """The table's rows as an Arrow table (what a reader of the table gets; the tests compare it)."""
        table = self._loaded()
        table.refresh()
        return table.scan().to_arrow()


def _remove_metadata_of(table: Any, expired: list[Any]) -> None:
    """After a commit that expired `expired`: delete their manifest lists, and their manifests that no kept snapshot
    lists (Iceberg's own expiry does the same; data files are never looked at: they are the archive's). Best effort:
    a file left behind (a failed delete, a process killed before) is garbage in the metadata directory, read by no
    one, and never a failure of the commit, which is made. Cost: reading the kept snapshots' manifest lists
    (PyIceberg caches them in the process)."""
    try:
        kept = {m.manifest_path for snapshot in table.metadata.snapshots for m in snapshot.manifests(table.io)}
        doomed = {snapshot.manifest_list for snapshot in expired}
        doomed |= {m.manifest_path for snapshot in expired for m in snapshot.manifests(table.io)} - kept
    except Exception:  # a manifest list that cannot be read: what it names stays
        return
    metadata = f"{table.metadata.location.rstrip('/')}/metadata/"
    for path in sorted(doomed):
        if path.startswith(metadata):  # what this table wrote for itself, nothing else
            with contextlib.suppress(Exception):
                table.io.delete(path)


def _held_files(table: Any) -> dict[str, Any]:
    """The data files of the table's current snapshot by path. Cost: reading its manifests (a few: commits merge
    them)."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {}
    return {
        entry.data_file.file_path: entry.data_file
        for manifest in snapshot.manifests(table.io)
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
    }


def _rewrite_snapshot(transaction: Any, io: Any, properties: dict[str, str], changes_rows: bool) -> Any:
    """The snapshot producer of a rewrite: PyIceberg's overwrite of named files, its snapshot a `delete` when rows
    leave the table, else a `replace` (PyIceberg 0.12 writes no `replace` snapshot itself: its summary totals refuse
    the operation, so the summary is made as an overwrite's, which counts the same, and then named `replace`)."""
    from pyiceberg.table.snapshots import Operation, Summary
    from pyiceberg.table.update.snapshot import _OverwriteFiles

    class ReplaceFiles(_OverwriteFiles):
        def _summary(self, snapshot_properties: dict[str, str] = properties) -> Summary:
            summary: Summary = super()._summary(snapshot_properties).model_copy(update={"operation": Operation.REPLACE})
            return summary

    if changes_rows:
        return _OverwriteFiles(Operation.DELETE, transaction, io, snapshot_properties=properties)
    return ReplaceFiles(Operation.OVERWRITE, transaction, io, snapshot_properties=properties)


def _summary(snapshot: Any) -> dict[str, str]:
    return dict(snapshot.summary.ser_model()) if snapshot.summary else {}


def _complete(metadata: Any, history: list[Any]) -> bool:
    """Whether `history` (the current snapshot's ancestry, newest first) names every chain the table's commits ever
    named (`sinks.tables.history.history_complete`)."""
    floor = metadata.properties.get(FLOOR_PROPERTY, "")
    last = history[-1] if history else None
    oldest = None if last is None else OldestSnapshot(last.snapshot_id, last.sequence_number, last.parent_snapshot_id)
    return history_complete(oldest, int(floor) if floor.isdigit() else None)


class DataFiles:
    """Blobs as one table's data files: each blob's statistics (`core.file_statistics`: what engines prune with), from
    the task that wrote it or else from its footer, read here; its partition values from its chain (source partition)
    and, for a day-partitioned table, from its timestamps' one UTC day. Statistics are not needed for the partition:
    an archive written before blobs kept statistics of `partition` joins as well (PyIceberg's add_files infers the
    partition from them and refuses a file without).

    Cost per blob: a data file of a few dictionaries (the column ids are worked out once per table and commit); a
    footer read where the writer's statistics are not at hand."""

    def __init__(self, table: Any) -> None:
        from pyiceberg.io.pyarrow import parquet_path_to_id_mapping
        from pyiceberg.transforms import DayTransform, IdentityTransform

        self._table = table
        self._metadata = table.metadata
        schema, spec = self._metadata.schema(), self._metadata.spec()
        self._ids = parquet_path_to_id_mapping(schema)
        # Each bounded column's id and how its values are serialised (Iceberg's single-value encoding: little-endian
        # int for an int, long for a long and for a timestamp's microseconds).
        self._bounded = {
            name: (schema.find_field(name).field_id, "<i" if str(schema.find_type(name)) == "int" else "<q")
            for name in BOUNDED_COLUMNS
        }
        self._partitioning: list[str] = []
        for field in spec.fields:
            column = schema.find_column_name(field.source_id)
            if column == "partition" and isinstance(field.transform, IdentityTransform):
                self._partitioning.append("partition")
            elif column == "timestamp" and isinstance(field.transform, DayTransform):
                self._partitioning.append("day")
            else:
                raise TableError(
                    table.name(), "commit", f"partition field {field.name} ({field.transform}) is not ours"
                )

    def of(self, file: TableFile) -> Any:
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        statistics = file.statistics or self._read(file)
        values = [
            file.partition if value == "partition" else _utc_day(statistics, file) for value in self._partitioning
        ]
        ids, bounded = self._ids, self._bounded
        counted = {bounded[bound.column][0]: bound for bound in statistics.bounds}
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=file.uri,
            file_format=FileFormat.PARQUET,
            partition=Record(*values),
            record_count=statistics.records,
            file_size_in_bytes=statistics.size,
            column_sizes={ids[path]: size for path, size in statistics.column_sizes if path in ids},
            value_counts=dict.fromkeys(counted, statistics.records),
            null_value_counts={field_id: bound.nulls for field_id, bound in counted.items()},
            nan_value_counts={},
            lower_bounds={i: struct.pack(bounded[b.column][1], b.low) for i, b in counted.items()},
            upper_bounds={i: struct.pack(bounded[b.column][1], b.high) for i, b in counted.items()},
            split_offsets=list(statistics.split_offsets),
            sort_order_id=None,
            spec_id=self._metadata.default_spec_id,
            equality_ids=None,
            key_metadata=None,
        )

    def _read(self, file: TableFile) -> FileStatistics:
        source = self._table.io.new_input(file.uri)
        with source.open() as stream:
            footer = pq.read_metadata(stream)
        return file_statistics(footer, len(source))


def _utc_day(statistics: FileStatistics, file: TableFile) -> int:
    """The one UTC day (days since 1970-01-01) of a blob's record timestamps (`flush.daily` blobs hold one)."""
    bound = statistics.bound("timestamp")
    if bound is None:
        raise TableError(file.uri, "commit", "a day-partitioned table needs the blob's timestamp statistics")
    days = {value // _MICROS_PER_DAY for value in (bound.low, bound.high)}
    if len(days) != 1:
        raise TableError(file.uri, "commit", f"the blob spans {len(days)} UTC days; a day partition holds one")
    return days.pop()
