"""Iceberg commits in a process of their own, so that a big one does not hold the mirror's interpreter.

A table commit is Python work all through (PyIceberg: a data file record per blob, the manifest's Avro encoding,
the metadata file): 1.5-2 s for the 12 000 blobs a 60 s interval brings at 256 partitions. Run in a thread of the
mirror's driver, it held the interpreter lock against the actors' flushes: the slowest flush of a commit's second
took 2.1-2.7 s and p99 produce → durable rose from 1.8-2.8 s to 3.3-5.0 s (docs/benchmarks.md). Here it runs in one
worker process (spawned, not forked: the driver has threads and a JVM gateway), which keeps each table it opened
between commits; the calling thread only waits. The worker ends with the mirror, killed or not.

Cost: the blobs' file records pickled to the worker (about 10 µs a blob), and one Python with PyIceberg loaded
(about 1.5 s of CPU, 150 MB). That CPU, and opening each table, come when the mirror starts and reads its tables'
positions, not in the first commit, beside the mirrors' flushes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from sinks.tables.iceberg import IcebergCatalog, IcebergTable, TableError
from sinks.tables.positions import TableFile, TablePositions
from sinks.tables.rewrites import FileChange

WORKER_NICENESS = 10
PARENT_CHECK_S = 1.0  # how soon the worker ends after the mirror was killed
_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()
_opened: dict[tuple[object, ...], IcebergTable] = {}  # in the worker: the tables it committed to


def start_worker() -> None:
    """Start the worker and have it load PyIceberg now (about 1.5 s of CPU), not in the first commit, when the
    mirrors are busy; returns at once."""
    _worker().submit(_load)


def _worker() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            context = multiprocessing.get_context("spawn")
            _pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=_start_worker_process)
        return _pool


def _start_worker_process() -> None:
    """In the worker, first: its CPU comes after the mirrors' (the Spark tasks, the driver: a commit is due within its
    interval, a flush within a second), and it ends with the mirror. A killed mirror closes no pipe the worker reads
    from (the worker holds both ends of its queue), so a thread watches for the worker's parent to change."""
    os.nice(WORKER_NICENESS)
    parent = os.getppid()
    threading.Thread(target=_end_with, args=(parent,), name="end-with-the-mirror", daemon=True).start()


def _end_with(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)  # a commit under way is abandoned: the catalog took it whole or not at all


def _load() -> None:
    import pyiceberg.catalog.sql
    import pyiceberg.io.pyarrow  # a table's FileIO: pyarrow's datasets and compute, 0.4 s of CPU
    import pyiceberg.table  # noqa: F401


class ElsewhereIcebergTable:
    """An Iceberg table whose positions are read here (a catalog request and the snapshots' summaries: light) and whose
    commits run in the worker process."""

    def __init__(self, table: IcebergTable) -> None:
        self._table = table
        self.identifier = table.identifier
        self._opened_there = False

    def positions(self, chains: Iterable[str]) -> TablePositions:
        read = self._table.positions(chains)
        if not self._opened_there:  # the table exists now: the worker opens it too, before its first commit is due
            try:
                _worker().submit(_open_here, *self._arguments())
                self._opened_there = True
            except BrokenProcessPool:
                pass  # the worker died: the next commit starts another (and says so), the next read opens it there
        return read

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        """`IcebergTable.commit` of this table, in the worker process; blocks until it is done and raises what it
        raised (TableError; a worker that died is a TableError too, and the next commit starts another)."""
        self._in_worker("commit", _commit_here, files, positions, based_on)

    def rewrite(self, changes: list[FileChange], reason: str) -> int:
        """`IcebergTable.rewrite` of this table, in the worker process (a compaction's data files are the same Python
        work as a commit's)."""
        done: int = self._in_worker("rewrite", _rewrite_here, changes, reason)
        return done

    def _in_worker(self, operation: str, call: Callable[..., Any], *arguments: object) -> Any:
        global _pool
        table, pool = self._table, _worker()
        try:
            return pool.submit(call, *self._arguments(), *arguments).result()
        except BrokenProcessPool as exc:
            with _pool_lock:
                if _pool is pool:
                    _pool = None
            raise TableError(table.identifier, operation, f"the commit's worker process ended: {exc}") from None

    def _arguments(self) -> tuple[IcebergCatalog, str, bool, int]:
        """What the worker opens this table with."""
        table = self._table
        return table.catalog, table.identifier, table.daily, table.keep_snapshots_ms


def _table_here(catalog: IcebergCatalog, identifier: str, daily: bool, keep_snapshots_ms: int) -> IcebergTable:
    properties = tuple(sorted(catalog.properties.items()))
    key = (catalog.name, properties, catalog.directory, identifier, daily, keep_snapshots_ms)
    table = _opened.get(key)
    if table is None:
        table = _opened[key] = IcebergTable(catalog, identifier, daily, keep_snapshots_ms)
    return table


def _open_here(catalog: IcebergCatalog, identifier: str, daily: bool, keep_snapshots_ms: int) -> None:
    """Load the table's metadata now; a failure is left to the first commit, which opens it again and says why."""
    with contextlib.suppress(Exception):
        _table_here(catalog, identifier, daily, keep_snapshots_ms).open()


def _commit_here(
    catalog: IcebergCatalog,
    identifier: str,
    daily: bool,
    keep_snapshots_ms: int,
    files: list[TableFile],
    positions: dict[str, int],
    based_on: dict[str, int],
) -> None:
    _table_here(catalog, identifier, daily, keep_snapshots_ms).commit(files, positions, based_on)


def _rewrite_here(
    catalog: IcebergCatalog,
    identifier: str,
    daily: bool,
    keep_snapshots_ms: int,
    changes: list[FileChange],
    reason: str,
) -> int:
    return _table_here(catalog, identifier, daily, keep_snapshots_ms).rewrite(changes, reason)
