"""A source that does not answer is asked again until the outage deadline; what will not pass fails at once."""

from __future__ import annotations

import logging
import random

import pytest

from core.errors import SourceError, SourceUnavailableError
from core.reachability import Outage
from source.outages import ClusterReachability, OutageRider, SourceOutageError


class Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def rider(deadline_s: float, counter: Counter, time: FakeTime) -> OutageRider:
    return OutageRider(
        "k:9092", deadline_s, counter, {"mirror": "m"}, rng=random.Random(1), clock=time.clock, sleep=time.sleep
    )


async def test_an_outage_shorter_than_the_deadline_is_ridden_out() -> None:
    time, counter = FakeTime(), Counter()
    answers: list[BaseException | int] = [SourceUnavailableError("refused") for _ in range(4)]
    answers.append(42)

    async def query() -> int:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    assert await rider(60, counter, time).ride_out(query, "offset query") == 42
    assert counter.value == 4 and 0 < time.now < 60


async def test_an_outage_past_the_deadline_fails_with_the_cause_and_the_deadline() -> None:
    time, counter = FakeTime(), Counter()

    async def query() -> int:
        raise SourceUnavailableError("source cluster k:9092 unreachable: refused")

    with pytest.raises(SourceOutageError) as caught:
        await rider(20, counter, time).ride_out(query, "offset query")
    failure = caught.value
    assert (failure.cluster, failure.deadline_s, failure.cause) == (
        "k:9092",
        20,
        "source cluster k:9092 unreachable: refused",
    )
    assert failure.down_s >= 20 and counter.value > 3 and time.now <= 20
    assert str(failure).startswith(
        "source cluster k:9092 unreachable for 20.0s, past source.outage-deadline-ms (20000)"
    )


async def test_errors_that_will_not_pass_are_not_retried_and_deadline_0_fails_at_once() -> None:
    time, counter = FakeTime(), Counter()

    async def missing() -> int:
        raise SourceError("source topic 'x' does not exist on k:9092")

    with pytest.raises(SourceError):
        await rider(60, counter, time).ride_out(missing, "metadata query")

    async def refused() -> int:
        raise SourceUnavailableError("refused")

    with pytest.raises(SourceOutageError):
        await rider(0, counter, time).ride_out(refused, "offset query")
    assert counter.value == 0 and time.now == 0


def test_a_cluster_is_down_from_its_first_unanswered_request_until_one_is_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    time = FakeTime()
    reachability = ClusterReachability("k:9092", time.clock)
    seen: list[Outage | None] = []
    reachability.listen(seen.append)
    first_change = reachability.change
    time.now = 5.0
    reachability.failed(SourceUnavailableError("offset query failed: refused\ndetail"))
    time.now = 7.0
    reachability.failed(SourceUnavailableError("again"))  # still the same spell
    down = Outage("k:9092", since=5.0, cause="offset query failed: refused")
    assert reachability.outage == down and first_change.is_set() and not reachability.change.is_set()
    time.now = 12.5
    reachability.answered()
    reachability.answered()
    assert reachability.outage is None and seen == [None, down, None]
    lines = [(r.levelname, r.getMessage(), r.mirror_v3_fields) for r in caplog.records]  # type: ignore[attr-defined]
    assert lines == [
        (
            "WARNING",
            "source cluster unreachable",
            {"source_cluster": "k:9092", "error": "offset query failed: refused"},
        ),
        ("INFO", "source cluster reachable again", {"source_cluster": "k:9092", "down_s": 7.5}),
    ]
    failure = SourceOutageError.of(down, deadline_s=10.0, now=15.25)
    assert (failure.down_s, failure.cause) == (10.25, "offset query failed: refused")
    assert str(failure) == (
        "source cluster k:9092 unreachable for 10.2s, past source.outage-deadline-ms (10000): "
        "offset query failed: refused"
    )
