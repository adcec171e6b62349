"""Which mirror failures a restart may cure, and the backoff between restarts."""

from __future__ import annotations

import pickle
import random

import pytest

from core.errors import DataLossError, SourceError
from sinks.base import FencedError
from sinks.blob.chain import BlobExistsError, BlobRange, ChainProblem, CorruptChainError
from sinks.kafka.produce import DestinationMovedError, PreserveHoleError, ProducerFencedError
from sinks.retry import RetriesExhaustedError, TransientDestinationError
from sinks.s3.errors import PreconditionFailed
from source.range_reader import OffsetsDeletedError, SourceRangeError
from supervisor.failures import Collapse, Restart, RestartPolicy, StopForGood, after_failure, is_permanent
from workers.range_job import SparkTaskError


def across_spark(exc: Exception) -> Exception:
    """The error as a Spark task's outcome brings it to the driver (workers.range_job: pickled)."""
    found = pickle.loads(pickle.dumps(exc))
    assert type(found) is type(exc) and str(found) == str(exc) and vars(found) == vars(exc)
    return found  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "exc",
    [
        CorruptChainError(ChainProblem.GAP, ["0-9.parquet"], BlobRange(10, 19)),
        BlobExistsError("taken"),
        PreconditionFailed("412"),
        DataLossError("t", 0, log_start=150, next_offset=100),
        across_spark(OffsetsDeletedError("t-0", 5, 7)),
        across_spark(PreserveHoleError("t-0", 1, 2)),
        across_spark(ProducerFencedError("destination t-0", "mirror-v3.t-0", 2222, "mirror-v3.owners")),
        across_spark(DestinationMovedError("destination t-0", 12, 10, "the end offset")),
        FencedError("destination t-0", "mirror-v3.t-0"),
    ],
)
def test_facts_about_data_or_ownership_are_not_retried(exc: Exception) -> None:
    assert is_permanent(exc)


@pytest.mark.parametrize(
    "exc",
    [
        SourceError("source cluster k:9092 unreachable"),
        RetriesExhaustedError("commit 0-9", 12, 300, TransientDestinationError("HTTP 503")),
        across_spark(SourceRangeError("t-0", 30, "no progress for 30s")),
        across_spark(SparkTaskError("OSError", "No space left on device")),
        OSError("Not a directory"),
    ],
)
def test_failures_another_attempt_may_cure_are_restarted(exc: Exception) -> None:
    assert not is_permanent(exc)


def test_backoff_doubles_up_to_its_cap_with_jitter() -> None:
    policy, rng = RestartPolicy(initial_s=1, max_s=60), random.Random(7)
    delays = [policy.delay(n, rng) for n in range(1, 10)]
    ceilings = [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))


def decide(exc: Exception, mode: str = "restart", stopping: bool = False, before: int = 0, ran: float = 1.0) -> object:
    policy = RestartPolicy(initial_s=1, max_s=60, healthy_after_s=300)
    return after_failure(
        exc,
        on_mirror_failure=mode,
        stopping=stopping,
        restarts_before=before,
        ran_for_s=ran,
        policy=policy,
        rng=random.Random(3),
    )


def test_after_a_failure_the_process_collapses_when_told_to_or_when_it_drains() -> None:
    transient = SourceError("broker unreachable")
    assert decide(transient, mode="exit") == Collapse()
    assert decide(CorruptChainError(ChainProblem.GAP, ["a.parquet"]), mode="exit") == Collapse()
    assert decide(transient, stopping=True) == Collapse()  # a drain does not wait for a backoff


def test_a_permanent_failure_stops_the_mirror_for_good_and_a_transient_one_backs_off() -> None:
    assert decide(DataLossError("orders", 0, 20, 10)) == StopForGood()
    first = decide(SourceError("broker unreachable"))
    assert isinstance(first, Restart) and first.restart == 1 and 0.5 <= first.delay_s <= 1
    # A mirror that keeps failing quickly backs off further each time, up to the cap...
    decisions = [decide(SourceError("down"), before=n, ran=2.0) for n in range(1, 9)]
    assert [d.restart for d in decisions if isinstance(d, Restart)] == list(range(2, 10))
    assert all(isinstance(d, Restart) and d.delay_s <= 60 for d in decisions)
    # ...and one that ran healthily before it failed starts over.
    again = decide(SourceError("down"), before=8, ran=301.0)
    assert isinstance(again, Restart) and again.restart == 1 and again.delay_s <= 1
