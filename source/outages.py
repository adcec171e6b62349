"""Riding out a short source outage (a broker restart, a rolling upgrade, a network blip) instead of failing
the mirror at its first unanswered offset query.

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

from core.errors import SourceUnavailableError
from core.logs import log_event
from core.retry import Retry, RetryPolicy, retry_async

T = TypeVar("T")
log = logging.getLogger("mirror_v3.source")
# Quick first retries (a leader election takes a moment), then every few seconds: a broker restart is short.
OUTAGE_BACKOFF = RetryPolicy(initial_backoff_s=0.5, max_backoff_s=5.0)


class RetryCounter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class SourceOutageError(SourceUnavailableError):
    """The source stayed unreachable past the outage deadline."""

    def __init__(self, cause: SourceUnavailableError, deadline_s: float, attempts: int) -> None:
        self.deadline_s, self.attempts = deadline_s, attempts
        super().__init__(f"{cause} (unreachable for over {deadline_s:g}s, source.outage-deadline-ms; {attempts} tries)")


class OutageRider:
    def __init__(
        self,
        deadline_s: float,
        retries: RetryCounter,
        log_fields: Mapping[str, object],
        policy: RetryPolicy = OUTAGE_BACKOFF,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        self._deadline_s = deadline_s
        self._retries = retries
        self._fields = log_fields
        self._policy = dataclasses.replace(policy, deadline_s=deadline_s)
        self._rng = rng or random.Random()
        self._clock = clock
        self._sleep = sleep

    async def ride_out(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        """`operation()`, asked again while the source is unavailable, up to the outage deadline."""

        def exhausted(exc: SourceUnavailableError, attempts: int) -> SourceOutageError:
            return SourceOutageError(exc, self._deadline_s, attempts)

        def retrying(exc: SourceUnavailableError, retry: Retry) -> None:
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
