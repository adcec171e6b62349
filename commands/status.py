"""`status`: per mirror, where the source is, where the destination is, the lag, and the state in the
running process.

No Spark: offsets come from aiokafka, the destination position from the sink's read-only inspect.
One deadline bounds the whole command (reading the clusters' topics, every mirror's queries, the process's
/mirrors, closing the clients): the clusters are read concurrently, each mirror is queried as soon as its
cluster's topics are known (its source and its destination at the same time), and what has not answered when the
deadline comes is named in its row, or as an unreadable cluster, as not answered in time. The state comes from
the process's /mirrors endpoint (by default the one on this host's metrics port, as `kubectl exec` into the pod
reaches it); without an answer the state is unknown, never guessed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Protocol

import aiohttp
import anyio
import msgspec
from anyio.abc import TaskGroup

from commands.output import about, document_schema
from config.estate import Entry, MirrorSpec, Shard, compile_entries, expand
from config.model import Config, Destination, SourceConfig
from config.secrets import ConfigReferenceError
from core.clock import SYSTEM_CLOCK, Clock
from core.describe import describe_error
from core.errors import MirrorV3Error, SourceError, first_line, task_group_failures_unwrapped
from sinks.archive.retention import retention
from sinks.base import DestinationError, Inspection
from sinks.destination import chain_name
from sinks.destinations import open_destination
from sinks.tables.kept import TableOpener, table_identity, table_name
from source.lookup import source_lookup
from source.offsets import SourceClusters, SourceOffsets, named_cluster
from telemetry.http import ProcessState, SparkLoad


class MirrorStatus(msgspec.Struct, rename="kebab"):
    """One mirror's row. Fields that could not be queried are null and `error` says why."""

    name: Annotated[str, about("The mirror's name from the config.")]
    topic: Annotated[str, about("Source topic.")]
    partition: Annotated[int, about("Source partition.")]
    destination: Annotated[str, about("Where the mirror writes, without secrets.")]
    cluster: Annotated[str, about("The source cluster's name (its bootstrap list when written out in the entry).")]
    owner: Annotated[int | None, about("With --shard I/N: the shard that mirrors this partition; else null.")] = None
    source_log_start: Annotated[int | None, about("Earliest offset the source partition holds.")] = None
    source_end: Annotated[
        int | None, about("Offset the mirror reads up to: the last stable offset with read_committed.")
    ] = None
    source_high_watermark: Annotated[int | None, about("The source partition's high watermark.")] = None
    destination_next: Annotated[
        int | None, about("Next source offset the destination expects; null when it holds nothing yet.")
    ] = None
    lag: Annotated[
        int | None,
        about("source-end minus destination-next (or minus source-log-start when empty); null when either is unknown."),
    ] = None
    lag_seconds: Annotated[
        float | None,
        about(
            "Age in seconds of the oldest source record not yet durable at the destination, as the running process "
            "sees it (0 when caught up); null when no process answered or it does not run the mirror."
        ),
    ] = None
    high_watermark_lag: Annotated[
        int | None,
        about("source-high-watermark minus the same position: includes what open transactions hold back."),
    ] = None
    held_since: Annotated[
        str | None,
        about(
            "UTC time (ISO 8601) since which an open transaction at the source holds the mirror at the last stable "
            "offset, as the running process saw it; null when not held or no process answered."
        ),
    ] = None
    rate: Annotated[
        float | None, about("status --watch: source offsets made durable per second since the previous refresh.")
    ] = None
    eta_seconds: Annotated[
        float | None, about("status --watch: lag divided by rate; null while the rate is 0 or unknown.")
    ] = None
    last_flush: Annotated[
        str | None,
        about("UTC time (ISO 8601) of the newest durable write where the destination records it (files, objects)."),
    ] = None
    table_next: Annotated[
        int | None,
        about(
            "The chain offset the archive's table (destination.table) holds up to, from the table's own commits; "
            "null without a table, or when it could not be read (unreadable-tables says why)."
        ),
    ] = None
    state: Annotated[
        str | None,
        about(
            "The mirror in the running process: starting, running, source-unreachable (running, but its source "
            "cluster does not answer: `failure` says why; it fails at source.outage-deadline-ms), "
            "destination-unreachable (running, its writes being retried: `failure` says why; it fails at "
            "destination.retry.deadline-ms), held-by-job (running, but its flush has waited over a second in a "
            "shared Spark job for other partitions' reads: `failure` says how long and which clusters), restarting "
            "(failed, "
            "a restart is due), failed (stopped for good) or absent (the process does not run it: another shard's, "
            "or not discovered yet); null when no process answered. data-lost, whatever the process says: the "
            "source deleted records the destination still needs and source.on-data-loss is fail, so every start of "
            "the mirror fails (`lost` says which)."
        ),
    ] = None
    failure: Annotated[
        str | None,
        about(
            "Why the running process reports the mirror failed or restarting, its source cluster unreachable, or "
            "what holds its flush."
        ),
    ] = None
    lost: Annotated[
        str | None,
        about(
            "Source offsets the destination still needs that the source no longer holds (`first..last`), when "
            "source.on-data-loss is fail; null when none."
        ),
    ] = None
    error: Annotated[str | None, about("Why the row is incomplete; null when every query succeeded.")] = None


