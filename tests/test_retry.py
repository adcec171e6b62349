"""The retry layer: transient failures retried with a visible retry count, permanent ones not, and
a retried commit never duplicates or skips a blob."""

from __future__ import annotations

import itertools
import logging

import pytest

from core.retry import retry_async
from sinks.base import DestinationError
from sinks.blob.chain import BlobExistsError, is_temp_name
from sinks.blob.sink import BlobSink
from sinks.blob.staging import StagedBlob
from sinks.retry import RetriesExhaustedError, RetryingSink, RetryPolicy, TransientDestinationError
from tests.fakes import InMemoryStore, MemoryStaging, stage_bytes

FAST = RetryPolicy(initial_backoff_s=0.001, max_backoff_s=0.01, deadline_s=5)


class FlakyStore(InMemoryStore):
    """Fails the next puts in scripted ways."""

    def __init__(self, script: list[str]) -> None:
        super().__init__()
        self.script = script
        self.puts = 0
        self.raised: list[Exception] = []

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        self.puts += 1
        action = self.script.pop(0) if self.script else "ok"
        if action == "503":
            raise TransientDestinationError("HTTP 503 SlowDown")
        if action == "lost-answer":  # the commit lands, the answer never arrives
            await super().commit_staged(name, staged, after)
            self.unsure.add(name)
            raise TransientDestinationError("connection reset after the commit")
        if action == "403":
            self.raised.append(DestinationError("access denied"))
            raise self.raised[-1]
        return await super().commit_staged(name, staged, after)


def staged(store: InMemoryStore, first: int, last: int) -> StagedBlob:
    """A blob staged in the store, as a task would leave it."""
    return stage_bytes(store, b"parquet bytes", first, last)


class Spells:
    """What the sink tells the destination's health (sinks.destination_health) of its spells of retries."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, object]] = []

    def failing(self, cause: str) -> None:
        self.heard.append(("failing", cause))

    def ended(self, succeeded: bool) -> None:
        self.heard.append(("ended", succeeded))


SPELLS = Spells()


async def make_sink(store: InMemoryStore, policy: RetryPolicy = FAST) -> tuple[RetryingSink[StagedBlob], list[int]]:
    gauge: list[int] = []
    sink = RetryingSink(BlobSink(store, "mem", MemoryStaging(store)), policy, on_retry=gauge.append, spells=SPELLS)
    await sink.open()
    gauge.clear()
    SPELLS.heard.clear()
    return sink, gauge


async def test_transient_failures_are_retried_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    store = FlakyStore(["503", "503", "ok"])
    sink, gauge = await make_sink(store)
    caplog.set_level(logging.INFO)
    await sink.commit(staged(store, 0, 9))
    assert store.puts == 3
    assert gauge == [1, 2, 0]  # the retry number while retrying, back to 0 on success
    warned = [r for r in caplog.records if r.getMessage() == "destination operation failed, retrying"]
    (back,) = [r for r in caplog.records if r.getMessage() == "destination operation succeeded again"]
    assert len(warned) == 2 and back.levelno == logging.INFO
    assert back.mirror_v3_fields["retries"] == 2 and back.mirror_v3_fields["down_s"] >= 0  # type: ignore[attr-defined]
    assert list(store.blobs) == ["00000000000000000000-00000000000000000009.parquet"]
    assert SPELLS.heard == [("failing", "HTTP 503 SlowDown")] * 2 + [("ended", True)]


async def test_lost_answer_is_not_a_duplicate() -> None:
    store = FlakyStore(["lost-answer"])
    sink, _ = await make_sink(store)
    await sink.commit(staged(store, 0, 9))
    await sink.commit(staged(store, 10, 19))
    assert sorted(store.blobs) == [
        "00000000000000000000-00000000000000000009.parquet",
        "00000000000000000010-00000000000000000019.parquet",
    ]


async def test_permanent_failures_fail_at_once() -> None:
    store = FlakyStore(["403"])
    sink, gauge = await make_sink(store)
    with pytest.raises(DestinationError) as caught:
        await sink.commit(staged(store, 0, 9))
    assert caught.value is store.raised[0] and store.puts == 1 and gauge == []  # no retry: the gauge is not touched
    assert SPELLS.heard == []  # nor is there a spell


async def test_another_writer_is_permanent() -> None:
    store = FlakyStore([])
    sink, _ = await make_sink(store)
    store.blobs["00000000000000000000-00000000000000000009.parquet"] = b"someone else"
    with pytest.raises(BlobExistsError):
        await sink.commit(staged(store, 0, 9))


async def test_deadline_ends_the_retries() -> None:
    store = FlakyStore(["503"] * 1000)
    policy = RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.02, deadline_s=0.1)
    sink, gauge = await make_sink(store, policy)
    with pytest.raises(RetriesExhaustedError) as caught:
        await sink.commit(staged(store, 0, 9))
    assert caught.value.attempts == store.puts >= 2 and caught.value.deadline_s == 0.1
    assert isinstance(caught.value.cause, TransientDestinationError)
    assert gauge[-1] == 0 and max(gauge) >= 2
    assert SPELLS.heard[-1] == ("ended", False) and len(SPELLS.heard) == store.puts  # a failing per attempt
    assert not [name for name in store.blobs if not is_temp_name(name)]


def test_backoff_is_capped_and_jittered() -> None:
    import random

    policy = RetryPolicy(initial_backoff_s=0.1, max_backoff_s=1.0)
    rng = random.Random(1)
    delays = [policy.backoff(n, rng) for n in range(1, 12)]
    assert all(0.05 <= d <= 1.0 for d in delays)
    assert delays[-1] >= 0.5  # reached the cap (jittered down at most by half)


async def test_an_operation_is_asked_until_its_deadline_the_last_wait_cut_to_end_there() -> None:
    """Not given up a backoff early: the last ask is at the deadline itself."""
    now = [0.0]
    asked: list[float] = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    async def operation() -> None:
        asked.append(now[0])
        raise TransientDestinationError("refused")

    policy = RetryPolicy(initial_backoff_s=5.0, max_backoff_s=5.0, deadline_s=12.0)
    with pytest.raises(RuntimeError, match="attempts"):
        await retry_async(
            operation,
            TransientDestinationError,
            policy,
            lambda exc, attempts: RuntimeError(f"after {attempts} attempts"),
            clock=lambda: now[0],
            sleep=sleep,
        )
    assert asked[0] == 0.0 and asked[-1] == pytest.approx(12.0), asked
    assert all(0 < later - earlier <= 5.0 for earlier, later in itertools.pairwise(asked)), asked
