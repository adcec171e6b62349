"""The actor's invariants against an in-memory source and store: exactly once, across restarts."""

from __future__ import annotations

import dataclasses
import io
import logging
from typing import Any

import anyio
import msgspec
import pyarrow.parquet as pq
import pytest

from config.estate import MirrorSpec
from config.model import FlushConfig, SourceConfig
from core.clock import SYSTEM_CLOCK
from core.errors import DataLossError, SourceBehindDestinationError, SourceUnavailableError
from sinks.blob.chain import blob_name, parse_blob_name
from sinks.blob.sink import BlobSink
from sinks.blob.staging import StagedBlob
from source.offsets import PolledOffsets, SourceOffsets
from source.outages import SourceOutageError
from source.range_reader import ReadStalledError
from supervisor.actor import ActorSettings, MirrorActor
from telemetry.metrics import MetricFamilies
from tests.fakes import FakeClock, FakePartitionSource, InMemoryStore, MemoryStaging, fresh_metrics, sample
from workers.flush_planner import START_PROBE_OFFSETS, FlushLimits

MIRROR = MirrorSpec(
    name="m",
    entry=0,
    cluster="fake:9092",
    source=SourceConfig(bootstrap_servers="fake:9092", poll_interval_ms=10),
    source_field="mirrors[0].source",
    topic="t",
    partition=0,
    destination_name="t",
    flush=FlushConfig(),
)


def make_actor(
    source: FakePartitionSource,
    store: InMemoryStore,
    *,
    flush: FlushConfig | None = None,
    max_per_job: int = 1000,
    mirror: MirrorSpec = MIRROR,
    drain_timeout: float = 25.0,
    clock: FakeClock | None = None,
) -> tuple[MirrorActor[StagedBlob], anyio.Event, MetricFamilies]:
    families, metrics = fresh_metrics()
    stop = anyio.Event()
    flush = flush or FlushConfig(max_time_ms=50, max_bytes=10**9, max_offsets=10**9)
    actor = MirrorActor(
        mirror=mirror,
        source=source,
        sink=BlobSink(store, "mem", MemoryStaging(store)),
        metrics=metrics,
        settings=ActorSettings(
            limits=FlushLimits(
                max_offsets=flush.max_offsets,
                max_bytes=flush.max_bytes,
                max_time_s=flush.max_time_ms / 1000,
                task_offsets=max_per_job // 2,
                task_bytes=32 * 1024 * 1024,
                job_offsets=max_per_job,
                job_bytes=64 * 1024 * 1024,
                daily=flush.daily,
            ),
            heartbeat_secs=0,
            drain_timeout_secs=drain_timeout,
        ),
        stop_requested=stop,
        clock=clock or SYSTEM_CLOCK,
    )
    if clock is not None:
        source.clock = clock
    return actor, stop, families


async def run_until(actor: MirrorActor[StagedBlob], stop: anyio.Event, store: InMemoryStore, next_offset: int) -> None:
    """Run the actor until the destination holds everything below next_offset, then drain it."""
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        with anyio.fail_after(10):
            while destination_next(store) != next_offset:
                await anyio.sleep(0.01)
        stop.set()


def destination_next(store: InMemoryStore) -> int | None:
    ranges = [r for name in store.blobs if (r := parse_blob_name(name)) is not None]
    return max(r.last for r in ranges) + 1 if ranges else None


def read_back(store: InMemoryStore) -> list[tuple[int, bytes | None, bytes | None]]:
    rows: list[tuple[int, bytes | None, bytes | None]] = []
    previous_last = None
    for name in sorted(store.blobs):
        blob = parse_blob_name(name)
        assert blob is not None, f"leftover {name}"
        if previous_last is not None:
            assert blob.first == previous_last + 1, "chain broken"
        previous_last = blob.last
        table = pq.read_table(io.BytesIO(store.blobs[name]))
        for offset, key, value in zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        ):
            assert blob.first <= offset <= blob.last
            rows.append((offset, key, value))
    return rows


def expected_rows(source: FakePartitionSource) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(o, r.key, r.value) for o, r in sorted(source.records.items())]


async def test_mirrors_every_record_once_with_holes() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(2500, holes_every=7)
    actor, stop, families = make_actor(source, store)
    await run_until(actor, stop, store, 2500)
    assert read_back(store) == expected_rows(source)
    holes = 2500 - len(source.records)
    assert sample(families, "mirror_v3_source_offset_gap_records_total") == holes
    assert sample(families, "mirror_v3_destination_offset_verified") == 2500
    assert sample(families, "mirror_v3_destination_records_total") == len(source.records)


