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
from dataclasses import dataclass
from typing import TypeVar

import anyio

from sinks.base import Committed, DestinationError, Inspection, Sink
from sinks.produce_target import KafkaProduceTarget, ProducedRange
from sinks.staging import BlobStaging, StagedBlob

T = TypeVar("T")
log = logging.getLogger("mirror_v3.retry")


class TransientDestinationError(DestinationError):
    """A failure that another attempt may not hit."""


class RetriesExhaustedError(DestinationError):
    """A transient failure that lasted past the retry deadline."""


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


async def retry_transient(
    operation: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    what: str,
    on_retry: Callable[[int], None] = lambda _: None,
    rng: random.Random | None = None,
    log_fields: dict[str, object] | None = None,
) -> T:
    """Run `operation`, retrying TransientDestinationError until `policy.deadline_s` has passed."""
    rng = rng or random.Random()
    deadline = time.monotonic() + policy.deadline_s
    retry = 0
    try:
        while True:
            try:
                return await operation()
            except TransientDestinationError as exc:
                retry += 1
                delay = policy.backoff(retry, rng)
                if time.monotonic() + delay > deadline:
                    raise RetriesExhaustedError(
                        f"{what}: still failing after {retry} attempts over {policy.deadline_s:g}s: {exc}"
                    ) from exc
                on_retry(retry)
                fields = {
                    **(log_fields or {}),
                    "operation": what,
                    "retry": retry,
                    "backoff_ms": round(delay * 1000),
                    "error": str(exc),
                }
                # `mirror_v3_fields` is what the process's log formatter renders as key=value pairs.
                log.warning("destination operation failed, retrying", extra={"mirror_v3_fields": fields})
                await anyio.sleep(delay)
    finally:
        on_retry(0)


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
    rng = rng or random.Random()
    deadline = time.monotonic() + policy.deadline_s
    retry = 0
    while True:
        try:
            return operation()
        except TransientDestinationError as exc:
            retry += 1
            delay = policy.backoff(retry, rng)
            if time.monotonic() + delay > deadline:
                raise RetriesExhaustedError(
                    f"{what}: still failing after {retry} attempts over {policy.deadline_s:g}s: {exc}"
                ) from exc
            log.warning("%s failed, retry %d in %.1fs: %s", what, retry, delay, exc)
            on_retry(retry)
            sleep(delay)


class RetryingSink:
    """Wraps any Sink so that its transient failures are retried."""

    def __init__(
        self,
        inner: Sink,
        policy: RetryPolicy,
        on_retry: Callable[[int], None] = lambda _: None,
        log_fields: dict[str, object] | None = None,
    ) -> None:
        self._inner = inner
        self._policy = policy
        self._on_retry = on_retry
        self._log_fields = log_fields or {}

    @property
    def inner(self) -> Sink:
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

    def staging(self) -> BlobStaging | KafkaProduceTarget:
        return self._inner.staging()

    async def commit(self, item: StagedBlob | ProducedRange) -> Committed:
        return await self._retry(lambda: self._inner.commit(item), f"commit {item.first}-{item.last}")

    async def discard(self, item: StagedBlob | ProducedRange) -> None:
        await self._inner.discard(item)

    async def close(self) -> None:
        await self._inner.close()

    async def _retry(self, operation: Callable[[], Awaitable[T]], what: str) -> T:
        return await retry_transient(operation, self._policy, what, self._on_retry, log_fields=self._log_fields)
