"""The retry layer at the sink boundary, shared by every destination.

A store classifies its own failures: it raises `TransientDestinationError` for what may succeed on
another attempt (5xx, throttling, timeouts, connection resets) and anything else for what never
will (access denied, missing bucket, another writer). `RetryingSink` retries the transient ones with
capped exponential backoff and jitter until a deadline, reporting the retry number of the write in
flight through a callback (the `mirror_v3_destination_offset_inflight_retry` gauge).

Retrying a commit is safe because a commit is idempotent by construction: the blob's name is its
offset range, stores create it only if absent, and a store that finds an identical blob already
there (its own earlier attempt whose answer was lost) treats that as success.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from config.model import RetryConfig
from core.errors import first_line
from core.logs import log_event
from core.retry import Retry, RetryPolicy, retry_async, retry_blocking
from sinks.base import Committed, DestinationError, Inspection, Sink
from sinks.write_target import WriteTarget, Written

__all__ = ["RetriesExhaustedError", "RetryPolicy", "RetryingSink", "TransientDestinationError", "retry_policy"]

T = TypeVar("T")
W = TypeVar("W", bound=Written)
log = logging.getLogger("mirror_v3.retry")


def retry_policy(retry: RetryConfig) -> RetryPolicy:
    """A destination's `retry` block, in seconds."""
    return RetryPolicy(
        initial_backoff_s=retry.initial_backoff_ms / 1000,
        max_backoff_s=retry.max_backoff_ms / 1000,
        deadline_s=retry.deadline_ms / 1000,
    )


class TransientDestinationError(DestinationError):
    """A failure that another attempt may not hit."""


class RetriesExhaustedError(DestinationError):
    """A transient failure that lasted past the retry deadline."""

    def __init__(self, what: str, attempts: int, deadline_s: float, cause: TransientDestinationError) -> None:
        self.what, self.attempts, self.deadline_s, self.cause = what, attempts, deadline_s, cause
        super().__init__(f"{what}: still failing after {attempts} attempts over {deadline_s:g}s: {cause}")


def _exhausted(what: str, policy: RetryPolicy) -> Callable[[TransientDestinationError, int], RetriesExhaustedError]:
    return lambda exc, attempts: RetriesExhaustedError(what, attempts, policy.deadline_s, exc)


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    what: str,
    on_retry: Callable[[int], None] = lambda _: None,
    rng: random.Random | None = None,
    log_fields: dict[str, object] | None = None,
    on_failure: Callable[[str], None] = lambda _: None,
) -> T:
    """Run `operation`, retrying TransientDestinationError until `policy.deadline_s` has passed. `on_retry` hears
    each retry's number and 0 when the spell is over (succeeded, gave up or cancelled); `on_failure` each failure's
    first line."""

    retried: Retry | None = None  # the last retry, if any

    def retrying(exc: TransientDestinationError, retry: Retry) -> None:
        nonlocal retried
        retried = retry
        on_retry(retry.number)
        on_failure(first_line(exc))
        fields = {
            **(log_fields or {}),
            "operation": what,
            "retry": retry.number,
            "backoff_ms": round(retry.delay_s * 1000),
            "error": str(exc),
        }
        log_event(log, logging.WARNING, "destination operation failed, retrying", **fields)

    try:
        result = await retry_async(
            operation, TransientDestinationError, policy, _exhausted(what, policy), retrying, rng=rng
        )
    finally:
        if retried is not None:  # back to 0 (a gauge set per commit otherwise: most operations never retry)
            on_retry(0)
    if retried is not None:  # the WARNs said it failed; this says for how long, and that it is over
        fields = {**(log_fields or {}), "operation": what, "retries": retried.number}
        fields["down_s"] = round(retried.failing_for_s + retried.delay_s, 1)
        log_event(log, logging.INFO, "destination operation succeeded again", **fields)
    return result


def retry_transient_sync(
    operation: Callable[[], T],
    policy: RetryPolicy,
    what: str,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
    on_retry: Callable[[int], None] = lambda _: None,
) -> T:
    """The blocking twin of `retry_transient`, for work inside Spark tasks (no event loop, no metrics:
    the task's log on the executor shows its retries)."""

    def retrying(exc: TransientDestinationError, retry: Retry) -> None:
        # Not log_event: Spark's Python workers do not install the process's formatter, so the facts go in the text.
        log.warning("%s failed, retry %d in %.1fs: %s", what, retry.number, retry.delay_s, exc)
        on_retry(retry.number)

    return retry_blocking(
        operation, TransientDestinationError, policy, _exhausted(what, policy), retrying, sleep=sleep, rng=rng
    )


class RetrySpells(Protocol):
    """Hears a sink's spells of retries (`sinks.destination_health`)."""

    def failing(self, cause: str) -> None:
        """An operation failed transiently and will be retried (the first line of the error)."""
        ...

    def ended(self, succeeded: bool) -> None:
        """The spell is over: the operation succeeded, or it was given up (or cancelled)."""
        ...


class RetryingSink(Generic[W]):
    """Wraps any Sink so that its transient failures are retried."""

    def __init__(
        self,
        inner: Sink[W],
        policy: RetryPolicy,
        on_retry: Callable[[int], None] = lambda _: None,
        log_fields: dict[str, object] | None = None,
        spells: RetrySpells | None = None,
    ) -> None:
        self._inner = inner
        self._policy = policy
        self._on_retry = on_retry
        self._spells = spells
        self._log_fields = log_fields or {}

    @property
    def inner(self) -> Sink[W]:
        return self._inner

    @property
    def description(self) -> str:
        return self._inner.description

    async def open(self) -> int | None:
        return await self._retry(self._inner.open, "open")

    def claimed_range(self) -> tuple[int, int] | None:
        return self._inner.claimed_range()

    async def inspect(self, deep: bool = False) -> Inspection:
        return await self._retry(lambda: self._inner.inspect(deep), "inspect")

    def target(self) -> WriteTarget[W]:
        return self._inner.target()

    async def commit(self, item: W) -> Committed:
        return await self._retry(lambda: self._inner.commit(item), f"commit {item.first}-{item.last}")

    async def discard(self, item: W) -> None:
        await self._inner.discard(item)

    async def close(self) -> None:
        await self._inner.close()

    async def _retry(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        spells = self._spells
        if spells is None:
            return await retry_transient(operation, self._policy, what, self._on_retry, log_fields=self._log_fields)
        failed = False

        def failing(cause: str) -> None:
            nonlocal failed
            failed = True
            spells.failing(cause)

        succeeded = False
        try:
            result = await retry_transient(
                operation, self._policy, what, self._on_retry, log_fields=self._log_fields, on_failure=failing
            )
            succeeded = True
            return result
        finally:
            if failed:
                spells.ended(succeeded)
