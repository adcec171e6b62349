"""The supervisor of the mirrors (`supervisor.mirrors`) on a fake clock, with fake actors and a fake cluster read:
restarts after a failure (backoff, replacement, the process collapsing or the mirror stopping for good), and
discovery adding and removing mirrors."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from config.estate import EstatePlan, MirrorSpec, compile_entries, expand
from config.loader import parse_config
from core.errors import DataLossError, SourceUnavailableError
from sinks.tables.positions import CommittedLog
from source.discovery import ClusterRead
from supervisor.failures import FirstFailure, RestartPolicy
from supervisor.mirrors import MirrorLinks, Supervisor, SupervisorSettings
from telemetry.metrics import MetricFamilies, MirrorMetrics
from tests.fakes import FakeClock, fresh_metrics

CONFIG = """
clusters:
  prod: {bootstrap-servers: "src:9092"}
destination: {type: filesystem, root: /archive}
mirrors:
  - {name: orders, cluster: prod, topic-regex: "orders[.].*"}
"""


class FakeActor:
    """Runs until told to fail (with `fail`) or cancelled; counts itself."""

    def __init__(self, spec: MirrorSpec, families: MetricFamilies) -> None:
        self.spec = spec
        labels = MirrorMetrics.for_mirror(families, spec.cluster, spec.topic, spec.partition, spec.destination_name)
        self.metrics_labels = labels.labels
        self.started = anyio.Event()
        self.position, self.lag, self.held_since = 0, 0, None
        self.committed = CommittedLog(4)
        self._failure: Exception | None = None
        self._failed = anyio.Event()
        self.cancelled = False

    async def run(self) -> None:
        self.started.set()
        try:
            await self._failed.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        assert self._failure is not None
        raise self._failure

    def fail(self, exc: Exception) -> None:
        self._failure = exc
        self._failed.set()

    def cancel_jobs(self) -> None:
        return None

    def pending_age(self) -> float:
        return 0.0


class World:
    """The clusters' topics (what discovery reads), the actors made, the mirrors announced to the services."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.families, _ = fresh_metrics()
        self.actors: list[FakeActor] = []
        self.added: list[list[str]] = []

    def make_actor(self, spec: MirrorSpec) -> FakeActor:
        actor = FakeActor(spec, self.families)
        self.actors.append(actor)
        return actor

    def of(self, topic: str, partition: int) -> list[FakeActor]:
        return [actor for actor in self.actors if (actor.spec.topic, actor.spec.partition) == (topic, partition)]

    async def read_clusters(self) -> ClusterRead:
        return ClusterRead({"prod": dict(self.topics)}, {})

    async def topic_exists(self, spec: MirrorSpec) -> bool | None:
        return spec.topic in self.topics

    async def mirrors_added(self, specs: Sequence[MirrorSpec]) -> None:
        self.added.append(sorted(f"{spec.topic}-{spec.partition}" for spec in specs))


def _supervisor(
    world: World, clock: FakeClock, on_mirror_failure: str = "restart"
) -> tuple[Supervisor, FirstFailure, anyio.Event, EstatePlan]:
    entries = compile_entries(parse_config(CONFIG, env={}))
    failure, stop = FirstFailure(), anyio.Event()
    links = MirrorLinks(world.make_actor, world.read_clusters, world.topic_exists, world.mirrors_added, clock=clock)
    settings = SupervisorSettings(
        on_mirror_failure=on_mirror_failure,
        discovery_interval_s=10.0,
        restarts=RestartPolicy(initial_s=2.0, max_s=8.0, healthy_after_s=300.0),
    )
    supervisor = Supervisor(entries, None, world.families, failure, stop, links, settings)
    plan = expand(entries, {"prod": dict(world.topics)})
    supervisor.add(plan)
    return supervisor, failure, stop, plan


def _names(supervisor: Supervisor) -> list[str]:
    return sorted(f"{record.spec.topic}-{record.spec.partition}" for record in supervisor.mirrors.values())


async def test_a_failed_mirror_is_replaced_after_its_backoff_and_its_record_stays() -> None:
    world, clock = World({"orders.eu": 1}), FakeClock()
    supervisor, failure, stop, _ = _supervisor(world, clock)
    async with anyio.create_task_group() as process:
        process.start_soon(supervisor.run, process.cancel_scope)
        await clock.run_until(lambda: world.actors[0].started.is_set())
        record = next(iter(supervisor.mirrors.values()))
        first = world.actors[0]
        first.fail(SourceUnavailableError("broker down"))
        await clock.run_until(lambda: record.failure is not None)
        failed_at = clock.now
        assert record.restart_at is not None and 1.0 <= record.restart_at - clock.wall() <= 2.0  # jittered 50-100 %
        assert not record.running and record.actor is first
        await clock.run_until(lambda: len(world.actors) == 2)
        assert 1.0 <= clock.now - failed_at <= 2.0 + 0.01
        await clock.run_until(lambda: world.actors[1].started.is_set())
        assert record.actor is world.actors[1] and record.failure is None and record.running
        assert supervisor.mirrors[record.spec.key] is record  # /readyz and /mirrors read the same record
        # The second failure in a row waits twice as long (capped exponential backoff).
        world.actors[1].fail(SourceUnavailableError("broker down again"))
        await clock.run_until(lambda: record.failure is not None)
        failed_at = clock.now
        await clock.run_until(lambda: len(world.actors) == 3)
        assert 2.0 <= clock.now - failed_at <= 4.0 + 0.01
        stop.set()
        process.cancel_scope.cancel()
    assert failure.cause is None


