"""A source that does not answer is asked again until the outage deadline; what will not pass fails at once."""

from __future__ import annotations

import random

import pytest

from core.errors import SourceError, SourceUnavailableError
from source.outages import OutageRider, SourceOutageError


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
    return OutageRider(deadline_s, counter, {"mirror": "m"}, rng=random.Random(1), clock=time.clock, sleep=time.sleep)


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
    assert caught.value.deadline_s == 20 and caught.value.attempts == counter.value + 1
    assert time.now <= 20 and str(caught.value).startswith("source cluster k:9092 unreachable: refused")


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
