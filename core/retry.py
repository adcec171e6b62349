"""One retry mechanism for every failure that may pass: capped exponential backoff with jitter, until a
deadline counted from the operation's first failure.

What may pass is the caller's to say, as an exception type: `TransientDestinationError` for a store's 5xx
or a reset connection (sinks.retry), `SourceUnavailableError` for a source broker that did not answer
(source.outages). Whether a retry is safe is the caller's to argue as well; this module only decides when
to ask again and when to give up. The clock, the sleep and the randomness are injected, so the policy is
tested without waiting.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


@dataclass(frozen=True)
class RetryPolicy:
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 10.0
    deadline_s: float = 300.0
    multiplier: float = 2.0

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Delay before retry number `retry` (1-based): capped exponential, jittered to 50-100%."""
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier ** (retry - 1))
        return ceiling * rng.uniform(0.5, 1.0)


@dataclass(frozen=True)
class Retry:
    """One failed attempt that will be followed by another: for the caller's log line and metrics."""

    number: int  # 1-based
    delay_s: float
    failing_for_s: float  # since the first failure of this operation


# What the caller raises once the deadline would pass: given the last failure and the attempts made.
Exhausted = Callable[[E, int], BaseException]


class _Spell:
    """The retries of one operation: counts them and says when the deadline would pass."""

    def __init__(self, policy: RetryPolicy, clock: Callable[[], float], rng: random.Random | None) -> None:
        self._policy, self._clock, self._rng = policy, clock, rng
        self._since: float | None = None
        self._retries = 0

    def failed(self) -> Retry | None:
        """The next retry, or None once the deadline has passed. The last wait is cut to end at the deadline, so the
        operation is asked until then, not up to a backoff less (which once failed a mirror 5 s before its source's
        outage deadline while its message said the deadline had passed)."""
        now = self._clock()
        self._since = now if self._since is None else self._since
        self._retries += 1
        if self._rng is None:  # made at the first failure: seeding one reads the OS's entropy, and most calls succeed
            self._rng = random.Random()
        elapsed = now - self._since
        if elapsed >= self._policy.deadline_s:
            return None
        delay = min(self._policy.backoff(self._retries, self._rng), self._policy.deadline_s - elapsed)
        return Retry(self._retries, delay, elapsed)

    @property
    def attempts(self) -> int:
        return self._retries


async def retry_async(
    operation: Callable[[], Awaitable[T]],
    retryable: type[E],
    policy: RetryPolicy,
    exhausted: Exhausted[E],
    on_retry: Callable[[E, Retry], None] = lambda _exc, _retry: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    rng: random.Random | None = None,
) -> T:
    """`operation()`, asked again after each `retryable` failure until `policy.deadline_s` has passed since
    the first; other exceptions pass through at once. `on_retry` hears of each retry before its wait."""
    spell = _Spell(policy, clock, rng)
    while True:
        try:
            return await operation()
        except retryable as exc:
            retry = spell.failed()
            if retry is None:
                raise exhausted(exc, spell.attempts) from exc
            on_retry(exc, retry)
            await sleep(retry.delay_s)


def retry_blocking(
    operation: Callable[[], T],
    retryable: type[E],
    policy: RetryPolicy,
    exhausted: Exhausted[E],
    on_retry: Callable[[E, Retry], None] = lambda _exc, _retry: None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> T:
    """`retry_async` for code without an event loop (inside Spark tasks)."""
    spell = _Spell(policy, clock, rng)
    while True:
        try:
            return operation()
        except retryable as exc:
            retry = spell.failed()
            if retry is None:
                raise exhausted(exc, spell.attempts) from exc
            on_retry(exc, retry)
            sleep(retry.delay_s)
