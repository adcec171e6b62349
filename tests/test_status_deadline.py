"""`status --timeout` bounds the whole command: the clusters' topics, every mirror's queries, the process's /mirrors
and closing the clients share one deadline on the command's clock; what has not answered by then is named as not
answered in time, and what did answer is reported. In-memory clusters and sinks, a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import anyio
import pytest

from commands.status import (
    StatusLinks,
    StatusReport,
    StatusSink,
    StatusTimeoutError,
    collect_status,
    watch_status,
)
from commands.status_view import render_table
from config.estate import MirrorSpec
from config.loader import parse_config
from config.model import Config, Destination, SourceConfig
from core.errors import MissingSourcePartitionError
from sinks.base import Inspection
from source.offsets import SourceOffsets
from telemetry.http import ProcessState
from tests.fakes import FakeClock

CONFIG = """
destination: {type: filesystem, root: /nowhere}
clusters:
  a: {bootstrap-servers: "a:9092"}
  c: {bootstrap-servers: "c:9092"}
mirrors:
  - {name: a, cluster: a, topics: [orders]}
  - {name: c, cluster: c, topics: [orders], destination-name: {suffix: .c}, partitions: [1]}
  - {name: c-0, cluster: c, topic: orders, partition: 0, destination-name-override: orders.c0}
