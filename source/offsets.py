"""Offset queries against the source cluster (aiokafka), shared by all mirrors of one cluster.

Spark reads the records; this client only answers "where does the partition start, where is its
last stable offset, where is its high watermark" so the actor can plan exact ranges.

Two ways to ask. `offsets` asks now (a mirror starting or draining; queries that arrive together share one
request). `watch` enrols a mirror in the cluster's estate poll: once per poll interval one request per kind asks
every watched partition at once (aiokafka sends one per partition leader), and only the mirrors whose partition
moved are woken, so an idle partition costs its share of one request and a comparison, not a task wake-up.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from aiokafka import TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError
from anyio.abc import TaskGroup

from config.model import SourceConfig
from core.errors import MissingSourcePartitionError, SourceError, SourceUnavailableError, first_error, first_line
from kafka_clients.clients import fetch_all_metadata, new_consumer
from kafka_clients.diagnosis import diagnose_bootstrap
from kafka_clients.settings import cluster_access
from source.outages import ClusterReachability

# How long a shared offset request may take before its partitions are asked one by one. aiokafka retries a
# partition it has no leader for (a deleted topic, say) until the request timeout: in a shared request, that
# one partition would hold every other mirror's answer back for as long.
BATCH_PATIENCE_SECONDS = 3.0
# How long an offset query waits for others to share its request. Mirrors that sleep the same poll
# interval wake within microseconds of each other; 1 000 idle mirrors then cost a few requests per poll
# instead of 3 000.
COALESCE_SECONDS = 0.002

_PartitionOffsets = tuple[int, int, int]  # log start, last stable offset, high watermark
_KINDS = ("start", "stable", "high")
# How often the estate poll asks the log start, and the end no watch reads to (the high watermark of
# read_committed mirrors): every tenth round, 5 s at the default interval. One kind instead of three cuts the
# poll's CPU by about three (29 ms per round of 2 000 partitions for all three, measured). A deletion seen late
# is caught by the read that finds its offsets gone (the mirror then asks at once); a hold or a watermark lag
# seen a few seconds late decides nothing.
FULL_POLL_EVERY = 10
_Answers = dict[TopicPartition, int]
Sighting = tuple[float, float, int]  # polls that showed one end: first asked at, last asked at, the end


class _Query:
    """One mirror's offset query while it waits for a shared request: answered (`outcome`), or told to ask on
    its own (`alone`: the shared request failed or took too long), or woken to lead the next request."""

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.outcome: _PartitionOffsets | BaseException | None = None
        self.alone = False
        self.woken = anyio.Event()

    def wake(self) -> None:
        self.woken.set()


class _Fetch:
    """A metadata fetch other mirrors wait for: when done, the answer is in the cluster's cache, or `failure` says
    why not (neither: its leader was cancelled, and a waiting mirror leads the next)."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.failure: BaseException | None = None


@dataclass(frozen=True)
class SourceOffsets:
    log_start: int  # earliest offset the broker still has (advanced by retention / DeleteRecords)
    end: int  # exclusive end a reader may read to: last stable offset when read_committed
    high_watermark: int


@dataclass(frozen=True)
class PolledOffsets:
    """A watched partition's newest offsets, and what the polls showed since the watcher last looked: one
    sighting per distinct end, oldest first (the times tell how long each offset has been readable)."""

    offsets: SourceOffsets
    seen: tuple[Sighting, ...]
    asked_at: float  # when the request that gave `offsets` was sent