async def test_restart_continues_from_destination() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(1000)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 1000)
    source.append(700)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 1700)
    assert read_back(store) == expected_rows(source)
    second_run = [task for job in source.jobs for task in job if task[2] > 1000]
    assert second_run[0][0] == 1000 and second_run[-1][2] == 1700


async def test_empty_destination_starts_at_log_start() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(500)
    source.delete_before(200)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 500)
    assert min(parse_blob_name(n).first for n in store.blobs) == 200  # type: ignore[union-attr]
    assert read_back(store) == expected_rows(source)


async def test_data_loss_fails_naming_both_offsets() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 100)
    source.append(100)
    source.delete_before(150)
    actor, stop, _ = make_actor(source, store)
    with pytest.raises(DataLossError) as lost:
        await actor.run()
    assert (lost.value.topic, lost.value.partition, lost.value.lost_first, lost.value.lost_last) == ("t", 0, 100, 149)
    assert destination_next(store) == 100


async def test_data_loss_skip_continues_and_counts() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 100)
    source.append(100)
    source.delete_before(150)
    skip = dataclasses.replace(MIRROR, source=msgspec.structs.replace(MIRROR.source, on_data_loss="skip"))
    actor, stop, families = make_actor(source, store, mirror=skip)
    await run_until(actor, stop, store, 200)
    assert sample(families, "mirror_v3_source_lost_records_total") == 50
    rows = read_back(store)
    assert [r[0] for r in rows] == list(range(100)) + list(range(150, 200))


async def test_source_end_below_destination_fails() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 100)
    recreated = FakePartitionSource()
    recreated.append(40)
    actor, stop, _ = make_actor(recreated, store)
    with pytest.raises(SourceBehindDestinationError) as behind:
        await actor.run()
    assert behind.value.facts == {
        "topic": "t",
        "partition": 0,
        "measure": "high watermark",
        "source_end": 40,
        "destination_next": 100,
        "claimed": None,
    }


@pytest.mark.parametrize(
    ("flush", "trigger"),
    [
        (FlushConfig(max_time_ms=60_000, max_bytes=10**9, max_offsets=300), "max-offsets"),
        (FlushConfig(max_time_ms=60_000, max_bytes=2_000, max_offsets=10**9), "max-bytes"),
        (FlushConfig(max_time_ms=30, max_bytes=10**9, max_offsets=10**9), "max-time"),
    ],
)
async def test_each_flush_trigger_fires(flush: FlushConfig, trigger: str, caplog: pytest.LogCaptureFixture) -> None:
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(1000)
    actor, stop, _ = make_actor(source, store, flush=flush, max_per_job=600, clock=clock)
    caplog.set_level(logging.INFO, logger="mirror_v3.actor")

    def triggers() -> list[str | None]:
        return [
            getattr(r, "mirror_v3_fields", {}).get("trigger") for r in caplog.records if r.getMessage() == "flushed"
        ]

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await clock.run_until(lambda: bool(store.blobs))
        assert triggers()[0] == "start"  # the first flush learns the record size
        source.append(1000)
        await clock.run_until(lambda: trigger in triggers())
        stop.set()
    if trigger == "max-offsets":
        assert all(parse_blob_name(n).last - parse_blob_name(n).first + 1 <= 300 for n in store.blobs)  # type: ignore[union-attr]
    assert read_back(store) == expected_rows(source)


