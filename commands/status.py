"""`status`: per mirror, where the source is, where the destination is, the lag, and the state in the
running process.

No Spark: offsets come from aiokafka, the destination position from the sink's read-only inspect.
Every mirror is queried concurrently, each bounded by a timeout. The state comes from the process's
/mirrors endpoint (by default the one on this host's metrics port, as `kubectl exec` into the pod
reaches it); without an answer the state is unknown, never guessed.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import aiohttp
import anyio
import msgspec

from commands.output import about, document_schema
from config.estate import MirrorSpec, Shard, compile_entries
from config.model import Config
from config.secrets import ConfigReferenceError
from core.errors import SourceError, first_line
from sinks.base import DestinationError, Sink
from sinks.factory import SinkFactory
from source.lookup import source_lookup
from source.offsets import SourceClusters
from supervisor.describe import describe_error
from supervisor.discovery import plan_readable
from supervisor.http import ProcessState, SparkLoad


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
    state: Annotated[
        str | None,
        about(
            "The mirror in the running process: starting, running, source-unreachable (running, but its source "
            "cluster does not answer: `failure` says why; it fails at source.outage-deadline-ms), "
            "destination-unreachable (running, its writes being retried: `failure` says why; it fails at "
            "destination.retry.deadline-ms), restarting (failed, "
            "a restart is due), failed (stopped for good) or absent (the process does not run it: another shard's, "
            "or not discovered yet); null when no process answered. data-lost, whatever the process says: the "
            "source deleted records the destination still needs and source.on-data-loss is fail, so every start of "
            "the mirror fails (`lost` says which)."
        ),
    ] = None
    failure: Annotated[
        str | None,
        about("Why the running process reports the mirror failed or restarting, or its source cluster unreachable."),
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
    total_lag: Annotated[int, about("The sum of the known lags, in offsets.")]
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


FAILED_STATES = ("restarting", "failed", "data-lost")
PROCESS_TIMEOUT_S = 3.0  # a process on this host answers at once, or is not there


@dataclass(frozen=True)
class StatusReport:
    rows: list[MirrorStatus]
    process: str | None = None  # the /mirrors endpoint that answered
    spark: SparkLoad | None = None  # the process's Spark jobs, as it reported them
    unreadable: dict[str, str] = field(default_factory=dict)  # source cluster → why its topics could not be read

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


async def collect_status(
    config: Config,
    timeout_s: float = 15.0,
    deep: bool = False,
    shard: Shard | None = None,
    process: str | None = None,
) -> StatusReport:
    """One row per mirror the config selects now (selections are matched against the clusters' metadata),
    with each one's state in the process at `process` (a base URL) if it answers.

    A cluster whose topics cannot be read is named in the report (its selections' rows are missing); raises
    ConfigError on a collision."""
    clusters = SourceClusters()
    try:
        with anyio.fail_after(timeout_s):
            # Every shard's (the owner is a column).
            plan, errors = await plan_readable(clusters, compile_entries(config), None)
    except TimeoutError:
        await clusters.close()
        raise SourceError(f"reading the source clusters' topics timed out after {timeout_s:g}s") from None
    except BaseException:
        await clusters.close()
        raise
    rows: list[MirrorStatus] = [MirrorStatus("", "", 0, "", "")] * len(plan.mirrors)
    try:
        sinks: SinkFactory | DestinationError = SinkFactory(config.destination, source_lookup)
    except DestinationError as exc:
        sinks = exc
    except ConfigReferenceError as exc:
        sinks = DestinationError(str(exc))

    async def query(index: int, mirror: MirrorSpec) -> None:
        rows[index] = await _query_one(mirror, sinks, clusters, timeout_s, deep)
        if shard is not None:
            rows[index].owner = shard.owner(*mirror.key)

    state: ProcessState | None = None

    async def ask_process() -> None:
        nonlocal state
        if process is not None:
            state = await process_state(process, min(timeout_s, PROCESS_TIMEOUT_S))

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ask_process)
            for index, mirror in enumerate(plan.mirrors):
                tasks.start_soon(query, index, mirror)
    finally:
        await clusters.close()
    apply_states(rows, state)
    unreadable = {cluster: first_line(error) for cluster, error in errors.items()}
    if state is None:
        return StatusReport(rows, unreadable=unreadable)
    return StatusReport(rows, process, state.spark, unreadable)


async def watch_status(
    config: Config,
    interval_s: float,
    emit: Callable[[StatusReport], None],
    timeout_s: float = 15.0,
    deep: bool = False,
    shard: Shard | None = None,
    process: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """status --watch: collect, add each row's rate and ETA against the previous round, emit; until cancelled."""
    previous: tuple[StatusReport, float] | None = None
    while True:
        began = clock()
        report = await collect_status(config, timeout_s, deep, shard, process)
        if previous is not None:
            apply_rates(report.rows, previous[0], began - previous[1])
        emit(report)
        previous = (report, began)
        await anyio.sleep(max(0.0, interval_s - (clock() - began)))


async def _query_one(
    mirror: MirrorSpec,
    sinks: SinkFactory | DestinationError,
    clusters: SourceClusters,
    timeout_s: float,
    deep: bool,
) -> MirrorStatus:
    # No retries here: status answers now, and says what failed.
    sink: Sink[Any] | None = None if isinstance(sinks, DestinationError) else sinks.build(mirror, retries=False)
    row = MirrorStatus(mirror.name, mirror.topic, mirror.partition, sink.description if sink else "-", mirror.cluster)
    errors: list[str] = []
    timeout_ms = min(mirror.source.request_timeout_ms, int(timeout_s * 1000))
    try:
        cluster = clusters.get(
            msgspec.structs.replace(mirror.source, request_timeout_ms=timeout_ms), mirror.source_field
        )
        with anyio.fail_after(timeout_s):
            # Metadata first: a missing topic or partition is answered as such at once, where an offset query
            # would retry it until the timeout.
            await cluster.check_partition(mirror.topic, mirror.partition)
            offsets = await cluster.offsets(mirror.topic, mirror.partition, mirror.source.isolation_level)
        row.source_log_start, row.source_end = offsets.log_start, offsets.end
        row.source_high_watermark = offsets.high_watermark
    except TimeoutError:
        errors.append(f"source {mirror.source.bootstrap_servers}: timed out after {timeout_s:g}s")
    except Exception as exc:
        errors.append(describe_error(exc))
    destination_known = False
    if sink is None:
        errors.append(str(sinks))
    else:
        try:
            with anyio.fail_after(timeout_s * (10 if deep else 1)):
                inspection = await sink.inspect(deep)
            row.destination_next = inspection.next_offset
            destination_known = True
            if inspection.last_write is not None:
                row.last_flush = _iso_utc(inspection.last_write)
        except TimeoutError:
            errors.append(f"destination {sink.description}: timed out after {timeout_s:g}s")
        except Exception as exc:
            errors.append(describe_error(exc))
        finally:
            with anyio.CancelScope(shield=True):
                await sink.close()
    # An unknown destination position (unreadable, corrupt chain) leaves the lag unknown, never a guess.
    if row.source_end is not None and row.source_high_watermark is not None and destination_known:
        position = row.destination_next if row.destination_next is not None else row.source_log_start
        if position is not None:
            row.lag = max(0, row.source_end - position)
            row.high_watermark_lag = max(0, row.source_high_watermark - position)
    if errors:
        row.error = "; ".join(errors)
    _mark_lost(row, mirror)
    return row


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