"""


# The fake clock moves in steps of 5 ms, and a cancellation takes anyio a few turns of the loop to deliver, in which
# the clock may move on: a deadline is met when the command ends within a few steps of it.
LATE_S = 0.02


def config() -> Config:
    return parse_config(CONFIG, env={})


@dataclass
class FakeCluster:
    """A source cluster in memory: `orders` with two partitions, ends at 10; `hangs`: nothing ever answers (a
    blackholed route, a frozen broker)."""

    clock: FakeClock
    hangs: bool = False
    asked_at: list[float] = field(default_factory=list)  # when each offset query was answered

    async def topic_partitions(self) -> dict[str, int]:
        await self._answer()
        return {"orders": 2}

    async def check_partition(self, topic: str, partition: int) -> None:
        await self._answer()
        if topic != "orders" or partition > 1:
            raise MissingSourcePartitionError(topic, partition, "a:9092", (0, 1))

    async def offsets(self, topic: str, partition: int, isolation_level: str) -> SourceOffsets:
        await self._answer()
        self.asked_at.append(self.clock.now)
        return SourceOffsets(log_start=0, end=10, high_watermark=10)

    async def _answer(self) -> None:
        if self.hangs:
            await anyio.sleep_forever()


@dataclass
class FakeClusters:
    by_bootstrap: dict[str, FakeCluster]
    close_hangs: bool = False
    closing: bool = False
    timeouts_ms: set[int] = field(default_factory=set)  # the request timeouts the clients were given

    def get(self, name: str, source: SourceConfig, field: str) -> FakeCluster:
        self.timeouts_ms.add(source.request_timeout_ms)
        return self.by_bootstrap[source.bootstrap_servers]

    async def close(self) -> None:
        self.closing = True
        if self.close_hangs:
            await anyio.sleep_forever()


@dataclass
class FakeSink:
    """A destination partition holding offsets 0..3; `inspect_s`: how long its inspection takes on the fake clock
    (None: it never answers)."""

    name: str
    clock: FakeClock
    inspect_s: float | None = 0.0
    close_hangs: bool = False

    @property
    def description(self) -> str:
        return f"fake:{self.name}"

    async def inspect(self, deep: bool = False) -> Inspection:
        if self.inspect_s is None:
            await anyio.sleep_forever()
        await self.clock.sleep(self.inspect_s or 0.0)
        return Inspection(next_offset=4)

    async def close(self) -> None:
        if self.close_hangs:
            await anyio.sleep_forever()


def links(
    clock: FakeClock,
    clusters: FakeClusters,
    sinks: Callable[[MirrorSpec], StatusSink] | None = None,
    process_hangs: bool = False,
) -> StatusLinks:
    async def process(url: str, timeout_s: float) -> ProcessState | None:
        if process_hangs:
            await anyio.sleep_forever()
        return None

    def make_sinks(destination: Destination) -> Callable[[MirrorSpec], StatusSink]:
        return sinks or (lambda mirror: FakeSink(mirror.name, clock))

    async def never_pruned(destination: Destination) -> str | None:
        return None

    return StatusLinks(
        clusters=lambda: clusters, sinks=make_sinks, process=process, kept_since=never_pruned, clock=clock
    )


async def collect(
    clock: FakeClock, given: StatusLinks, timeout_s: float = 5.0, deep: bool = False, step_s: float = 0.005
) -> StatusReport:
    reports: list[StatusReport] = []

    async with anyio.create_task_group() as tasks:

        async def run() -> None:
            reports.append(await collect_status(config(), timeout_s, deep, None, "http://process", given))

        tasks.start_soon(run)
        await clock.run_until(lambda: bool(reports), step_s=step_s, limit_s=timeout_s * 20)
    return reports[0]


def by_name(report: StatusReport) -> dict[str, tuple[int | None, int | None, int | None, str | None]]:
    return {row.name: (row.source_end, row.destination_next, row.lag, row.error) for row in report.rows}


async def test_a_cluster_that_never_answers_costs_the_command_its_timeout_and_the_others_rows_are_complete() -> None:
    clock = FakeClock()
    a, c = FakeCluster(clock), FakeCluster(clock, hangs=True)
    clusters = FakeClusters({"a:9092": a, "c:9092": c})
    report = await collect(clock, links(clock, clusters))

    assert (
        4.5 <= clock.now <= 5.0 + LATE_S
    )  # the queries' deadline (the timeout less the closes' share), closes included
    assert clusters.closing and clusters.timeouts_ms == {5000}  # no request outlives the command
    assert a.asked_at == [0.0, 0.0]  # a's mirrors were asked at once, without waiting for c's topics
    timed_out = StatusTimeoutError("source c:9092", 5.0)
    assert (timed_out.what, timed_out.timeout_s) == ("source c:9092", 5.0)
    assert by_name(report) == {
        "a.orders-0": (10, 4, 6, None),
        "a.orders-1": (10, 4, 6, None),
        # c's single entry needs no topics read: its source is asked, and named as not answered in time.
        "c-0": (None, 4, None, "source c (c:9092): no answer within the 5s timeout"),
    }
    assert report.unreadable == {"c": "source cluster c (c:9092): no answer within the 5s timeout"}
    assert not report.ok


async def test_a_destination_the_process_and_closes_that_hang_are_cut_at_the_deadline() -> None:
    clock = FakeClock()
    clusters = FakeClusters({"a:9092": FakeCluster(clock), "c:9092": FakeCluster(clock)}, close_hangs=True)

    def sinks(mirror: MirrorSpec) -> StatusSink:
        hangs = mirror.name == "a.orders-1"
        return FakeSink(mirror.name, clock, inspect_s=None if hangs else 0.0, close_hangs=hangs)

    report = await collect(clock, links(clock, clusters, sinks, process_hangs=True))

    assert clock.now <= 5.0 + LATE_S
    assert by_name(report)["a.orders-1"] == (
        10,
        None,
        None,
        "destination fake:a.orders-1: no answer within the 5s timeout",
    )
    assert by_name(report)["a.orders-0"] == (10, 4, 6, None)
    assert by_name(report)["c.orders-1"] == (10, 4, 6, None)
    assert report.process is None and all(row.state is None for row in report.rows)  # no process answered in time
    assert not report.ok


async def test_with_deep_the_destinations_get_ten_times_the_timeout_and_the_sources_do_not() -> None:
    clock = FakeClock()
    clusters = FakeClusters({"a:9092": FakeCluster(clock), "c:9092": FakeCluster(clock, hangs=True)})
    report = await collect(
        clock,
        links(clock, clusters, lambda mirror: FakeSink(mirror.name, clock, inspect_s=30.0)),
        deep=True,
        step_s=0.05,
    )

    assert 30.0 <= clock.now <= 31.0  # the inspections' 30 s, well within 10 x 5 s; the sources were cut at 5 s
    assert by_name(report)["a.orders-0"] == (10, 4, 6, None)
    assert by_name(report)["c-0"] == (None, 4, None, "source c (c:9092): no answer within the 5s timeout")
    assert report.unreadable == {"c": "source cluster c (c:9092): no answer within the 5s timeout"}


async def test_each_watch_round_is_bounded_by_the_timeout() -> None:
    clock = FakeClock()
    clusters = FakeClusters({"a:9092": FakeCluster(clock), "c:9092": FakeCluster(clock, hangs=True)})
    emitted: list[tuple[float, StatusReport]] = []

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(
            watch_status,
            config(),
            1.0,
            lambda r: emitted.append((clock.now, r)),
            5.0,
            False,
            None,
            None,
            links(clock, clusters),
        )
        await clock.run_until(lambda: len(emitted) == 3, limit_s=30)
        tasks.cancel_scope.cancel()

    ends = [at for at, _ in emitted]
    # Each round ends by its deadline; the next begins at once, as the interval (1 s) is shorter than a round.
    assert all(4.5 <= end - begin <= 5.0 + LATE_S for begin, end in zip([0.0, *ends], ends, strict=False)), ends
    assert all(
        report.unreadable == {"c": "source cluster c (c:9092): no answer within the 5s timeout"}
        for _, report in emitted
    )
    assert emitted[-1][1].rows[0].rate == 0.0  # the rounds still compare with each other


@pytest.mark.parametrize("timeout_s", [0.5, 15.0])
async def test_the_closes_share_is_a_tenth_of_the_timeout_at_most_a_second(timeout_s: float) -> None:
    clock = FakeClock()
    clusters = FakeClusters({"a:9092": FakeCluster(clock), "c:9092": FakeCluster(clock, hangs=True)}, close_hangs=True)
    await collect(clock, links(clock, clusters), timeout_s=timeout_s)
    assert clusters.closing
    assert (
        timeout_s - LATE_S <= clock.now <= timeout_s + LATE_S
    )  # the queries' deadline, then the closes' until the end


async def test_each_row_shows_its_tables_position_and_an_unreadable_table_is_named_without_failing_the_rows() -> None:
    clock = FakeClock()
    clusters = FakeClusters({"a:9092": FakeCluster(clock), "c:9092": FakeCluster(clock)})
    asked: list[list[str]] = []

    async def tables(destination: Destination, mirrors: list[MirrorSpec]) -> tuple[dict[str, int], dict[str, str]]:
        asked.append(sorted(m.name for m in mirrors))  # once, with every row
        return {"a.orders-0": 3, "a.orders-1": 4}, {"mirror_v3.orders.c": "catalog unreachable"}

    report = await collect(clock, replace(links(clock, clusters), tables=tables))
    assert asked == [["a.orders-0", "a.orders-1", "c-0", "c.orders-1"]]
    assert {row.name: row.table_next for row in report.rows} == {
        "a.orders-0": 3,
        "a.orders-1": 4,
        "c-0": None,
        "c.orders-1": None,
    }
    assert report.unreadable_tables == {"mirror_v3.orders.c": "catalog unreachable"} and report.ok
    assert "table mirror_v3.orders.c: position unreadable: catalog unreachable" in render_table(report)