async def test_records_wait_in_the_source_until_the_drain_writes_them() -> None:
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(321)
    actor, stop, _ = make_actor(source, store, flush=FlushConfig(max_time_ms=3_600_000), clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        # The start flush learns the record size.
        await clock.run_until(lambda: destination_next(store) == START_PROBE_OFFSETS)
        source.append(100)
        appended = clock.now
        await clock.run_for(3_590, step_s=10.0)
        assert len(source.jobs) == 1  # nothing due before the hour is up
        await clock.run_until(lambda: len(source.jobs) == 2, step_s=0.5)
        assert clock.now - appended <= 3_600 + 1  # then due: the hour, from when the records became readable
        stop.set()
    assert read_back(store) == expected_rows(source)


async def test_a_drain_that_runs_out_of_time_abandons_the_job_and_exits() -> None:
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(100)
    source.job_delay = 5.0
    actor, stop, _ = make_actor(source, store, flush=FlushConfig(max_time_ms=3_600_000), drain_timeout=0.2, clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await actor.started.wait()
        stop.set()
        stopped_at = clock.now
        await clock.run_until(lambda: source.cancelled)
        assert clock.now - stopped_at == pytest.approx(0.2, abs=0.006)  # the drain's time, not the job's 5 s
    assert not store.blobs  # never half-committed


async def test_hole_only_range_still_advances_the_chain() -> None:
    """An aborted transaction at the tail: its offsets are covered so the lag reaches zero."""
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(10)
    source.end += 5  # five offsets with no visible record (aborted records + marker)
    actor, stop, families = make_actor(source, store)
    await run_until(actor, stop, store, 15)
    assert sample(families, "mirror_v3_source_lag_offsets") == 0
    assert read_back(store) == expected_rows(source)


async def test_max_time_counts_from_when_records_became_readable() -> None:
    """The flush starts max-time after the records became readable (as far as the offset queries tell),
    not max-time after the mirror first saw them."""
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(10)
    source.job_delay = 0.2
    poll = MIRROR.source.poll_interval_ms / 1000
    actor, stop, _ = make_actor(source, store, flush=FlushConfig(max_time_ms=300), clock=clock)
    started: list[float] = []
    run = source.run

    async def timed_run(*args: Any) -> Any:
        started.append(clock.now)
        return await run(*args)

    source.run = timed_run  # type: ignore[method-assign,assignment]
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await clock.run_until(lambda: destination_next(store) == 10)  # the start flush
        await clock.run_for(0.05)  # idle: the actor has seen the end
        appended = clock.now
        source.append(10)
        await clock.run_until(lambda: destination_next(store) == 20)
        stop.set()
    # Readable from the first offset query after the append (within a poll), due 300 ms later; the 200 ms
    # the previous job took do not count.
    assert 0.3 <= started[1] - appended <= 0.3 + poll + 0.005, started[1] - appended
    assert read_back(store) == expected_rows(source)


async def test_a_backlog_is_spread_over_every_core_and_committed_in_order() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(START_PROBE_OFFSETS + 4000)
    flush = FlushConfig(max_time_ms=60_000, max_bytes=10**9, max_offsets=500)
    actor, stop, _ = make_actor(source, store, flush=flush, max_per_job=1000)
    await run_until(actor, stop, store, START_PROBE_OFFSETS + 4000)
    probe, *backlog = source.jobs
    assert [(first, end) for first, _, end in probe] == [(0, START_PROBE_OFFSETS)]
    assert all(len(job) == 2 for job in backlog), source.jobs
    assert [end - first for job in backlog for first, _, end in job] == [500] * 8
    assert read_back(store) == expected_rows(source)


async def test_start_at_latest_archives_only_what_comes_after_the_start() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    actor, stop, _ = make_actor(source, store, mirror=dataclasses.replace(MIRROR, start_at="latest"))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        with anyio.fail_after(10):
            await actor.started.wait()
            source.append(50)
            while destination_next(store) != 150:
                await anyio.sleep(0.01)
        stop.set()
    assert [row[0] for row in read_back(store)] == list(range(100, 150))


async def test_start_at_a_time_begins_at_the_first_record_at_or_after_it() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    for offset, record in source.records.items():
        source.records[offset] = dataclasses.replace(record, timestamp_ms=1_000 + offset)
    actor, stop, _ = make_actor(source, store, mirror=dataclasses.replace(MIRROR, start_at=1_050))
    await run_until(actor, stop, store, 100)
    assert [row[0] for row in read_back(store)] == list(range(50, 100))


async def test_start_at_is_ignored_once_the_destination_holds_data(caplog: pytest.LogCaptureFixture) -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 100)
    source.append(20)
    actor, stop, _ = make_actor(source, store, mirror=dataclasses.replace(MIRROR, start_at="latest"))
    with caplog.at_level(logging.INFO):
        await run_until(actor, stop, store, 120)
    assert read_back(store) == expected_rows(source)
    assert "start-at ignored" in caplog.text


async def test_a_claimed_blob_is_written_first_exactly_as_claimed(caplog: pytest.LogCaptureFixture) -> None:
    """A writer died between claiming 100-349 and publishing it (S3's two-step commit): the next one writes
    exactly that blob, whatever its own flush limits, then goes on with its own."""
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(100)
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 100)
    source.append(900)
    store.claims[max(store.blobs)] = blob_name(100, 349)
    flush = FlushConfig(max_time_ms=50, max_bytes=10**9, max_offsets=100)
    actor, stop, _ = make_actor(source, store, flush=flush)
    caplog.set_level(logging.INFO, logger="mirror_v3.actor")
    await run_until(actor, stop, store, 1000)
    written = sorted((b.first, b.last) for n in store.blobs if (b := parse_blob_name(n)) is not None)
    assert written[1] == (100, 349) and all(last - first < 100 for first, last in written[2:])
    flushed = [getattr(r, "mirror_v3_fields", {}) for r in caplog.records if r.getMessage() == "flushed"]
    assert flushed[0]["trigger"] == "claimed" and flushed[0]["from"] == 100
    assert read_back(store) == expected_rows(source)