async def test_a_failure_that_says_the_data_is_wrong_stops_the_mirror_for_good() -> None:
    world, clock = World({"orders.eu": 2}), FakeClock()
    supervisor, failure, stop, _ = _supervisor(world, clock)
    async with anyio.create_task_group() as process:
        process.start_soon(supervisor.run, process.cancel_scope)
        await clock.run_until(lambda: all(actor.started.is_set() for actor in world.actors))
        world.actors[0].fail(DataLossError("orders.eu", 0, 10, 5))
        record = supervisor.mirrors[world.actors[0].spec.key]
        await clock.run_until(lambda: record.failure is not None)
        await clock.run_for(120.0, step_s=0.5)
        assert len(world.actors) == 2 and record.restart_at is None  # never restarted
        assert "offsets 5..9 were deleted" in (record.failure or "")
        assert world.actors[1].started.is_set() and not world.actors[1].cancelled  # the other one runs on
        stop.set()
        process.cancel_scope.cancel()
    assert failure.cause is None  # the process keeps running


async def test_with_on_mirror_failure_exit_one_failed_mirror_collapses_the_process() -> None:
    world, clock = World({"orders.eu": 2}), FakeClock()
    supervisor, failure, _, _ = _supervisor(world, clock, on_mirror_failure="exit")
    crash = SourceUnavailableError("broker down")
    async with anyio.create_task_group() as process:
        process.start_soon(supervisor.run, process.cancel_scope)
        await clock.run_until(lambda: all(actor.started.is_set() for actor in world.actors))
        world.actors[1].fail(crash)
        await clock.run_until(lambda: failure.cause is not None)
    assert failure.cause is crash and world.actors[0].cancelled and len(world.actors) == 2


async def test_a_mirror_whose_topic_was_deleted_is_forgotten_not_restarted() -> None:
    world, clock = World({"orders.eu": 1, "orders.us": 1}), FakeClock()
    supervisor, failure, stop, _ = _supervisor(world, clock)
    async with anyio.create_task_group() as process:
        process.start_soon(supervisor.run, process.cancel_scope)
        await clock.run_until(lambda: all(actor.started.is_set() for actor in world.actors))
        del world.topics["orders.us"]
        (us,) = [actor for actor in world.actors if actor.spec.topic == "orders.us"]
        us.fail(SourceUnavailableError("unknown topic"))
        await clock.run_until(lambda: len(supervisor.mirrors) == 1)
        await clock.run_for(30.0, step_s=0.5)
        assert [a.spec.topic for a in world.actors] == ["orders.eu", "orders.us"]  # no replacement
        stop.set()
        process.cancel_scope.cancel()
    assert failure.cause is None


async def test_discovery_starts_new_partitions_and_stops_the_mirrors_of_deleted_topics() -> None:
    world, clock = World({"orders.eu": 1, "orders.us": 1}), FakeClock()
    supervisor, failure, stop, _ = _supervisor(world, clock)
    async with anyio.create_task_group() as process:
        process.start_soon(supervisor.run, process.cancel_scope)
        await clock.run_until(lambda: len(world.actors) == 2 and all(a.started.is_set() for a in world.actors))
        world.topics.update({"orders.eu": 3, "orders.asia": 1, "payments": 1})  # payments: not selected
        del world.topics["orders.us"]
        await clock.run_for(9.5, step_s=0.5)
        assert len(world.actors) == 2  # not before the interval
        await clock.run_until(lambda: len(world.actors) == 5, step_s=0.5)
        # The services heard of the new mirrors before they started (their topics made first).
        assert world.added == [["orders.asia-0", "orders.eu-1", "orders.eu-2"]]
        await clock.run_until(
            lambda: _names(supervisor) == ["orders.asia-0", "orders.eu-0", "orders.eu-1", "orders.eu-2"]
        )
        (us,) = world.of("orders.us", 0)
        assert us.cancelled
        stop.set()
        process.cancel_scope.cancel()
    assert failure.cause is None


@pytest.mark.parametrize("stopped", ["before", "during"])
async def test_a_drain_during_the_backoff_restarts_nothing(stopped: str) -> None:
    world, clock = World({"orders.eu": 1}), FakeClock()
    supervisor, failure, stop, _ = _supervisor(world, clock)
    async with anyio.create_task_group() as process:
        process.start_soon(supervisor.run, process.cancel_scope)
        await clock.run_until(lambda: world.actors[0].started.is_set())
        if stopped == "before":
            stop.set()
        world.actors[0].fail(SourceUnavailableError("broker down"))
        if stopped == "during":
            record = next(iter(supervisor.mirrors.values()))
            await clock.run_until(lambda: record.failure is not None)
            stop.set()
        await clock.run_for(20.0, step_s=0.5)
        process.cancel_scope.cancel()
    assert len(world.actors) == 1
    # A mirror that fails while the process drains collapses it (its exit code says so); one in its backoff when
    # the drain begins simply is not restarted.
    assert (failure.cause is not None) == (stopped == "before")