class StatusSummary(msgspec.Struct, rename="kebab"):
    """The rows shown, in a few numbers (the first line of the table)."""

    mirrors: Annotated[int, about("Rows shown (after the filters).")]
    lagging: Annotated[int, about("Rows whose lag is above 0.")]
    failed: Annotated[int, about("Rows whose state is restarting, failed or data-lost.")]
    errors: Annotated[int, about("Rows that could not be queried completely (their `error` says why).")]
    lag_unknown: Annotated[
        int, about("Rows whose lag is unknown: their source or destination did not answer (their `error` says why).")
    ]
    total_lag: Annotated[
        int | None,
        about(
            "The sum of the known lags, in offsets; a lower bound when `lag-unknown` is above 0 or a cluster is "
            "unreadable (its selections' partitions are not listed); null when no lag is known and one is missing."
        ),
    ]
    oldest_pending_seconds: Annotated[
        float | None, about("The largest lag-seconds of the rows; null when no process answered.")
    ]


class StatusDocument(msgspec.Struct):
    """`status --format json`: the exit code is 0 exactly when `ok` is true."""

    ok: Annotated[
        bool,
        about(
            "Every mirror shown was queried without error, the running process reports none of them failed, and "
            "every source cluster could be read."
        ),
    ]
    process: Annotated[str | None, about("The process whose /mirrors gave the states; null when none answered.")]
    summary: StatusSummary
    mirrors: list[MirrorStatus]
    spark: Annotated[
        SparkLoad | None,
        about(
            "The running process's Spark jobs for flushes over the last window: jobs per second (and those shared "
            "by many partitions), partitions per job, the wait from a flush falling due to its job starting; null "
            "when no process answered."
        ),
    ] = None
    unreadable_clusters: Annotated[
        dict[str, str],
        about(
            "Source clusters whose topics could not be read (cluster: why): the partitions their selections match "
            "are not listed, and `ok` is false. Explicit partitions of such a cluster are listed, with their error."
        ),
    ] = msgspec.field(default_factory=dict, name="unreadable-clusters")
    kept_since: Annotated[
        str | None,
        about(
            "A pruned archive: it keeps what was committed since this moment (UTC, RFC 3339), `restore --as-of` "
            "serves it and later, and each chain starts at its oldest kept blob (verify's checked-from); null when "
            "never pruned, not an archive, or unreadable."
        ),
    ] = msgspec.field(default=None, name="kept-since")
    unreadable_tables: Annotated[
        dict[str, str],
        about(
            "Archive tables (destination.table) whose position could not be read (table: why); their rows' "
            "table-next is null. The mirrors are not affected: `ok` does not depend on it."
        ),
    ] = msgspec.field(default_factory=dict, name="unreadable-tables")


