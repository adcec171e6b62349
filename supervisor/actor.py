"""One mirror = one actor: a heartbeat and a flush loop over one source partition and one sink.

Kafka is the buffer. The actor learns its partition's offsets from the cluster's estate poll (which wakes it only
when something it waits for changed), decides when a flush is due and which offsets it covers (`FlushPlanner`),
has Spark tasks read them and write them with the sink's target (`PartitionSource.run`: a small flush shares a
Spark job with other partitions' flushes that fall due at the same time), and commits what its tasks wrote
strictly in offset order. No record is held by the actor between flushes. Its starting position always comes from
`sink.open()`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Generic, TypeVar

import anyio

from config.estate import MirrorSpec
from core.clock import SYSTEM_CLOCK, Clock
from core.errors import DataLossError, MirrorError, SourceBehindDestinationError, task_group_failures_unwrapped
from core.logs import log_event
from sinks.base import Sink
from sinks.tables.positions import CommittedLog
from sinks.write_target import UNCUT, Written
from source.offsets import SourceOffsets
from source.outages import OutageRider, SourceOutageError
from source.range_reader import OffsetsDeletedError, ReadStalledError, SourceRangeError
from supervisor.transaction_hold import TransactionHold
from telemetry.metrics import MirrorMetrics
from workers.flush_planner import Backlog, FlushLimits, FlushPlan, FlushPlanner, PlannedTask, ReadableSince
from workers.partition_source import PartitionSource

# Committed blobs an actor remembers for its archive's table keeper (which forgets what its table holds): more than a
# commit interval's flushes at the usual settings (60 s at 1 s max-time), about 14 KB per mirror when full.
COMMITTED_KEPT = 128
log = logging.getLogger("mirror_v3.actor")
# An answer asked at most this long ago is fresh enough to end a flush that max-time made due.
FRESH_END_S = 0.05
MIN_WAIT_S = 0.001  # the shortest sleep of the flush loop (see _flush_loop)


@dataclass(frozen=True)
class ActorSettings:
    limits: FlushLimits  # the flush settings, in the units the decisions use (`FlushLimits.of`)
    heartbeat_secs: float
    drain_timeout_secs: float = 25.0


W = TypeVar("W", bound=Written)


class MirrorActor(Generic[W]):
    def __init__(
        self,
        mirror: MirrorSpec,
        source: PartitionSource,
        sink: Sink[W],
        metrics: MirrorMetrics,
        settings: ActorSettings,
        stop_requested: anyio.Event,
        on_durable: Callable[[int], None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.mirror = mirror
        # Every log line of this mirror carries them.
        self._ids = {"mirror": mirror.name, "source_cluster": mirror.cluster}
        self._source = source
        self._sink = sink
        self._metrics = metrics
        self.metrics_labels = metrics.labels
        self._settings = settings
        self._stop = stop_requested
        self._on_durable = on_durable  # told the new position after each commit
        self._clock = clock
        self._planner = FlushPlanner(settings.limits)
        self._readable = ReadableSince()
        self._blob_limits = settings.limits.blobs
        self._next = 0  # the destination's next offset: everything below it is committed
        self.committed = CommittedLog(COMMITTED_KEPT)  # the blobs this actor committed, for an archive's table
        self._read_from = 0  # where the next flush starts reading (above _next after skipped losses)
        self._claimed: tuple[int, int] | None = None  # the range the next blob must be (an interrupted commit's)
        self._records_since_beat = 0
        self._last_flush_at: float | None = None
        self._source_end = 0
        self._parallelism = 1
        self._outage_deadline_s = mirror.source.outage_deadline_ms / 1000
        self._outages = OutageRider(
            source.reachability.cluster,
            self._outage_deadline_s,
            metrics.source_retries,
            self._ids,
            clock=clock.monotonic,
            sleep=clock.sleep,
        )
        self._hold = TransactionHold()
        self._hold_warned = False
        # The timestamp of the last record committed while more was already readable: the oldest record
        # still waiting is about that old (records of a partition arrive in about timestamp order).
        self._backlog_timestamp_ms: int | None = None
        self.started = anyio.Event()
        self._wake = anyio.Event()  # set when the poll sees the partition move, and at the stop
        # When the newest offsets the actor knows were asked (a poll's), or answered (its own query's).
        self._answer_asked_at = 0.0
        self._offsets: SourceOffsets | None = None  # those offsets
        # Ages are computed when scraped, so they grow while a long job runs or a flush waits.
        metrics.transaction_held.set_function(lambda: self._hold.seconds(self._clock.wall()))
        metrics.pending_age.set_function(self.pending_age)

    @property
    def _topic_partition(self) -> str:
        return f"{self.mirror.topic}-{self.mirror.partition}"

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self) -> None:
        unwatch = self._source.watch(self._offsets_moved)
        try:
            await self._start()
            with task_group_failures_unwrapped():
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(self._heartbeat)
                    tasks.start_soon(self._wake_on_stop)
                    tasks.start_soon(self._fail_past_the_outage_deadline)
                    with anyio.CancelScope() as work:
                        tasks.start_soon(self._drain_deadline, work)
                        await self._flush_loop()
                    if work.cancelled_caught:
                        self._abandoned()
                    tasks.cancel_scope.cancel()
        finally:
            unwatch()
            with anyio.CancelScope(shield=True):
                await self._sink.close()
        log_event(log, logging.INFO, "mirror stopped", **self._ids, next_offset=self._next)

    async def _start(self) -> None:
        """Check the source, find the position in the destination, announce the mirror."""
        await self._outages.ride_out(self._source.check, "metadata query")
        destination_next = await self._sink.open()
        offsets = await self._outages.ride_out(self._source.offsets, "offset query")
        self._observe(offsets)
        self._next = self._start_position(destination_next, offsets)
        if destination_next is None:
            self._next = await self._start_at(offsets)
        elif self.mirror.start_at != "earliest":
            log_event(log, logging.INFO, "start-at ignored: the destination holds data and decides", **self._ids)
        self._read_from = self._next
        self._claimed = self._sink.claimed_range()
        if self._claimed is not None:
            self._continue_claim(offsets)
        self._metrics.offset_verified.set(self._next)
        self._metrics.source_lag.set(self.lag)
        # A restarted mirror's series (and share of its topic's sums) live on from its failed predecessor:
        # nothing of that one is in flight.
        for gauge in (self._metrics.reading, self._metrics.staged_records, self._metrics.staged_bytes):
            gauge.set(0)
        log_event(
            log,
            logging.INFO,
            "mirror starting",
            **self._ids,
            topic=self.mirror.topic,
            partition=self.mirror.partition,
            destination=self._sink.description,
            start_offset=self._next,
            destination_next=destination_next if destination_next is not None else "empty",
            source_low_watermark=offsets.log_start,
            source_end=offsets.end,
        )
        self.started.set()

    def _continue_claim(self, offsets: SourceOffsets) -> None:
        assert self._claimed is not None
        first, last = self._claimed
        if offsets.end <= last:
            # The claim's last offset must exist in the source: its end must be past it.
            raise SourceBehindDestinationError(
                self.mirror.topic, self.mirror.partition, "end", offsets.end, last + 1, claimed=(first, last)
            )
        log_event(
            log,
            logging.INFO,
            "continuing an interrupted commit: the next blob is the one it claimed",
            **self._ids,
            **{"from": first},
            to=last,
        )

    @property
    def position(self) -> int:
        """The next source offset of the destination: everything below it is durable there (once started)."""
        return self._next

    @property
    def lag(self) -> int:
        """Source end minus the committed (durable) next offset, as last observed."""
        return max(0, self._source_end - self._next)

    @property
    def held_since(self) -> float | None:
        """Unix time since which an open source transaction holds the mirror at the last stable offset."""
        return self._hold.since

    def pending_age(self) -> float:
        """Seconds the oldest record not yet durable has existed (0 when caught up).

        In a backlog it is the age of the last record committed (the next one is about as old); otherwise
        the time since its offset first showed as readable (its producer wrote it at most a poll earlier).
        """
        if self._source_end <= self._next:
            return 0.0
        now = self._clock.wall()
        if self._backlog_timestamp_ms is not None:
            return max(0.0, now - self._backlog_timestamp_ms / 1000)
        since = self._readable.since(self._next)
        return 0.0 if since is None else max(0.0, self._clock.monotonic() - since)

    def _start_position(self, destination_next: int | None, offsets: SourceOffsets) -> int:
        if destination_next is None:
            # An empty destination begins wherever the source begins.
            return offsets.log_start
        if offsets.high_watermark < destination_next:
            raise SourceBehindDestinationError(
                self.mirror.topic, self.mirror.partition, "high watermark", offsets.high_watermark, destination_next
            )
        return destination_next

    async def _start_at(self, offsets: SourceOffsets) -> int:
        """Where a mirror with an empty destination begins (`start-at`)."""
        start_at = self.mirror.start_at
        if start_at == "earliest":
            return offsets.log_start
        if start_at == "latest":
            return offsets.end
        found = await self._source.offset_for_time(start_at)
        # No record at or after the time yet: everything from here on is newer.
        return offsets.end if found is None else min(max(found, offsets.log_start), offsets.end)

    # -- the flush loop --------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        # Plans spread backlogs over every core: wait for the data plane to say how many there are (a
        # stop meanwhile goes straight to the drain, which needs Spark only if something is to be written).
        async with anyio.create_task_group() as waiting:

            async def stop_waiting() -> None:
                await self._stop.wait()
                waiting.cancel_scope.cancel()

            waiting.start_soon(stop_waiting)
            self._parallelism = await self._source.parallelism()
            waiting.cancel_scope.cancel()
        if self._sink.target().ordered:
            # One task writes an ordered target's range (a Kafka partition's records keep their order): jobs
            # are sized for one core.
            self._parallelism = 1
        while not self._stop.is_set():
            self._wake = anyio.Event()  # before the offsets are read: a move after the read still wakes the wait
            offsets = await self._polled_offsets()
            plan = self._plan(offsets.end, draining=False)
            if plan is not None and plan.trigger == "max-time" and self._answer_age() > FRESH_END_S:
                # Due by the clock: everything readable now goes in. A poll's end is up to an interval old, and a
                # flush that stops there leaves records whose wait has run since that poll: the next flush would be
                # due early, and flushes would come about a third more often than max-time. Mirrors due at one
                # moment (a poll's time plus max-time) share the request.
                offsets = await self._query_offsets()
                plan = self._plan(offsets.end, draining=False)
            if plan is not None:
                await self._flush(plan)
                continue
            # Nothing due: sleep until the poll sees the partition move, a flush falls due, or an open
            # transaction's hold reaches its alert (an idle partition is not woken at all).
            backlog = self._backlog(offsets.end, draining=False)
            due_at = self._planner.due_at(backlog)
            # Woken by the poll when a record comes (nothing waits) or a full blob is readable (a flush is due at
            # a known time already): a busy partition is not woken at every poll to learn its end moved.
            self._source.wake_at(offsets.end + 1 if due_at is None else self._planner.size_due_end(backlog))
            wait = math.inf if due_at is None else due_at - self._clock.monotonic()
            # At least MIN_WAIT_S: a deadline that is a difference of floats can sit a hair before the planner's own
            # check, and a wait of nothing would then spin (without time passing, on a fake clock) instead of sleep.
            await self._clock.wait_for(self._wake, max(MIN_WAIT_S, min(wait, self._hold_alert_in())))
        await self._drain()

    def _offsets_moved(self) -> None:
        self._wake.set()

    async def _wake_on_stop(self) -> None:
        await self._stop.wait()
        self._wake.set()

    async def _drain(self) -> None:
        """Write what was readable when the stop came; then return."""
        drain_end = (await self._query_offsets()).end
        while (plan := self._plan(drain_end, draining=True)) is not None:
            await self._flush(plan)

    def _plan(self, end: int, draining: bool) -> FlushPlan | None:
        if self._claimed is None:
            return self._planner.plan(self._backlog(end, draining))
        # The blob an interrupted writer claimed comes first, exactly as claimed, whatever the flush policy:
        # any other end would be refused by the claim.
        first, last = self._claimed
        task = PlannedTask(first, max(first, min(self._read_from, last + 1)), last + 1)
        return FlushPlan((task,), "claimed")

    async def _fail_past_the_outage_deadline(self) -> None:
        """Fail the mirror once its source cluster has been down for `source.outage-deadline-ms`, counted from the
        cluster's first unanswered request, whatever this mirror is doing (a Spark read in flight waits on the
        broker, and its own retries would count from later). Wakes only when the cluster goes down or up."""
        reachability = self._source.reachability
        while True:
            outage, change = reachability.outage, reachability.change
            if outage is None:
                await change.wait()
                continue
            left_s = outage.since + self._outage_deadline_s - self._clock.monotonic()
            if left_s <= 0 or not await self._clock.wait_for(change, left_s):  # no transition before the deadline
                raise SourceOutageError.of(outage, self._outage_deadline_s, self._clock.monotonic())

    async def _drain_deadline(self, work: anyio.CancelScope) -> None:
        """From the stop on, the job in flight and the drain get `drain_timeout_secs` in all."""
        await self._stop.wait()
        await self._clock.sleep(self._settings.drain_timeout_secs)
        work.cancel()

    def cancel_jobs(self) -> None:
        """Interrupt the Spark job in flight, if any (the mirror is being stopped; never waits)."""
        self._source.cancel()

    def _abandoned(self) -> None:
        self._source.cancel()
        log_event(
            log,
            logging.WARNING,
            "drain timed out, work in flight abandoned",
            **self._ids,
            next_offset=self._next,
            timeout_s=self._settings.drain_timeout_secs,
            note="staged leftovers are removed on the next start",
        )

    async def _query_offsets(self) -> SourceOffsets:
        """Asked now: the drain's end (what is readable when the stop came), and the end of a flush max-time made
        due."""
        asked_at = self._clock.monotonic()
        offsets = await self._outages.ride_out(self._source.offsets, "offset query")
        self._readable.observe(asked_at, offsets.end)
        # When it was answered, not asked: a shared request leaves a moment after the query, so only a poll asked
        # after this answer came is sure to have seen at least as much.
        self._answer_asked_at = self._clock.monotonic()
        return self._checked(offsets)

    def _answer_age(self) -> float:
        return self._clock.monotonic() - self._answer_asked_at

    async def _polled_offsets(self) -> SourceOffsets:
        """The estate poll's newest answer, its sightings since the last look added to the readable history."""
        polled = await self._outages.ride_out(self._source.polled, "offset query")
        for first_asked, last_asked, end in polled.seen:
            self._readable.observe(first_asked, end)
            self._readable.observe(last_asked, end)
        mine = self._offsets
        if polled.asked_at < self._answer_asked_at and mine is not None:
            # Asked before the answer to this actor's own query (which ended a flush) came: it may show less than
            # the actor has written already (even a high watermark below its position), but also more (its request
            # reached the broker after the actor's own). Every one of these offsets only grows, so each answer is
            # a lower bound and the larger of the two is the best: taking the actor's own alone lost a record
            # that arrived in between for good, since the poll wakes the actor only when its answer changes.
            seen = polled.offsets
            newest = SourceOffsets(
                log_start=max(mine.log_start, seen.log_start),
                end=max(mine.end, seen.end),
                high_watermark=max(mine.high_watermark, seen.high_watermark),
            )
            return mine if newest == mine else self._checked(newest)
        self._answer_asked_at = polled.asked_at
        return self._checked(polled.offsets)

    def _checked(self, offsets: SourceOffsets) -> SourceOffsets:
        self._offsets = offsets
        self._observe(offsets)
        if offsets.high_watermark < self._next:
            raise SourceBehindDestinationError(
                self.mirror.topic, self.mirror.partition, "high watermark", offsets.high_watermark, self._next
            )
        self._handle_data_loss(offsets)
        return offsets

    def _backlog(self, end: int, draining: bool) -> Backlog:
        return Backlog(
            first=self._next,
            read_from=max(self._read_from, self._next),
            end=end,
            waiting_since=self._readable.since(self._next),
            readable_at=self._readable.points(),
            now=self._clock.monotonic(),
            draining=draining,
            parallelism=self._parallelism,
        )

    async def _flush(self, plan: FlushPlan) -> None:
        """One Spark job over the plan's tasks, then its staged writes committed in offset order."""
        began = self._clock.monotonic()
        self._metrics.reading.set(plan.end - plan.first)
        try:
            items = await self._outages.ride_out(partial(self._read, plan), "read")
        except OffsetsDeletedError as exc:
            # Deleted while the job read: the next offset query sees the new log start and applies
            # source.on-data-loss (fail, or skip them) before anything is committed past them.
            self._handle_data_loss(await self._outages.ride_out(self._source.offsets, "offset query"))
            if self._read_from > self._next:
                return
            # The offset query has not seen the deletion yet: a restart asks again.
            raise MirrorError(f"{self._topic_partition}: {exc}") from None
        staged_at = self._clock.monotonic()
        self._metrics.read_seconds.observe(staged_at - began)
        self._metrics.reading.set(0)
        self._metrics.staged_records.set(sum(item.records for item in items))
        self._metrics.staged_bytes.set(sum(item.record_bytes for item in items))
        retried = sum(item.retries for item in items)
        if retried:
            self._metrics.staging_retries.inc(retried)
            log_event(
                log,
                logging.WARNING,
                "destination writes retried by the tasks",
                **self._ids,
                retries=retried,
                **{"from": plan.first},
                to=plan.end - 1,
            )
        for index, item in enumerate(items):
            try:
                trigger = item.cut or plan.trigger
                await self._commit(item, trigger, began, staged_at)
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    for rest in items[index + 1 :]:
                        await self._sink.discard(rest)
                raise
            began = staged_at = self._clock.monotonic()
        if plan.trigger == "claimed":
            self._claimed = None
        self._readable.forget_below(self._next)
        self._metrics.offset_verified.set(self._next)
        self._metrics.source_lag.set(self.lag)

    async def _read(self, plan: FlushPlan) -> list[W]:
        """One attempt at the plan's Spark work (the OutageRider asks again while the source is unavailable: a read
        that stalled is tried again, through its cluster's probe, `workers.flush_scheduler`)."""
        target = self._sink.target()
        # A claimed blob is written whole: the writer that claimed it cut it already.
        limits = self._blob_limits if plan.trigger != "claimed" else UNCUT
        try:
            return await self._source.run(plan.tasks, limits, target, self._planner.bytes_per_offset)
        except ReadStalledError as exc:
            if exc.brokers_down:
                # An unanswered request like any other: the cluster is down from now (its WARN, gauge and /readyz, and
                # the outage deadline counted from here), not from the estate poll's next failure.
                self._source.reachability.failed(exc)
            if exc.streamed and not target.abandons_cleanly:
                # Records below the stall may be in the destination already: only it can say where to go on, which
                # a restart asks. (Such a read waits out the outage deadline before it stalls.)
                raise SourceRangeError(exc.source, exc.offset, exc.problem) from None
            raise

    async def _commit(self, item: W, trigger: str, began: float, staged_at: float) -> None:
        first, last, records, payload = item.first, item.last, item.records, item.record_bytes
        committed = await self._sink.commit(item)
        finished = self._clock.monotonic()
        interval_ms = 0 if self._last_flush_at is None else round((finished - self._last_flush_at) * 1000)
        self._last_flush_at = finished
        self._planner.observe(last - first + 1, payload, records)
        self.committed.add(first, last, item.statistics)
        self._next = last + 1
        self._read_from = max(self._read_from, self._next)
        self._records_since_beat += records
        skipped = item.skipped
        holes = (last - first + 1) - records - skipped
        if holes:
            self._metrics.gap_records.inc(holes)
        if skipped:
            self._metrics.loop_skipped.inc(skipped)
        if item.unframed:
            self._metrics.schema_unframed.inc(item.unframed)
        self._metrics.offset_verified.set(self._next)
        self._metrics.records.inc(records)
        self._metrics.bytes.inc(committed.bytes_written)
        self._metrics.flushes.inc()
        committed_at = self._clock.wall()
        self._metrics.last_flush.set(committed_at)
        self._metrics.source_lag.set(self.lag)
        if self._on_durable is not None:
            self._on_durable(self._next)
        self._metrics.staged_records.dec(records)
        self._metrics.staged_bytes.dec(payload)
        self._metrics.flush_seconds.observe(finished - began)
        if item.times is not None:
            self._metrics.observe_latency(item.times, round(committed_at * 1000))
            if item.times.last_timestamp_ms is not None:
                backlog = self._source_end > self._next
                self._backlog_timestamp_ms = item.times.last_timestamp_ms if backlog else None
        log_event(
            log,
            logging.INFO,
            "flushed",
            **self._ids,
            path=committed.location,
            **{"from": first},
            to=last,
            count=records,
            bytes=committed.bytes_written,
            elapsed_ms=round((finished - began) * 1000),
            commit_ms=round((finished - staged_at) * 1000),
            interval_ms=interval_ms,
            trigger=trigger,
        )

    def _handle_data_loss(self, offsets: SourceOffsets) -> None:
        read_from = max(self._read_from, self._next)
        if read_from >= offsets.log_start:
            return
        lost_first, lost_last = read_from, offsets.log_start - 1
        if self.mirror.source.on_data_loss == "fail":
            raise DataLossError(self.mirror.topic, self.mirror.partition, offsets.log_start, read_from)
        count = lost_last - lost_first + 1
        log_event(
            log,
            logging.WARNING,
            "source records lost, skipping",
            **self._ids,
            lost_from=lost_first,
            lost_to=lost_last,
            count=count,
            source_low_watermark=offsets.log_start,
        )
        self._metrics.lost_records.inc(count)
        # The lost offsets stay inside the next blob's range so the chain has no gap; the WARN line and
        # the lost-records counter are the record of what is missing.
        self._read_from = offsets.log_start

    # -- observation -----------------------------------------------------------------------------

    def _observe(self, offsets: SourceOffsets) -> None:
        self._source_end = offsets.end
        self._metrics.source_log_start.set(offsets.log_start)
        self._metrics.source_lag.set(self.lag)
        self._metrics.high_watermark_lag.set(max(0, offsets.high_watermark - self._next))
        if self._source_end <= self._next:
            self._backlog_timestamp_ms = None
        self._hold.observe(offsets.end, offsets.high_watermark, self._next, self._clock.wall())
        self._warn_of_hold(offsets)

    def _hold_alert_in(self) -> float:
        """Seconds until an open transaction's hold reaches its alert (infinite when none is due)."""
        if self._hold.since is None or self._hold_warned:
            return math.inf
        alert_s = self.mirror.source.transaction_hold_alert_ms / 1000
        return max(0.0, alert_s - self._hold.seconds(self._clock.wall()))

    def _warn_of_hold(self, offsets: SourceOffsets) -> None:
        held_s = self._hold.seconds(self._clock.wall())
        if held_s * 1000 < self.mirror.source.transaction_hold_alert_ms:
            self._hold_warned = False
            return
        if not self._hold_warned:
            self._hold_warned = True
            log_event(
                log,
                logging.WARNING,
                "held by an open transaction at the source",
                **self._ids,
                last_stable_offset=offsets.end,
                high_watermark=offsets.high_watermark,
                held_s=round(held_s),
                note="records up to the high watermark wait until its producer commits or aborts",
            )

    async def _heartbeat(self) -> None:
        interval = self._settings.heartbeat_secs
        if interval <= 0:
            return
        while True:
            await self._clock.sleep(interval)
            log_event(
                log,
                logging.DEBUG,
                "heartbeat",
                **self._ids,
                verified_offset=self._next,
                source_end=self._source_end,
                progressed=self._records_since_beat,
            )
            self._records_since_beat = 0
