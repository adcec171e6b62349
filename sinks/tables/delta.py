"""An archive's Delta tables through delta-rs (`deltalake`): one table per chain name, rooted at the chains' own
directory (`<root>/<dest-name>`, its log in `_delta_log` beside the partitions' directories), so each blob is added
where it lies by its path under the table (`<partition>/<blob>`): delta-rs reads no file outside a table's root. On
S3 the log's versions are written with conditional puts (`sinks.s3.destination.S3Destination.delta_storage`).

Each commit carries, per chain, a Delta application transaction (`txn`: app id `mirror-v3:<dest-name>/<partition>`,
version the chain's next offset the table holds): the protocol's own idempotence record, kept in every snapshot
and checkpoint, which a concurrent commit of the same app id conflicts with. delta-rs does not refuse a repeated
version by itself: the keeper adds only what follows the recorded one. The table is not partitioned (a Delta data
file must not hold its partition columns, and a blob holds `partition`); each file's statistics (records, the
minimum and maximum partition, offset and timestamp) let engines skip files as partitions would.

Blocking (run it in a thread): a log read per positions, a footer read per blob found by listing (the others come
with their writer's statistics) and one commit per round.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pyarrow.parquet as pq

from core.describe import describe_error
from core.file_statistics import FileStatistics, file_statistics
from core.records import KAFKA_SCHEMA
from sinks.tables.iceberg import TableError, commit_attempts, refuse_moved
from sinks.tables.positions import TableFile, TablePositions
from sinks.tables.rewrites import MAINTENANCE_KEY, FileChange, plan_rewrite

T = TypeVar("T")
APP_PREFIX = "mirror-v3:"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def app_id(chain: str) -> str:
    return APP_PREFIX + chain


class DeltaArchiveTable:
    def __init__(self, uri: str, name: str, storage_options: dict[str, str] | None = None) -> None:
        self.identifier = uri
        self._name = name
        self._options = storage_options
        self._table: Any = None

    def _loaded(self) -> Any:
        from deltalake import DeltaTable

        if self._table is None:
            self._table = DeltaTable.create(
                self.identifier,
                KAFKA_SCHEMA,
                mode="ignore",  # an existing table is opened as it is
                name=self._name,
                storage_options=self._options,
            )
        else:
            self._table.update_incremental()
        return self._table

    def positions(self, chains: Iterable[str]) -> TablePositions:
        """Each chain's version from the table's application transactions (0: the table holds none of it)."""
        try:
            table = self._loaded()
            return TablePositions({chain: table.transaction_version(app_id(chain)) or 0 for chain in chains})
        except Exception as exc:
            self._table = None
            raise TableError(self.identifier, "read", describe_error(exc)) from exc

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        """One commit adding `files` with a transaction per chain of `positions`, made only while the table's
        versions still say `based_on` (read again first: a Delta append does not conflict with another append, so
        the check is ours); a lost race is tried again on the refreshed table the same way."""
        from deltalake.transaction import AddAction, CommitProperties, Transaction

        adds = [self._add(file, AddAction, self._options) for file in files]
        transactions = [Transaction(app_id(chain), offset) for chain, offset in sorted(positions.items())]

        def once() -> None:
            refuse_moved(self.identifier, self.positions(based_on).next_offsets, based_on)
            self._loaded().create_write_transaction(
                adds,
                mode="append",
                schema=KAFKA_SCHEMA,
                commit_properties=CommitProperties(app_transactions=transactions),
            )

        self._attempts("commit", once)

    def rewrite(self, changes: list[FileChange], reason: str) -> int:
        """One commit applying a compaction's or a prune's `changes` (`sinks.tables.rewrites`) to what the table holds
        now: remove actions (and a compaction's add actions) with `dataChange` false for a compaction (its rows are
        the same: readers of changes skip it), true for a prune; how many files it removed (0: nothing committed).
        The chains' transaction versions stay as they are. A lost race is tried again on the refreshed table."""
        import pyarrow as pa
        from deltalake.transaction import AddAction, CommitProperties, RemoveAction

        def once() -> int:
            table = self._loaded()
            adds = pa.table(table.get_add_actions(flatten=True))
            held = dict(zip(adds["path"].to_pylist(), adds["size_bytes"].to_pylist(), strict=True))
            plan = plan_rewrite(changes, held, key=lambda file: file.relative)
            if plan.partial is not None:
                raise TableError(self.identifier, "rewrite", f"it holds part of a run, not {plan.partial}")
            if not plan.removed:
                return 0
            now_ms = int(datetime.now(UTC).timestamp() * 1000)
            actions = [
                *(self._add(file, AddAction, self._options, data_change=False) for file in plan.added),
                *(RemoveAction(name, plan.changes_rows, now_ms, held[name]) for name in plan.removed),
            ]
            table.create_write_transaction(
                actions,
                mode="append",
                schema=KAFKA_SCHEMA,
                commit_properties=CommitProperties(custom_metadata={MAINTENANCE_KEY: reason}),
            )
            return len(plan.removed)

        return self._attempts("rewrite", once)

    def _attempts(self, operation: str, once: Callable[[], T]) -> T:
        """`commit_attempts` of this table: a lost race is another version taking the commit's number."""

        def forget() -> None:
            self._table = None  # refreshed at the next attempt

        return commit_attempts(self.identifier, operation, lambda _attempt: once(), _is_conflict, forget)

    @staticmethod
    def _add(file: TableFile, action: Any, storage: dict[str, str] | None, data_change: bool = True) -> Any:
        """The add action of a blob: its size and statistics (its writer's, else its footer's), its modification
        time; `data_change` false for a compaction's merged blob (rows the table holds already)."""
        statistics = file.statistics or _read(file, storage)
        bounds = statistics.bounds
        stats = {
            "numRecords": statistics.records,
            "minValues": {bound.column: _json_value(bound.column, bound.low) for bound in bounds},
            "maxValues": {bound.column: _json_value(bound.column, bound.high) for bound in bounds},
            "nullCount": {bound.column: bound.nulls for bound in bounds},
        }
        modified = int(datetime.now(UTC).timestamp() * 1000)
        return action(file.relative, statistics.size, {}, modified, data_change, json.dumps(stats))