FAILED_STATES = ("restarting", "failed", "data-lost")
PROCESS_TIMEOUT_S = 3.0  # a process on this host answers at once, or is not there
# Of the command's time, what is kept for closing the clients once the queries' deadline has passed: a tenth of
# it, at most this (closing an aiokafka client or a sink takes milliseconds; one that hangs is left behind).
CLOSE_RESERVE_S = 1.0
DEEP_FACTOR = 10  # --deep: the destinations' inspections (and so the command) may take this many times --timeout


class StatusTimeoutError(MirrorV3Error):
    """Something `status` asked had not answered when the command's deadline came: `what` (a source cluster's
    topics, a partition's offsets, a destination partition), within `timeout_s` seconds."""

    def __init__(self, what: str, timeout_s: float) -> None:
        self.what, self.timeout_s = what, timeout_s
        super().__init__(f"{what}: no answer within the {timeout_s:g}s timeout")


@dataclass(frozen=True)
class StatusReport:
    rows: list[MirrorStatus]
    process: str | None = None  # the /mirrors endpoint that answered
    spark: SparkLoad | None = None  # the process's Spark jobs, as it reported them
    unreadable: dict[str, str] = field(default_factory=dict)  # source cluster → why its topics could not be read
    unreadable_tables: dict[str, str] = field(default_factory=dict)  # archive table → why its position is unknown
    kept_since: str | None = None  # a pruned archive's retention cut

    @property
    def ok(self) -> bool:
        return not self.unreadable and all(row.error is None and row.state not in FAILED_STATES for row in self.rows)


def default_process(port: int) -> str | None:
    """This host's mirror-v3 process, where MIRROR_V3_METRICS_PORT (`port`) says it listens (None: disabled)."""
    return None if port == 0 else f"http://127.0.0.1:{port}"


async def process_state(url: str, timeout_s: float) -> ProcessState | None:
    """The process's /mirrors, or None when nothing (or something else) answers there."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.get(f"{url.rstrip('/')}/mirrors") as response,
        ):
            if response.status != 200:
                return None
            return msgspec.json.decode(await response.read(), type=ProcessState)
    except (aiohttp.ClientError, TimeoutError, OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def apply_states(rows: list[MirrorStatus], state: ProcessState | None) -> None:
    """Each row's state in the running process (None: no process answered), data-lost over any of them."""
    by_name = {} if state is None else {mirror.name: mirror for mirror in state.mirrors}
    for row in rows:
        mirror = by_name.get(row.name)
        in_process = None if state is None else "absent" if mirror is None else mirror.state
        row.state = "data-lost" if row.lost is not None else in_process
        row.failure = None if mirror is None else mirror.error
        row.lag_seconds = None if mirror is None else mirror.pending_age
        if mirror is not None and mirror.held_since is not None:
            row.held_since = _iso_utc(mirror.held_since)


def apply_rates(rows: list[MirrorStatus], previous: StatusReport, elapsed_s: float) -> None:
    """status --watch: each row's rate since the previous refresh `elapsed_s` ago, and the time to lag 0."""
    before = {row.name: _position(row) for row in previous.rows}
    for row in rows:
        earlier, now = before.get(row.name), _position(row)
        if earlier is None or now is None or elapsed_s <= 0:
            continue
        row.rate = max(0, now - earlier) / elapsed_s
        if row.lag == 0:
            row.eta_seconds = 0.0
        elif row.lag is not None and row.rate > 0:
            row.eta_seconds = row.lag / row.rate


class StatusCluster(Protocol):
    """What `status` asks a source cluster (source.offsets.SourceCluster)."""

    async def topic_partitions(self) -> dict[str, int]: ...

    async def check_partition(self, topic: str, partition: int) -> None: ...

    async def offsets(self, topic: str, partition: int, isolation_level: str) -> SourceOffsets: ...


