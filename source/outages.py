"""Source outages: seeing them (`ClusterReachability`), and riding out a short one (a broker restart, a rolling
upgrade, a network blip) instead of failing the mirror at its first unanswered request (`OutageRider`).

A cluster is *down* from the first request that went unanswered (`SourceUnavailableError`: refused, timed out, no
leader) until a request is answered again. The estate poll asks every interval whatever the mirrors are doing, so
an outage is seen within an interval (plus a request timeout for a cluster that stops answering without refusing),
also while every mirror waits on a Spark read. Its transitions are what an operator needs: a WARN when it goes
down, an INFO with how long it was down when it is back, a callback for the gauge and the readiness endpoint, and
an event that wakes the mirrors, whose outage deadline counts from `Outage.since`. No I/O of its own; the clock is
the actors' monotonic clock. Cost: a comparison per request outcome; the mirrors wake only at transitions.

A query the source did not answer (`SourceUnavailableError`: refused, timed out, no leader) is asked again
with capped exponential backoff until `source.outage-deadline-ms` has passed since the first failure of
the spell; only then does the mirror fail. Each retry is a WARN and counts in
`mirror_v3_source_retries_total`. Errors that will not pass (a wrong password, a missing topic) fail at
once.

Retrying is safe because the queries only read: the offsets decide what the next job reads, and nothing
is written or committed from an answer that did not come.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, TypeVar

import anyio

from core.errors import SourceUnavailableError, first_line
from core.logs import log_event
from core.reachability import Outage, Reachability
from core.retry import Retry, RetryPolicy, retry_async

T = TypeVar("T")
log = logging.getLogger("mirror_v3.source")
# Quick first retries (a leader election takes a moment), then every few seconds: a broker restart is short.
OUTAGE_BACKOFF = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=5.0)


class RetryCounter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class SourceOutageError(SourceUnavailableError):
    """A source cluster stayed unreachable past `source.outage-deadline-ms`: down for `down_s`, first for `cause`."""

    def __init__(self, cluster: str, deadline_s: float, down_s: float, cause: str) -> None:
        self.cluster, self.deadline_s, self.down_s, self.cause = cluster, deadline_s, down_s, cause
        super().__init__(
            f"source cluster {cluster} unreachable for {down_s:.1f}s, past source.outage-deadline-ms "
            f"({deadline_s * 1000:.0f}): {cause}"
        )

    @classmethod
    def of(cls, outage: Outage, deadline_s: float, now: float) -> SourceOutageError:
        return cls(outage.name, deadline_s, now - outage.since, outage.cause)


class ClusterReachability(Reachability):
    """Whether one source cluster answers, from the outcomes of its requests (see the module's docstring)."""

    def __init__(self, cluster: str, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(cluster, "source cluster", "source_cluster", log, clock)
        self.cluster = cluster
        self.change = anyio.Event()  # set at the next transition (a new event after each one)

    def failed(self, exc: SourceUnavailableError) -> None:
        """A request of the cluster went unanswered: down, since now unless it was already."""
        if self.outage is not None:
            return
        cause = first_line(exc)
        prefixes = (f"source cluster {self.cluster} unreachable: ", f"source cluster {self.cluster}: ")
        for named in (*prefixes, f"source cluster {self.cluster} "):
            cause = cause.removeprefix(named)  # the outage names its cluster already
        self.down(cause)

    def _changed(self) -> None:
        self.change.set()
        self.change = anyio.Event()
        super()._changed()


class OutageRider:
    def __init__(
        self,
        cluster: str,
        deadline_s: float,
        retries: RetryCounter,
        log_fields: Mapping[str, object],
        policy: RetryPolicy = OUTAGE_BACKOFF,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._cluster = cluster
        self._deadline_s = deadline_s
        self._retries = retries
        self._fields = log_fields
        self._policy = dataclasses.replace(policy, deadline_s=deadline_s)
        self._rng = rng or random.Random()
        self._clock = clock
        self._sleep = sleep

    async def ride_out(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        """`operation()`, asked again while the source is unavailable, up to the outage deadline."""

        failing_for = [0.0]

        def exhausted(exc: SourceUnavailableError, attempts: int) -> SourceOutageError:
            down_s = max(failing_for[0], self._deadline_s)
            return SourceOutageError(self._cluster, self._deadline_s, down_s, first_line(exc))

        def retrying(exc: SourceUnavailableError, retry: Retry) -> None:
            failing_for[0] = retry.failing_for_s
            self._retries.inc()
            log_event(
                log,
                logging.WARNING,
                "source unavailable, retrying",
                **self._fields,
                operation=what,
                attempt=retry.number,
                retry_in_ms=round(retry.delay_s * 1000),
                failing_for_s=round(retry.failing_for_s, 1),
                deadline_s=self._deadline_s,
                error=str(exc),
            )

        return await retry_async(
            operation, SourceUnavailableError, self._policy, exhausted, retrying, self._clock, self._sleep, self._rng
        )