def _read(file: TableFile, storage: dict[str, str] | None) -> FileStatistics:
    from pyarrow import fs

    if storage is not None and file.uri.startswith("s3://"):
        filesystem, path = _s3(storage), file.uri.removeprefix("s3://")
    else:
        filesystem, path = fs.FileSystem.from_uri(file.uri)
    with filesystem.open_input_file(path) as handle:
        return file_statistics(pq.ParquetFile(handle).metadata, handle.size())


def _s3(storage: dict[str, str]) -> Any:
    """pyarrow's S3 filesystem with the archive's endpoint and credentials (the delta-rs options)."""
    from pyarrow import fs

    endpoint = storage.get("AWS_ENDPOINT_URL", "")
    scheme, _, host = endpoint.partition("://") if "://" in endpoint else ("https", "", endpoint)
    return fs.S3FileSystem(
        access_key=storage.get("AWS_ACCESS_KEY_ID"),
        secret_key=storage.get("AWS_SECRET_ACCESS_KEY"),
        session_token=storage.get("AWS_SESSION_TOKEN"),
        region=storage.get("AWS_REGION"),
        endpoint_override=host or None,
        scheme=scheme or "https",
        force_virtual_addressing=storage.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true",
    )


def _json_value(column: str, value: int) -> Any:
    """A bound as Delta's statistics write it: a timestamp as its UTC time (microseconds kept), others as numbers."""
    if column == "timestamp":
        return (EPOCH + timedelta(microseconds=value)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return value


def _is_conflict(exc: BaseException) -> bool:
    """A commit that lost a race to another writer's (another version took its number)."""
    return type(exc).__name__ in {"CommitFailedError", "DeltaError"} and "conflict" in str(exc).lower()