class StatusClusters(Protocol):
    """The clients of the source clusters, one per cluster (source.offsets.SourceClusters)."""

    def get(self, name: str, source: SourceConfig, field: str) -> StatusCluster: ...

    async def close(self) -> None: ...


class StatusSink(Protocol):
    """What `status` asks a destination partition: a sink's read-only inspection."""

    @property
    def description(self) -> str: ...

    async def inspect(self, deep: bool = False) -> Inspection: ...

    async def close(self) -> None: ...


def read_only_sinks(destination: Destination) -> Callable[[MirrorSpec], StatusSink]:
    """Each mirror's sink, without retries: status answers now, and says what failed.

    Raises DestinationError, or ConfigReferenceError when a file the destination names cannot be read."""
    opened = open_destination(destination, source_lookups=source_lookup)
    opened.resolve()
    return lambda mirror: opened.sink(mirror, retries=False)


# Each mirror's table position by mirror name, and each table that could not be read (why).
TablePositionsRead = tuple[dict[str, int], dict[str, str]]


async def table_positions(destination: Destination, mirrors: list[MirrorSpec]) -> TablePositionsRead:
    """Where the archive's tables (destination.table) are for each mirror's chain, one read of each table; nothing
    for a destination without one."""
    opened = open_destination(destination)
    archive, settings = opened.archive, opened.services.table
    if archive is None or settings is None or not mirrors:
        return {}, {}
    try:
        opener = TableOpener(settings, archive, opened.services.daily)
    except ConfigReferenceError as exc:
        return {}, {settings.name: first_line(exc)}
    tables: dict[str, tuple[str, list[MirrorSpec]]] = {}
    for mirror in mirrors:
        identifier = table_identity(settings, archive, mirror.topic, mirror.destination_name)
        name = table_name(settings, mirror.topic, mirror.destination_name)
        tables.setdefault(identifier, (name, []))[1].append(mirror)
    found: dict[str, int] = {}
    unreadable: dict[str, str] = {}
    for identifier, (name, specs) in sorted(tables.items()):
        chains = {chain_name(spec.destination_name, spec.partition): spec.name for spec in specs}
        table = opener(identifier, name)
        try:
            read = await anyio.to_thread.run_sync(table.positions, list(chains), abandon_on_cancel=True)
        except Exception as exc:
            unreadable[identifier] = describe_error(exc)
            continue
        found.update({chains[chain]: offset for chain, offset in read.next_offsets.items() if chain in chains})
    return found, unreadable


async def archive_kept_since(destination: Destination) -> str | None:
    """A pruned archive's cut (`sinks.archive.retention`); None: never pruned, or not an archive."""
    archive = open_destination(destination).archive
    if archive is None:
        return None
    documents = archive.documents()
    try:
        kept = await retention(documents)
    finally:
        await documents.close()
    return None if kept is None else kept.kept_since


@dataclass(frozen=True)
class StatusLinks:
    """Where `status` asks, and the clock its deadline runs on (the tests give fakes)."""

    clusters: Callable[[], StatusClusters] = SourceClusters
    sinks: Callable[[Destination], Callable[[MirrorSpec], StatusSink]] = read_only_sinks
    process: Callable[[str, float], Awaitable[ProcessState | None]] = process_state
    tables: Callable[[Destination, list[MirrorSpec]], Awaitable[TablePositionsRead]] = table_positions
    kept_since: Callable[[Destination], Awaitable[str | None]] = archive_kept_since
    clock: Clock = SYSTEM_CLOCK


