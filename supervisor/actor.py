"""One mirror = one actor: a heartbeat, a flush timer and the ingest loop, over one sink.

The actor decides *what* to read and *when* to flush; the PartitionSource does the reading and the
Sink the durable writing. Its starting position always comes from `sink.open()`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

import anyio

from config.model import FlushConfig, MirrorConfig
from sinks.base import Chunk, Sink
from sinks.records import empty_records, record_bytes
from supervisor.buffer import RangeBuffer
from supervisor.errors import DataLossError, MirrorError
from supervisor.logs import log_event
from supervisor.metrics import MirrorMetrics
from supervisor.partition_source import PartitionSource
from supervisor.read_planner import ReadLimits, ReadPlanner
from supervisor.source import SourceOffsets

log = logging.getLogger("mirror_v3.actor")


@dataclass(frozen=True)
class ActorSettings:
    flush: FlushConfig
    read_limits: ReadLimits
    heartbeat_secs: float

    @staticmethod
    def heartbeat_from_env() -> float:
        raw = os.environ.get("MIRROR_V3_HEARTBEAT_SECS", "30")
        try:
            return max(0.0, float(raw))
        except ValueError:
            return 30.0


class MirrorActor:
    def __init__(
        self,
        mirror: MirrorConfig,
        source: PartitionSource,
        sink: Sink,
        metrics: MirrorMetrics,
        settings: ActorSettings,
        stop_requested: anyio.Event,
    ) -> None:
        self.mirror = mirror
        self._source = source
        self._sink = sink
        self._metrics = metrics
        self._settings = settings
        self._stop = stop_requested
        self._buffer = RangeBuffer()
        self._planner = ReadPlanner(settings.read_limits)
        self._buffer_filled = anyio.Event()  # set when the buffer stops being empty
        self._buffer_taken = anyio.Event()  # set (and replaced) each time the committer takes it
        self._wake_committer = anyio.Event()
        self._pending_trigger: str | None = None
        self._closing = False
        self._next_read = 0
        self._verified = 0
        self._records_since_beat = 0
        self._last_flush_at: float | None = None
        self._source_end = 0
        self.started = anyio.Event()

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await self._start()
            try:
                async with anyio.create_task_group() as tasks:
                    committer_done = anyio.Event()
                    tasks.start_soon(self._committer, committer_done)
                    tasks.start_soon(self._heartbeat)
                    tasks.start_soon(self._flush_timer)
                    tasks.start_soon(self._cancel_reads_on_stop)
                    await self._ingest()
                    # Drain: whatever was read is committed before the actor returns.
                    self._closing = True
                    self._request_flush("shutdown")
                    await committer_done.wait()
                    tasks.cancel_scope.cancel()
            except BaseExceptionGroup as group:
                raise first_error(group) from None
        finally:
            with anyio.CancelScope(shield=True):
                await self._sink.close()
        log_event(log, logging.INFO, "mirror stopped", mirror=self.mirror.name, next_offset=self._verified)

    async def _start(self) -> None:
        """Check the source, find the position in the destination, announce the mirror."""
        await self._source.check()
        destination_next = await self._sink.open()
        offsets = await self._source.offsets()
        self._observe(offsets)
        self._next_read = self._start_position(destination_next, offsets)
        self._verified = destination_next if destination_next is not None else self._next_read
        self._metrics.offset_verified.set(self._verified)
        self._metrics.source_lag.set(self.lag)  # _verified is only known now
        log_event(
            log,
            logging.INFO,
            "mirror starting",
            mirror=self.mirror.name,
            topic=self.mirror.topic,
            partition=self.mirror.partition,
            destination=self._sink.description,
            start_offset=self._next_read,
            destination_next=destination_next if destination_next is not None else "empty",
            source_low_watermark=offsets.log_start,
            source_end=offsets.end,
        )
        self.started.set()

    @property
    def lag(self) -> int:
        """Source end minus the verified (durable) next offset, as last observed."""
        return max(0, self._source_end - self._verified)

    def _start_position(self, destination_next: int | None, offsets: SourceOffsets) -> int:
        topic_partition = f"{self.mirror.topic}-{self.mirror.partition}"
        if destination_next is None:
            # An empty destination begins wherever the source begins.
            return offsets.log_start
        if offsets.high_watermark < destination_next:
            raise MirrorError(
                f"source {topic_partition} ends at offset {offsets.high_watermark} (high watermark), below the "
                f"destination's next offset {destination_next}: was the topic recreated, or is this the wrong cluster?"
            )
        return destination_next

    # -- ingest ----------------------------------------------------------------------------------

    async def _ingest(self) -> None:
        poll = self.mirror.source.poll_interval_ms / 1000
        # (monotonic time it was asked, source end it showed) of the previous offset query.
        previous: tuple[float, int] | None = None
        while not self._stop.is_set():
            asked_at = time.monotonic()
            offsets = await self._source.offsets()
            earlier, previous = previous, (asked_at, offsets.end)
            self._observe(offsets)
            self._handle_data_loss(offsets)
            if offsets.high_watermark < self._next_read:
                raise MirrorError(
                    f"source {self.mirror.topic}-{self.mirror.partition} high watermark {offsets.high_watermark} "
                    f"fell below the next offset {self._next_read}: was the topic recreated?"
                )
            if self._next_read >= offsets.end:
                with anyio.move_on_after(poll):
                    await self._stop.wait()
                continue
            flush = self._settings.flush
            room = max(1, flush.max_offsets - self._buffer.offset_count)
            byte_room = max(1, flush.max_bytes - self._buffer.byte_count)
            start = self._next_read
            plan = self._planner.plan(start, min(offsets.end, start + room), byte_room)
            try:
                records = await self._source.read(start, plan.end, plan.tasks)
            except Exception:
                if self._stop.is_set():
                    break  # the read was cancelled by the drain; what it got is discarded
                raise
            self._planner.observe(plan.end - start, record_bytes(records))
            self._accept(start, plan.end - 1, records.num_rows)
            # flush.max-time counts from when the records could first be seen: if the previous query
            # already ended at `start`, every record read now became readable after it. Measuring from
            # the read instead would add a poll interval and a read to every record's wait.
            waiting_since = earlier[0] if earlier is not None and earlier[1] <= start else asked_at
            self._buffer.add(start, plan.end - 1, records, waiting_since)
            self._buffer_filled.set()
            trigger = self._size_trigger()
            if trigger is not None:
                # Hand the full buffer to the committer and read on while it writes; wait only
                # until it has taken the buffer, so at most one chunk is in flight.
                taken = self._buffer_taken
                self._request_flush(trigger)
                await taken.wait()

    def _accept(self, first: int, last: int, record_count: int) -> None:
        holes = (last - first + 1) - record_count
        if holes:
            self._metrics.gap_records.inc(holes)
        self._next_read = last + 1
        self._records_since_beat += record_count

    def _handle_data_loss(self, offsets: SourceOffsets) -> None:
        if self._next_read >= offsets.log_start:
            return
        lost_first, lost_last = self._next_read, offsets.log_start - 1
        topic_partition = f"{self.mirror.topic}-{self.mirror.partition}"
        if self.mirror.source.on_data_loss == "fail":
            raise DataLossError(
                f"source {topic_partition} log start offset {offsets.log_start} is above the next offset to mirror "
                f"{self._next_read}: offsets {lost_first}..{lost_last} were deleted before they were mirrored "
                "(set source.on-data-loss: skip to continue without them)"
            )
        count = lost_last - lost_first + 1
        log_event(
            log,
            logging.WARNING,
            "source records lost, skipping",
            mirror=self.mirror.name,
            lost_from=lost_first,
            lost_to=lost_last,
            count=count,
            source_low_watermark=offsets.log_start,
        )
        self._metrics.lost_records.inc(count)
        # The lost offsets stay inside the next blob's range so the chain has no hole; the WARN
        # line and the lost-records counter are the record of what is missing.
        self._buffer.add(lost_first, lost_last, empty_records())
        self._buffer_filled.set()
        self._next_read = offsets.log_start

    def _size_trigger(self) -> str | None:
        flush = self._settings.flush
        if self._buffer.offset_count >= flush.max_offsets:
            return "max-offsets"
        # Byte sizes of reads are estimates: filling the last few bytes exactly would take one or two
        # reads of a handful of records, each costing a whole Spark job (~0.2 s). Within 1/8, flush.
        if self._buffer.byte_count >= flush.max_bytes - flush.max_bytes // 8:
            return "max-bytes"
        return None

    # -- flushing --------------------------------------------------------------------------------

    def _request_flush(self, trigger: str) -> None:
        if self._pending_trigger is None:
            self._pending_trigger = trigger
        self._wake_committer.set()

    async def _committer(self, done: anyio.Event) -> None:
        """The only task that writes to the sink: takes the whole buffer, commits it, repeats."""
        while True:
            await self._wake_committer.wait()
            self._wake_committer = anyio.Event()
            trigger, self._pending_trigger = self._pending_trigger or "max-time", None
            if not self._buffer.empty:
                chunk = self._buffer.take()
                self._buffer_filled = anyio.Event()
                taken, self._buffer_taken = self._buffer_taken, anyio.Event()
                taken.set()
                # Shielded: a commit that has taken the buffer finishes even if the actor is being
                # cancelled, so the chain tail is never left half-known.
                with anyio.CancelScope(shield=True):
                    await self._commit(chunk, trigger)
            if self._closing and self._buffer.empty:
                done.set()
                return

    async def _commit(self, chunk: Chunk, trigger: str) -> None:
        began = time.monotonic()
        committed = await self._sink.commit(chunk)
        finished = time.monotonic()
        interval_ms = 0 if self._last_flush_at is None else round((finished - self._last_flush_at) * 1000)
        self._last_flush_at = finished
        self._verified = chunk.last_offset + 1
        self._metrics.offset_verified.set(self._verified)
        self._metrics.records.inc(chunk.records.num_rows)
        self._metrics.bytes.inc(committed.bytes_written)
        self._metrics.flushes.inc()
        self._metrics.last_flush.set(time.time())
        self._metrics.source_lag.set(self.lag)
        log_event(
            log,
            logging.INFO,
            "flushed",
            mirror=self.mirror.name,
            path=committed.location,
            **{"from": chunk.first_offset},
            to=chunk.last_offset,
            count=chunk.records.num_rows,
            bytes=committed.bytes_written,
            elapsed_ms=round((finished - began) * 1000),
            interval_ms=interval_ms,
            trigger=trigger,
        )

    async def _flush_timer(self) -> None:
        max_age = self._settings.flush.max_time_ms / 1000
        while True:
            if self._buffer.empty:
                await self._buffer_filled.wait()
                continue
            remaining = max_age - self._buffer.age()
            if remaining > 0:
                await anyio.sleep(remaining)
                continue
            taken = self._buffer_taken
            self._request_flush("max-time")
            await taken.wait()

    # -- observation -----------------------------------------------------------------------------

    def _observe(self, offsets: SourceOffsets) -> None:
        self._source_end = offsets.end
        self._metrics.source_log_start.set(offsets.log_start)
        self._metrics.source_end.set(offsets.end)
        self._metrics.source_lag.set(self.lag)

    async def _heartbeat(self) -> None:
        interval = self._settings.heartbeat_secs
        if interval <= 0:
            return
        while True:
            await anyio.sleep(interval)
            log_event(
                log,
                logging.DEBUG,
                "heartbeat",
                mirror=self.mirror.name,
                expected_offset=self._next_read,
                verified_offset=self._verified,
                progressed=self._records_since_beat,
                buffered_offsets=self._buffer.offset_count,
            )
            self._records_since_beat = 0

    async def _cancel_reads_on_stop(self) -> None:
        await self._stop.wait()
        self._source.cancel_reads()


def first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The task group wraps a task's failure; callers want the failure itself."""
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            return first_error(exc)
        if not isinstance(exc, anyio.get_cancelled_exc_class()):
            return exc
    return group
