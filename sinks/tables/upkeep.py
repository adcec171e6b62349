"""An archive's tables kept in step with a compaction or a prune of its chains (`compact`, `prune` and the running
mirror's upkeep, `supervisor.archive_upkeep`).

A table names the chain's blobs up to its position, so the chain may only delete a blob its table no longer names.
Both steps therefore touch only what each chain's table holds (a run or a prefix ending below the position: the
table's keeper and `table-sync` add only what follows it, so no commit of theirs can name a blob deleted here), and
between the chain's two steps comes one rewrite commit per table (`sinks.tables.rewrites`):
1. compaction: the merged blobs committed to their chains (their runs redundant from then on);
2. one commit per table replacing each run with its merged blob (prune: removing the prefix), for every chain of
   that table at once;
3. the runs (the prefix) deleted from the chains; only where step 2 was committed.
A kill after step 1 leaves redundant runs that a reader reads right, which the next compaction gives to step 2 again
(it commits only what the table still names) and then deletes; after step 2, what step 3 deletes is named by no
table. A chain whose table cannot be read or committed keeps its blobs until the next round, and says why.

Cost: one positions read and one commit per table per round (Iceberg: a manifest read and write; the Python work runs
in the commit worker in the run process); reading one blob per chain name where the table's name needs the topic and
the caller does not know it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import anyio.to_thread
import pyarrow.parquet as pq

from config.model import TableConfig
from core.describe import describe_error
from sinks.blob.chain import BlobRange, parse_blob_name
from sinks.destination import Archive, chain_name
from sinks.tables.following import LIST_PAGE
from sinks.tables.kept import KeptTable, TableOpener, table_identity, table_name
from sinks.tables.positions import TableFile
from sinks.tables.rewrites import FileChange


@dataclass(frozen=True)
class TableChain:
    """A chain with what names its table: its destination name, partition and source topic."""

    name: str
    partition: int
    topic: str

    @property
    def chain(self) -> str:
        return chain_name(self.name, self.partition)


def needs_topic(settings: TableConfig) -> bool:
    """Whether a chain's table is found only by its source topic (an Iceberg table named with `{topic}`)."""
    return settings.format != "delta" and "{topic}" in settings.name


async def topic_in_blob(archive: Archive, name: str, partition: int, blob: str) -> str:
    """The source topic of a chain, from the `topic` column of one of its blobs (an archive's chains say it nowhere
    else for sure)."""

    def read() -> str:
        data = archive.reader(name, partition).read(blob)
        topics = pq.read_table(io.BytesIO(data), columns=["topic"]).column("topic").unique().to_pylist()
        return str(topics[0]) if topics else ""

    found: str = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
    return found


async def chain_topics(archive: Archive, settings: TableConfig, chains: Iterable[tuple[str, int]]) -> dict[str, str]:
    """The source topic of each destination name of `chains` where its table is found only by it (else none): read
    from the smallest of the first blobs of one of its chains."""
    if not needs_topic(settings):
        return {}
    topics: dict[str, str] = {}
    for name, partition in chains:
        if name in topics:
            continue
        store = archive.chain_store(name, partition)
        try:
            page, _ = await store.list_details(None, LIST_PAGE)
        finally:
            await store.close()
        blobs = [entry for entry in page if parse_blob_name(entry.name) is not None]
        if blobs:
            topics[name] = await topic_in_blob(archive, name, partition, min(blobs, key=lambda e: e.size).name)
    return topics


class ArchiveTables:
    """The tables an archive's chains follow, opened once each."""

    def __init__(
        self,
        archive: Archive,
        settings: TableConfig,
        daily: bool,
        open_table: Callable[[str, str], KeptTable] | None = None,
        commits_elsewhere: bool = False,
    ) -> None:
        self._archive, self._settings = archive, settings
        self._open = open_table or TableOpener(settings, archive, daily, commits_elsewhere)
        self._tables: dict[str, KeptTable] = {}

    def table_of(self, chain: TableChain) -> KeptTable:
        identifier = table_identity(self._settings, self._archive, chain.topic, chain.name)
        table = self._tables.get(identifier)
        if table is None:
            name = table_name(self._settings, chain.topic, chain.name)
            table = self._tables[identifier] = self._open(identifier, name)
        return table

    def _by_table(self, chains: Iterable[TableChain]) -> dict[str, tuple[KeptTable, list[TableChain]]]:
        grouped: dict[str, tuple[KeptTable, list[TableChain]]] = {}
        for chain in chains:
            table = self.table_of(chain)
            grouped.setdefault(table.identifier, (table, []))[1].append(chain)
        return grouped

    async def positions(self, chains: Iterable[TableChain]) -> tuple[dict[str, int], dict[str, str]]:
        """Each chain's position in its table (a chain whose position its table's history cannot tell is left out),
        and for the chains whose table could not be read, why."""
        found: dict[str, int] = {}
        failed: dict[str, str] = {}
        for table, members in self._by_table(chains).values():
            names = [chain.chain for chain in members]
            try:
                read = await anyio.to_thread.run_sync(table.positions, names, abandon_on_cancel=True)
            except Exception as exc:  # TableError, or what a catalog raised beyond it
                failed.update(dict.fromkeys(names, describe_error(exc)))
                continue
            found.update(read.next_offsets)
        return found, failed

    def file(self, chain: TableChain, blob: BlobRange) -> TableFile:
        uri = self._archive.file_uri(chain.name, chain.partition, blob.name)
        return TableFile(uri, chain.partition, blob.name)

    def replacing(self, chain: TableChain, merged: BlobRange, run: Sequence[BlobRange]) -> FileChange:
        """A compaction's change: `run` replaced by `merged`, which holds the same records."""
        return FileChange(tuple(self.file(chain, blob) for blob in run), self.file(chain, merged))

    def removing(self, chain: TableChain, blobs: Iterable[BlobRange]) -> list[FileChange]:
        """A prune's changes: each of `blobs` leaves the table."""
        return [FileChange((self.file(chain, blob),)) for blob in blobs]

    async def rewrite(self, changes: Mapping[TableChain, list[FileChange]], reason: str) -> dict[str, str]:
        """One commit per table of every change of its chains; for the chains whose table's commit failed, why (their
        blobs must stay)."""
        failed: dict[str, str] = {}
        for table, members in self._by_table(chain for chain, listed in changes.items() if listed).values():
            flat = [change for chain in members for change in changes[chain]]
            try:
                await anyio.to_thread.run_sync(table.rewrite, flat, reason, abandon_on_cancel=False)
            except Exception as exc:
                failed.update(dict.fromkeys((chain.chain for chain in members), describe_error(exc)))
        return failed