class OffsetWatch:
    """One mirror's place in its cluster's estate poll: the newest answer for its partition, the sightings since the
    mirror last looked, and whether the last poll failed to answer it (then the mirror asks on its own, so an error
    names its partition). `changed` is called when an answer differs from the one before, or when none came."""

    def __init__(
        self, tp: TopicPartition, isolation_level: str, interval_s: float, changed: Callable[[], None]
    ) -> None:
        self.tp = tp
        self.interval_s = interval_s
        self.isolation_level = isolation_level
        self._committed = isolation_level == "read_committed"
        self.reads_to = "stable" if self._committed else "high"  # the kind of end the mirror reads to
        self._changed = changed
        self.answer: _PartitionOffsets | None = None
        self.asked_at = 0.0  # when the request that gave `answer` was sent
        self.unanswered = False
        self._seen: list[list[float]] = []  # [first asked at, last asked at, end]
        # The mirror's wish: woken only once the readable end reaches this (None: at every change).
        self.wake_at_end: int | None = None

    def answered(self, asked_at: float, answer: _PartitionOffsets) -> None:
        end = answer[1] if self._committed else answer[2]
        if self._seen and self._seen[-1][2] == end:
            self._seen[-1][1] = asked_at
        else:
            self._seen.append([asked_at, asked_at, end])
        wake = answer != self.answer and self._matters(answer)
        self.answer, self.asked_at, self.unanswered = answer, asked_at, False
        if wake:
            self._changed()

    def _matters(self, answer: _PartitionOffsets) -> bool:
        """Whether the mirror must see this answer now: its end reached what the mirror waits for (a full blob, or
        any record when it waits for nothing), the log start moved (records may be lost), the partition shrank,
        or an open transaction began or stopped holding the last stable offset. Anything else only moves the end
        of a flush that is due at a time the mirror knows already."""
        old = self.answer
        if old is None or self.unanswered or self.wake_at_end is None:
            return True
        start, stable, high = answer
        if (stable if self._committed else high) >= self.wake_at_end:
            return True
        return start != old[0] or high < old[2] or (stable < high) != (old[1] < old[2])

    def not_answered(self) -> None:
        # Every round the poll cannot answer, the mirror asks on its own, as it would with no estate poll: a
        # partition whose leader is gone must not keep its neighbours from seeing their new records.
        self.unanswered = True
        self._changed()

    def take(self) -> PolledOffsets | None:
        """The newest answer and the sightings since the last take; None when the poll has none to give."""
        if self.answer is None or self.unanswered:
            return None
        start, stable, high = self.answer
        seen = tuple((first, last, int(end)) for first, last, end in self._seen)
        self._seen = []
        end = stable if self._committed else high
        return PolledOffsets(SourceOffsets(log_start=start, end=end, high_watermark=high), seen, self.asked_at)


def named_cluster(name: str, bootstrap_servers: str) -> str:
    """A cluster where a topic is missing or a query went unanswered: its name to find it in the config, its
    bootstrap list to check it (`prod (10.0.0.1:9092)`); a source written out in a mirror is named by that list."""
    return name if name == bootstrap_servers else f"{name} ({bootstrap_servers})"