async def collect_status(
    config: Config,
    timeout_s: float = 15.0,
    deep: bool = False,
    shard: Shard | None = None,
    process: str | None = None,
    links: StatusLinks = StatusLinks(),
) -> StatusReport:
    """One row per mirror the config selects now (selections are matched against the clusters' metadata),
    with each one's state in the process at `process` (a base URL) if it answers.

    The whole command takes at most `timeout_s` (ten times that with `deep`, for the destinations): what has not
    answered by then is named in its row, or as an unreadable cluster, as not answered in time. A cluster whose
    topics cannot be read is named in the report (its selections' rows are missing); raises ConfigError on a
    collision."""
    return await _Collection(config, timeout_s, deep, shard, links).collect(process)


async def watch_status(
    config: Config,
    interval_s: float,
    emit: Callable[[StatusReport], None],
    timeout_s: float = 15.0,
    deep: bool = False,
    shard: Shard | None = None,
    process: str | None = None,
    links: StatusLinks = StatusLinks(),
) -> None:
    """status --watch: collect (each round within `timeout_s`, as one `status`), add each row's rate and ETA against
    the previous round, emit; until cancelled. A round begins `interval_s` after the previous one began, or when it
    ends if it took longer."""
    clock = links.clock
    previous: tuple[StatusReport, float] | None = None
    while True:
        began = clock.monotonic()
        report = await collect_status(config, timeout_s, deep, shard, process, links)
        if previous is not None:
            apply_rates(report.rows, previous[0], began - previous[1])
        emit(report)
        previous = (report, began)
        await clock.sleep(max(0.0, interval_s - (clock.monotonic() - began)))


class _Cutoff:
    """Work cut short together when its time comes: each piece runs in a `scope()`; `expire()` cancels them all,
    and a scope opened after it is cancelled at once."""

    def __init__(self) -> None:
        self.expired = False
        self._scopes: set[anyio.CancelScope] = set()

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        with anyio.CancelScope() as scope:
            if self.expired:
                scope.cancel()
            self._scopes.add(scope)
            try:
                yield
            finally:
                self._scopes.discard(scope)

    def expire(self) -> None:
        self.expired = True
        for scope in list(self._scopes):
            scope.cancel()