async def test_a_claimed_first_blob_sets_where_an_empty_chain_starts() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(500)
    store.claims[None] = blob_name(40, 99)  # e.g. a writer with start-at: a time, interrupted
    actor, stop, _ = make_actor(source, store)
    await run_until(actor, stop, store, 500)
    assert min(store.blobs) == blob_name(40, 99)
    assert read_back(store) == expected_rows(source)[40:]


async def test_a_claim_beyond_the_source_end_fails_at_start() -> None:
    source, store = FakePartitionSource(), InMemoryStore()
    source.append(50)
    store.claims[None] = blob_name(0, 99)
    actor, _, _ = make_actor(source, store)
    with pytest.raises(SourceBehindDestinationError) as behind:
        await actor.run()
    assert (behind.value.claimed, behind.value.source_end) == ((0, 99), 50)


async def test_a_flush_due_by_max_time_ends_at_what_is_readable_now_and_an_older_poll_answer_is_not_used() -> None:
    """The estate poll's answer can be most of an interval old when max-time makes a flush due: the actor asks
    for the end itself. Answers of polls asked before that are older than what it then wrote (their high watermark
    may be below its new position) and must not be taken for a shrunken partition."""
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(10)

    stale: list[PolledOffsets] = []
    polled = source.polled

    async def lagging() -> PolledOffsets:
        fresh = await polled()
        if not stale:
            return fresh
        old = stale[-1]
        return PolledOffsets(old.offsets, fresh.seen, old.asked_at)

    source.polled = lagging  # type: ignore[method-assign]
    actor, stop, _ = make_actor(source, store, flush=FlushConfig(max_time_ms=300), clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await clock.run_until(lambda: destination_next(store) == 10)  # the start flush
        stale.append(PolledOffsets(SourceOffsets(0, 15, 15), (), clock.now))
        source.append(5)
        await clock.run_for(0.1)
        source.append(20)  # readable now, but the poll still says 15
        await clock.run_until(lambda: destination_next(store) == 35)
        await clock.run_for(1.0)  # later loops see only the old poll answer: the mirror goes on
        stop.set()
    assert read_back(store) == expected_rows(source)


async def test_a_poll_answer_asked_before_the_actors_own_query_that_shows_more_is_not_lost() -> None:
    """A poll round's request can reach the broker after the actor's own query although the round began before it:
    its answer is then older by its time but newer by its content. The poll wakes the actor only when its answer
    changes, so a record seen only in that answer would wait forever were the answer dropped (seen in the estate
    bench: one partition one record short, idle)."""
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(10)
    polled, offsets = source.polled, source.offsets
    answers: list[PolledOffsets] = []  # the poll's answer, once it shows 15
    capped: list[int] = []  # the actor's next own query is answered with this end (its request came first)

    polling: list[bool] = []

    async def polled_once() -> PolledOffsets:
        polling.append(True)  # the fake's poll asks its offsets too: not the actor's own query
        try:
            fresh = await polled()
        finally:
            polling.pop()
        return PolledOffsets(answers[0].offsets, fresh.seen, answers[0].asked_at) if answers else fresh

    async def own_query() -> SourceOffsets:
        found = await offsets()
        if not capped or polling:
            return found
        return dataclasses.replace(found, end=capped.pop(), high_watermark=12)

    source.polled, source.offsets = polled_once, own_query  # type: ignore[method-assign]
    actor, stop, _ = make_actor(source, store, flush=FlushConfig(max_time_ms=300), clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await clock.run_until(lambda: destination_next(store) == 10)  # the start flush
        await clock.run_for(0.1)
        answers.append(PolledOffsets(SourceOffsets(0, 15, 15), (), clock.now))
        capped.append(12)
        source.append(5)  # the poll (asked now) shows 15; the own query at max-time will say 12
        await clock.run_until(lambda: destination_next(store) == 15, limit_s=5.0)
        stop.set()
    assert read_back(store) == expected_rows(source)


async def test_an_outage_fails_the_mirror_at_the_deadline_counted_from_the_clusters_first_failure() -> None:
    """Even with a Spark read in flight (which waits on the broker): the deadline counts from the first request the
    cluster did not answer, not from the mirror's own first failure."""
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(100)
    source.job_delay = 3600.0  # a read that hangs on the down broker
    mirror = dataclasses.replace(MIRROR, source=msgspec.structs.replace(MIRROR.source, outage_deadline_ms=10_000))
    actor, _, _ = make_actor(source, store, flush=FlushConfig(max_time_ms=50), mirror=mirror, clock=clock)
    failures: list[BaseException] = []

    async def run() -> None:
        try:
            await actor.run()
        except SourceOutageError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run)
        await actor.started.wait()
        await clock.run_until(lambda: bool(source.jobs))
        clock.advance(1.0)
        source.reachability.failed(SourceUnavailableError("offset query failed: refused"))
        down_at = clock.now
        await clock.run_until(lambda: bool(failures), step_s=0.01)
    (failure,) = failures
    assert isinstance(failure, SourceOutageError) and failure.cluster == "fake:9092"
    assert clock.now - down_at == pytest.approx(10.0, abs=0.05) and failure.down_s == pytest.approx(10.0, abs=0.05)
    assert not store.blobs


async def test_an_outage_shorter_than_the_deadline_is_ridden_out() -> None:
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(100)
    mirror = dataclasses.replace(MIRROR, source=msgspec.structs.replace(MIRROR.source, outage_deadline_ms=10_000))
    actor, stop, _ = make_actor(source, store, mirror=mirror, clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await actor.started.wait()
        source.reachability.failed(SourceUnavailableError("refused"))
        await clock.run_until(lambda: clock.now >= 9.0, step_s=0.05)
        source.reachability.answered()
        await clock.run_until(lambda: clock.now >= 30.0, step_s=0.05)
        source.append(10)
        await clock.run_until(lambda: destination_next(store) == 110)
        stop.set()


async def test_a_read_that_stalled_is_asked_again_after_a_backoff_and_lands_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A read given up because its broker sent nothing (`ReadStalledError`, from a shared job whose other
    partitions went on) is unavailability: the mirror asks again with backoff, with a WARN per retry, and what it
    writes lands once."""
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(100)
    stalled = ReadStalledError("t-0", 0, 100, 5.0, "Connection refused")
    source.fail_runs = [stalled, stalled]
    actor, stop, families = make_actor(source, store, clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await actor.started.wait()
        await clock.run_until(lambda: destination_next(store) == 100, step_s=0.05)
        stop.set()
    assert [first for ((first, _, _),) in source.jobs] == [0, 0, 0]  # the same flush, asked three times
    assert read_back(store) == expected_rows(source)
    assert families.registry.get_sample_value("mirror_v3_source_retries_total", {"source_cluster": "c"}) == 2
    retries = [vars(r)["mirror_v3_fields"] for r in caplog.records if r.getMessage() == "source unavailable, retrying"]
    assert [(r["operation"], r["attempt"]) for r in retries] == [("read", 1), ("read", 2)], retries
    assert retries[0]["error"] == "t-0: no progress for 5s at offset 0 while reading up to 99: Connection refused"


async def test_a_read_given_up_because_every_broker_is_down_starts_the_clusters_outage_at_once() -> None:
    """Not at the estate poll's next failure: the WARN, the gauge, /readyz and the outage deadline count from it."""
    source, store, clock = FakePartitionSource(), InMemoryStore(), FakeClock()
    source.append(100)
    source.fail_runs = [ReadStalledError("t-0", 0, 100, 0.05, "1/1 brokers are down", brokers_down=True)]
    actor, stop, _ = make_actor(source, store, clock=clock)
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(actor.run)
        await actor.started.wait()
        await clock.run_until(lambda: source.reachability.outage is not None, step_s=0.01)
        outage = source.reachability.outage
        assert outage is not None and outage.cause.endswith("1/1 brokers are down"), outage
        source.reachability.answered()  # the poll hears from it again
        await clock.run_until(lambda: destination_next(store) == 100, step_s=0.05)
        stop.set()
    assert read_back(store) == expected_rows(source)