class SourceClientClosedError(SourceError):
    """An offset query on a source client that was closed (the process is stopping)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        super().__init__(f"source {cluster}: offset query failed: the client was closed")


class SourceCluster:
    """Two metadata-only consumers: one sees the last stable offset, the other the high watermark."""

    def __init__(
        self,
        bootstrap_servers: str,
        request_timeout_ms: int,
        client_settings: dict[str, Any] | None = None,
        client_id: str = "mirror-v3",
        clock: Callable[[], float] = time.monotonic,
        name: str | None = None,
    ) -> None:
        """`name`: the cluster's name in the config (`clusters.<name>`), which its errors and log lines say; a
        source written out in a mirror (`source:`) is named by its bootstrap list."""
        self.bootstrap_servers = bootstrap_servers
        self.name = name or bootstrap_servers
        self._named = named_cluster(self.name, bootstrap_servers)
        self._clock = clock  # the actors' monotonic clock: sightings are compared with their deadlines
        self._timeout_s = request_timeout_ms / 1000
        self._timeout_ms = request_timeout_ms
        self._client_settings = dict(client_settings or {})
        self._committed, self._uncommitted = (
            new_consumer(
                bootstrap_servers,
                self._client_settings,
                request_timeout_ms,
                isolation,
                client_id,
                connections_max_idle_ms=540_000,
            )
            for isolation in ("read_committed", "read_uncommitted")
        )
        self._started = False
        self._start_lock = anyio.Lock()
        # Offset queries waiting for the next shared request, and whether one of them leads it. The leader is a
        # querying mirror itself (no task of the cluster's own): it waits COALESCE_SECONDS, sends one request for
        # every query then waiting, and answers them all.
        self._pending: dict[_Query, None] = {}  # in arrival order
        self._leading = False
        self._closed = False
        # The metadata fetch shared by mirrors that check their partition at about the same time.
        self._metadata: Any = None
        self._metadata_at = -1e9
        self._metadata_fetch: _Fetch | None = None
        # The estate poll: every watching mirror, and an event set when the first one enrols.
        self._watches: dict[OffsetWatch, None] = {}
        self._watched = anyio.Event()
        self._known: dict[TopicPartition, _PartitionOffsets] = {}  # the last round's answers
        self._rounds = 0  # rounds answered since the last failure
        self.reachability = ClusterReachability(self.name, clock)  # from every request's outcome

    async def start(self) -> None:
        if self._started:  # without the lock: anyio's yields even when free, and every query starts here
            return
        async with self._start_lock:
            if self._closed:
                raise SourceClientClosedError(self.name)
            if self._started:
                return
            try:
                with anyio.fail_after(self._timeout_s):
                    await self._committed.start()
                with anyio.fail_after(self._timeout_s):
                    await self._uncommitted.start()
            except (TimeoutError, KafkaError, OSError) as exc:
                await self._stop_consumers()  # half-started: the next start begins afresh
                reason, permanent = _describe(exc), False
                if isinstance(exc, KafkaConnectionError):
                    diagnosis = await diagnose_bootstrap(
                        self.bootstrap_servers, self._client_settings, self._timeout_ms
                    )
                    reason, permanent = diagnosis.reason, diagnosis.permanent
                # A credential or certificate problem stays; anything else may be a broker restarting.
                if permanent:
                    raise SourceError(f"source cluster {self.name} unreachable: {reason}") from None
                raise self._unavailable(f"source cluster {self.name} unreachable: {reason}") from None
            self._started = True

    async def check_partition(self, topic: str, partition: int) -> None:
        metadata = await self._checked_metadata()
        if topic not in metadata.topics():
            raise MissingSourcePartitionError(topic, partition, self._named, None)
        partitions = metadata.partitions_for_topic(topic) or set()
        if partition not in partitions:
            raise MissingSourcePartitionError(topic, partition, self._named, tuple(sorted(partitions)))

    async def topic_partitions(self) -> dict[str, int]:
        """Every topic of the cluster (internal ones included) and its partition count."""
        metadata = await self._checked_metadata()
        return {
            topic: len(metadata.partitions_for_topic(topic) or ())
            for topic in metadata.topics(exclude_internal_topics=False)
        }

    async def _checked_metadata(self) -> Any:
        await self.start()
        try:
            metadata = await self._cluster_metadata()
        except (TimeoutError, KafkaError, OSError) as exc:
            raise self._unavailable(f"source cluster {self.name}: metadata request failed: {_describe(exc)}") from None
        self.reachability.answered()
        return metadata

    async def _cluster_metadata(self) -> Any:
        """The cluster's topics and partitions. Mirrors starting together share one fetch: each full
        metadata response describes every partition of the cluster, so 1 000 mirrors fetching their
        own would decode it 1 000 times on the event loop and delay every start. An answer is reused for a
        second; a failure reaches the mirrors that waited for that fetch, and the next caller asks again."""
        while True:
            if anyio.current_time() - self._metadata_at <= 1.0:
                return self._metadata
            fetch = self._metadata_fetch
            if fetch is not None:  # under way: share it
                await fetch.done.wait()
                if fetch.failure is not None:
                    raise fetch.failure
                continue  # answered (now fresh), or its leader was cancelled: then this one leads
            fetch = self._metadata_fetch = _Fetch()
            try:
                with anyio.fail_after(self._timeout_s):
                    metadata = await fetch_all_metadata(self._committed)
                self._metadata, self._metadata_at = metadata, anyio.current_time()
                return metadata
            except Exception as exc:
                fetch.failure = exc
                raise
            finally:
                self._metadata_fetch = None
                fetch.done.set()

    async def offsets(self, topic: str, partition: int, isolation_level: str) -> SourceOffsets:
        """Where the partition starts and ends. Queries that arrive within COALESCE_SECONDS of each other
        (the mirrors of one process poll in step) travel together: one request per kind for all of them."""
        await self.start()
        query = _Query(TopicPartition(topic, partition))
        try:
            outcome = await self._answer(query)
        finally:
            self._pending.pop(query, None)  # a query that gave up leaves the queue
        if isinstance(outcome, BaseException):
            raise outcome
        start, stable, high = outcome
        end = stable if isolation_level == "read_committed" else high
        return SourceOffsets(log_start=start, end=end, high_watermark=high)

    async def _answer(self, query: _Query) -> _PartitionOffsets | BaseException:
        while query.outcome is None:
            if self._closed:
                return SourceClientClosedError(self.name)
            if query.alone:  # the shared request failed or hung: ask for this partition on its own
                try:
                    return (await self._list_offsets([query.tp]))[query.tp]
                except SourceError as exc:
                    return exc
            self._pending.setdefault(query)
            if self._leading:
                query.woken = anyio.Event()
                await query.woken.wait()
            else:
                await self._lead()
        return query.outcome

    async def _lead(self) -> None:
        """Send one request for every query waiting, and answer them; if this mirror is cancelled meanwhile, the
        others wake and one of them leads instead."""
        self._leading = True
        batch: list[_Query] = []
        try:
            await anyio.sleep(COALESCE_SECONDS)
            batch, self._pending = list(self._pending), {}
            tps = list(dict.fromkeys(query.tp for query in batch))
            if len(tps) == 1:  # nothing to share: no patience limit, as a query on its own
                try:
                    answers: dict[TopicPartition, _PartitionOffsets | BaseException] = dict(
                        await self._list_offsets(tps)
                    )
                except SourceError as exc:
                    answers = dict.fromkeys(tps, exc)
            else:
                answers = {}
                with anyio.move_on_after(BATCH_PATIENCE_SECONDS):
                    with contextlib.suppress(SourceError):
                        answers = dict(await self._list_offsets(tps))
            for query in batch:
                if query.tp in answers:
                    query.outcome = answers[query.tp]
                else:  # so an error names its partition and a partition that hangs holds back only its mirror
                    query.alone = True
        finally:
            self._leading = False
            for query in (*batch, *self._pending):
                query.wake()

    def watch(
        self, topic: str, partition: int, isolation_level: str, interval_s: float, changed: Callable[[], None]
    ) -> OffsetWatch:
        """Enrol a mirror in the estate poll (polled at the smallest interval of the cluster's watches)."""
        watch = OffsetWatch(TopicPartition(topic, partition), isolation_level, interval_s, changed)
        self._watches[watch] = None
        self._watched.set()
        return watch

    def unwatch(self, watch: OffsetWatch) -> None:
        self._watches.pop(watch, None)

    async def polled(self, watch: OffsetWatch) -> PolledOffsets:
        """The watch's newest answer; asked now (on its own, shared with mirrors asking at the same moment) before
        the first poll and when the last poll did not answer this partition."""
        taken = watch.take()
        if taken is not None:
            return taken
        asked_at = self._clock()
        offsets = await self.offsets(watch.tp.topic, watch.tp.partition, watch.isolation_level)
        return PolledOffsets(offsets, ((asked_at, asked_at, offsets.end),), asked_at)

    async def poll_forever(self) -> None:
        """Ask every watched partition's offsets once per poll interval and tell the watches. A partition the
        request did not answer within BATCH_PATIENCE_SECONDS (or at all) is left to its mirror to ask alone.

        Cost: one request per leader per interval (three every FULL_POLL_EVERY), and a comparison per partition;
        CPU grows with the partitions watched, the event loop's wake-ups only with the partitions that moved."""
        while not self._closed:
            if not self._watches:
                self._watched = anyio.Event()
                await self._watched.wait()
                continue
            began = self._clock()
            interval_s = min(watch.interval_s for watch in self._watches)
            await self.poll_once()
            await anyio.sleep(max(0.0, began + interval_s - self._clock()))

    async def poll_once(self) -> None:
        """One round of the estate poll: the end each watch reads to, and every FULL_POLL_EVERY rounds (or when a
        partition is new to the poll) the log start and the other end too."""
        asked_at = self._clock()
        watches = list(self._watches)
        tps = list(dict.fromkeys(watch.tp for watch in watches))
        full = self._rounds % FULL_POLL_EVERY == 0 or any(tp not in self._known for tp in tps)
        kinds = _KINDS if full else tuple(dict.fromkeys(watch.reads_to for watch in watches))
        answers: dict[TopicPartition, _PartitionOffsets] = {}
        with contextlib.suppress(SourceError):
            await self.start()  # not under the patience limit: a start cut short would leave a client half-started
            with anyio.move_on_after(BATCH_PATIENCE_SECONDS):
                found = await self._request_offsets(tps, kinds)
                answers = {tp: _combined(found, tp, self._known.get(tp)) for tp in tps}
        if tps and not answers:
            await self._probe()
        self._rounds = self._rounds + 1 if answers else 0  # after a failure, a full round
        self._known = answers
        for watch in watches:
            answer = answers.get(watch.tp)
            if answer is None:
                watch.not_answered()
            else:
                watch.answered(asked_at, answer)

    async def _probe(self) -> None:
        """After a poll round without an answer: is the cluster down, or was one request slow? A metadata request
        tells, at once when no broker accepts a connection (an offset request waits its whole timeout for a
        leader instead); its outcome goes to the cluster's reachability."""
        if not self._started:
            return  # start() failed, and said so
        try:
            with anyio.fail_after(self._timeout_s):
                await fetch_all_metadata(self._committed)
        except (TimeoutError, KafkaError, OSError) as exc:
            self._unavailable(f"source cluster {self.name}: no broker answers: {_describe(exc)}")
            return
        self.reachability.answered()

    async def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is at or after `timestamp_ms` (ListOffsets by time)."""
        await self.start()
        tp = TopicPartition(topic, partition)
        try:
            with anyio.fail_after(self._timeout_s):
                found = await self._committed.offsets_for_times({tp: timestamp_ms})
        except (TimeoutError, KafkaError, OSError) as exc:
            raise SourceError(
                f"source {topic}-{partition} on {self._named}: offset query by time failed: {_describe(exc)}"
            ) from None
        answer = found.get(tp)
        return None if answer is None else int(answer.offset)

    async def _list_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, _PartitionOffsets]:
        found = await self._request_offsets(tps, _KINDS)
        return {tp: (found["start"][tp], found["stable"][tp], found["high"][tp]) for tp in tps}

    async def _request_offsets(
        self, tps: list[TopicPartition], kinds: Sequence[str]
    ) -> dict[str, dict[TopicPartition, int]]:
        """One ListOffsets request per kind asked (aiokafka sends one per partition leader), at the same time:
        `start` (log start), `stable` (last stable offset), `high` (high watermark)."""
        found: dict[str, dict[TopicPartition, int]] = {}
        requests_of: dict[str, Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]] = {
            "start": self._committed.beginning_offsets,
            "stable": self._committed.end_offsets,
            "high": self._uncommitted.end_offsets,
        }

        async def ask(kind: str) -> None:
            found[kind] = await requests_of[kind](tps)

        try:
            with anyio.fail_after(self._timeout_s):
                async with anyio.create_task_group() as requests:
                    for kind in kinds:
                        requests.start_soon(ask, kind)
        except Exception as exc:
            failure = first_error(exc)  # a request's own error, out of the task group's
            if not isinstance(failure, (TimeoutError, KafkaError, OSError)):
                raise failure from None
            where = f"{tps[0].topic}-{tps[0].partition}" if len(tps) == 1 else f"{len(tps)} partitions"
            raise self._unavailable(
                f"source {where} on {self._named}: offset query failed: {_describe(failure)}"
            ) from None
        self.reachability.answered()
        return found

    def _unavailable(self, message: str) -> SourceUnavailableError:
        """The error of a request the cluster did not answer; the cluster is down from now (if not already)."""
        error = SourceUnavailableError(message)
        self.reachability.failed(error)
        return error

    async def close(self) -> None:
        # Queries waiting for a request fail; a request under way fails when its consumers stop.
        self._closed = True
        pending, self._pending = list(self._pending), {}
        failure = SourceClientClosedError(self.name)
        for query in pending:
            query.outcome = failure
            query.wake()
        await self._stop_consumers()

    async def _stop_consumers(self) -> None:
        for consumer in (self._committed, self._uncommitted):
            # Closing a half-started client must not mask the real error.
            with contextlib.suppress(Exception):
                await consumer.stop()
        self._started = False


class SourceClusters:
    """One SourceCluster per named cluster (and its settings), so N mirrors of a cluster share connections."""

    def __init__(self) -> None:
        self._clusters: dict[tuple[str, str, int, object], SourceCluster] = {}
        self._polls: TaskGroup | None = None  # while `poll_forever` runs

    def get(self, name: str, source: SourceConfig, field: str) -> SourceCluster:
        """The shared client of the cluster `name` (as the config names it: its errors and log lines say it);
        `source` its settings and `field` their config path, for errors.

        Raises config.secrets.ConfigReferenceError when its TLS files cannot be loaded.
        """
        key = (name, source.bootstrap_servers, source.request_timeout_ms, source.security)
        if key not in self._clusters:
            self._clusters[key] = SourceCluster(
                source.bootstrap_servers,
                source.request_timeout_ms,
                cluster_access(source, field).aiokafka(),
                name=name,
            )
            if self._polls is not None:
                self._polls.start_soon(self._clusters[key].poll_forever)
        return self._clusters[key]

    async def poll_forever(self) -> None:
        """Run every cluster's estate poll (those created later too) until cancelled."""
        try:
            async with anyio.create_task_group() as polls:
                self._polls = polls
                for cluster in self._clusters.values():
                    polls.start_soon(cluster.poll_forever)
                await anyio.sleep_forever()
        finally:
            self._polls = None

    async def close(self) -> None:
        for cluster in self._clusters.values():
            await cluster.close()
        self._clusters.clear()


def _combined(
    found: dict[str, dict[TopicPartition, int]], tp: TopicPartition, known: _PartitionOffsets | None
) -> _PartitionOffsets:
    """A round's answer for `tp`: the kinds it asked, the others from the round before (a round that lacks
    one is full). The high watermark is never below the last stable offset, even when it is the older of the two."""

    def answer(index: int, kind: str) -> int:
        if kind in found:
            return found[kind][tp]
        assert known is not None, "a round that skips a kind has an older answer for every partition"
        return known[index]

    start, stable, high = (answer(index, kind) for index, kind in enumerate(_KINDS))
    return start, stable, max(stable, high)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, KafkaConnectionError):
        return "no bootstrap server answered"
    return first_line(exc)