class _Collection:
    """One `status`: the clusters read concurrently, each mirror queried as soon as its cluster's topics are known
    (single entries at once), all of it under the command's deadlines on `links.clock`:

    - the queries' (source metadata and offsets, the process's /mirrors, the destinations without --deep): the
      timeout, less what is kept for closing;
    - the destinations' inspections: the same, or ten times the timeout with --deep;
    - closing the sinks and the clients: the end of the command."""

    def __init__(self, config: Config, timeout_s: float, deep: bool, shard: Shard | None, links: StatusLinks) -> None:
        self.timeout_s, self.deep, self.shard, self.links = timeout_s, deep, shard, links
        self.entries = compile_entries(config)
        self.whole_s = timeout_s * (DEEP_FACTOR if deep else 1)  # the destinations' timeout, and the command's
        self.queries, self.inspections, self.closes = _Cutoff(), _Cutoff(), _Cutoff()
        self.sinks: Callable[[MirrorSpec], StatusSink] | DestinationError
        try:
            self.sinks = links.sinks(config.destination)
        except DestinationError as exc:
            self.sinks = exc
        except ConfigReferenceError as exc:
            self.sinks = DestinationError(str(exc))
        self.clusters = links.clusters()
        self.read: dict[str, dict[str, int]] = {}  # cluster → topic → partitions, for the clusters that answered
        self.unreadable: dict[str, str] = {}  # cluster → why its topics are unknown
        self.rows: dict[str, MirrorStatus] = {}  # by mirror name, each one's query started
        self.specs: dict[str, MirrorSpec] = {}  # by mirror name, what each row describes
        self.state: ProcessState | None = None
        self.destination = config.destination
        self.unreadable_tables: dict[str, str] = {}
        self.kept_since: str | None = None

    async def collect(self, process: str | None) -> StatusReport:
        reserve = min(CLOSE_RESERVE_S, self.timeout_s / 10)
        deadlines = [
            (self.timeout_s - reserve, self.queries),
            (self.whole_s - reserve, self.inspections),
            (self.whole_s, self.closes),
        ]
        # Shielded: after a cancellation (Ctrl-C during --watch) closing the clients is still bounded.
        timer = anyio.CancelScope(shield=True)

        async def run_out() -> None:
            with timer:
                began = self.links.clock.monotonic()
                for at, cutoff in deadlines:
                    await self.links.clock.sleep(max(0.0, began + at - self.links.clock.monotonic()))
                    cutoff.expire()

        with task_group_failures_unwrapped():
            async with anyio.create_task_group() as timing:
                timing.start_soon(run_out)
                try:
                    async with anyio.create_task_group() as work:
                        if process is not None:
                            work.start_soon(self.ask_process, process)
                        self.start_queries(work)  # the single entries: no topics to read first
                        # Every shard's (the owner is a column).
                        sources = {entry.cluster: entry for entry in self.entries if entry.single is None}
                        for name, entry in sources.items():
                            work.start_soon(self.read_cluster, name, entry, work)
                    await self.ask_tables()  # once every row is known: one read of each table for all its rows
                finally:
                    with anyio.CancelScope(shield=True), self.closes.scope():
                        await self.clusters.close()
                    timer.cancel()
        rows = [self.rows[mirror.name] for mirror in expand(self.entries, self.read, None).mirrors]
        apply_states(rows, self.state)
        if self.state is None:
            return StatusReport(
                rows, unreadable=self.unreadable, unreadable_tables=self.unreadable_tables, kept_since=self.kept_since
            )
        return StatusReport(
            rows, process, self.state.spark, self.unreadable, self.unreadable_tables, kept_since=self.kept_since
        )

    async def ask_tables(self) -> None:
        """Each row's table position, and the archive's retention, within the destinations' deadline (not known when
        it passes)."""
        with self.inspections.scope():
            try:
                self.kept_since = await self.links.kept_since(self.destination)
            except (MirrorV3Error, ConfigReferenceError, OSError):
                self.kept_since = None  # the rows' own inspections say what is wrong with the destination
            try:
                found, self.unreadable_tables = await self.links.tables(self.destination, list(self.specs.values()))
            except (DestinationError, ConfigReferenceError) as exc:
                self.unreadable_tables = {"table": first_line(exc)}
                return
            for name, offset in found.items():
                self.rows[name].table_next = offset

    def start_queries(self, work: TaskGroup) -> None:
        """Query every mirror the clusters read so far select that is not queried yet (raises ConfigError on a
        collision)."""
        for mirror in expand(self.entries, self.read, None).mirrors:
            if mirror.name not in self.rows:
                self.rows[mirror.name] = MirrorStatus(mirror.name, mirror.topic, mirror.partition, "-", mirror.cluster)
                self.specs[mirror.name] = mirror
                work.start_soon(self.query, mirror)

    async def read_cluster(self, name: str, entry: Entry, work: TaskGroup) -> None:
        with self.queries.scope():
            try:
                cluster = self.clusters.get(name, self._capped(entry.source), entry.source_field)
                topics = await cluster.topic_partitions()
            except SourceError as exc:
                self.unreadable[name] = first_line(exc)
                return
            self.read[name] = topics
            self.start_queries(work)
            return
        self.unreadable[name] = str(
            StatusTimeoutError(f"source cluster {named_cluster(name, entry.source.bootstrap_servers)}", self.timeout_s)
        )

    async def ask_process(self, url: str) -> None:
        with self.queries.scope():
            self.state = await self.links.process(url, min(self.timeout_s, PROCESS_TIMEOUT_S))

    async def query(self, mirror: MirrorSpec) -> None:
        """The mirror's row: its source and its destination asked at the same time."""
        row = self.rows[mirror.name]
        if self.shard is not None:
            row.owner = self.shard.owner(*mirror.key)
        sink = None if isinstance(self.sinks, DestinationError) else self.sinks(mirror)
        problems: dict[str, str] = {}  # "source", "destination" → why it is not known
        async with anyio.create_task_group() as both:
            both.start_soon(self._ask_source, mirror, row, problems)
            if sink is not None:
                row.destination = sink.description
                both.start_soon(self._ask_destination, sink, row, problems)
        if sink is None:
            problems["destination"] = str(self.sinks)
        # An unknown destination position (unreadable, corrupt chain) leaves the lag unknown, never a guess.
        if row.source_end is not None and row.source_high_watermark is not None and "destination" not in problems:
            position = row.destination_next if row.destination_next is not None else row.source_log_start
            if position is not None:
                row.lag = max(0, row.source_end - position)
                row.high_watermark_lag = max(0, row.source_high_watermark - position)
        if problems:
            row.error = "; ".join(problems[part] for part in ("source", "destination") if part in problems)
        _mark_lost(row, mirror)

    async def _ask_source(self, mirror: MirrorSpec, row: MirrorStatus, problems: dict[str, str]) -> None:
        with self.queries.scope():
            try:
                cluster = self.clusters.get(mirror.cluster, self._capped(mirror.source), mirror.source_field)
                # Metadata first: a missing topic or partition is answered as such at once, where an offset query
                # would retry it until the timeout.
                await cluster.check_partition(mirror.topic, mirror.partition)
                offsets = await cluster.offsets(mirror.topic, mirror.partition, mirror.source.isolation_level)
            except Exception as exc:
                problems["source"] = describe_error(exc)
                return
            row.source_log_start, row.source_end = offsets.log_start, offsets.end
            row.source_high_watermark = offsets.high_watermark
            return
        problems["source"] = str(
            StatusTimeoutError(
                f"source {named_cluster(mirror.cluster, mirror.source.bootstrap_servers)}", self.timeout_s
            )
        )

    async def _ask_destination(self, sink: StatusSink, row: MirrorStatus, problems: dict[str, str]) -> None:
        try:
            with self.inspections.scope():
                try:
                    inspection = await sink.inspect(self.deep)
                except Exception as exc:
                    problems["destination"] = describe_error(exc)
                    return
                row.destination_next = inspection.next_offset
                if inspection.last_write is not None:
                    row.last_flush = _iso_utc(inspection.last_write)
                return
            problems["destination"] = str(StatusTimeoutError(f"destination {sink.description}", self.whole_s))
        finally:
            with anyio.CancelScope(shield=True), self.closes.scope():
                await sink.close()

    def _capped(self, source: SourceConfig) -> SourceConfig:
        """The source's settings with requests no longer than the command (one client per cluster: the topics'
        read and the mirrors' queries share it)."""
        timeout_ms = min(source.request_timeout_ms, max(1, int(self.timeout_s * 1000)))
        return msgspec.structs.replace(source, request_timeout_ms=timeout_ms)


def _mark_lost(row: MirrorStatus, mirror: MirrorSpec) -> None:
    """Records the destination still needs, deleted at the source (retention, DeleteRecords): with on-data-loss
    fail, every start of the mirror fails on them; status says so instead of showing an ordinary backlog."""
    if mirror.source.on_data_loss != "fail" or row.destination_next is None or row.source_log_start is None:
        return  # skip goes on without them; an empty destination starts at the log start
    if row.source_log_start > row.destination_next:
        row.lost = f"{row.destination_next}..{row.source_log_start - 1}"


def render_schema() -> str:
    schema = document_schema(StatusDocument, "mirror-v3 status --format json")
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _iso_utc(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _position(row: MirrorStatus) -> int | None:
    """The destination's next offset; for an empty destination (known to be empty: its lag is known), where
    the mirror starts."""
    if row.destination_next is not None:
        return row.destination_next
    return row.source_log_start if row.lag is not None else None
