"""Blocking calls of many tasks run in batches: one worker-thread trip runs every call queued at the time.

An estate commits hundreds of blobs a second, each a few short system calls (a lock, a write, a link, two
syncs: about 0.3 ms of CPU). One worker-thread trip per commit cost about as much again in the event loop and
the kernel (waking a thread, waking the loop back, anyio's bookkeeping), and a Spark job hands its results to
all its partitions at the same moment, so their commits arrive together. Here the first call of a turn of the
event loop leads: it lets the loop run once, so the calls made in the same turn join it, then runs the queue in
one worker thread, one call after the other, and gives every caller its own result or exception.

Up to `lanes` batches run at the same time (a slow filesystem, NFS say, still has calls in flight in parallel),
each of at most `batch_max` calls. Calls are never cancelled once made: like a worker-thread call that has begun,
a call waits for its outcome, so its caller never has to guess whether it ran. A call made while every lane is
busy waits for the next batch: it is run in order of arrival.

Cost: a thread trip and a loop wake-up per batch instead of per call; per call, a queue entry and an Event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

T = TypeVar("T")


class _Call:
    def __init__(self, run: Callable[[], Any]) -> None:
        self.run = run
        self.outcome: tuple[bool, Any] | None = None  # (returned, the value or the exception)
        self.lead = False  # asked to lead the next batch
        self.wake = anyio.Event()


def _run_all(batch: list[_Call]) -> None:
    for call in batch:
        try:
            call.outcome = (True, call.run())
        except BaseException as exc:  # every caller gets its own outcome, whatever the others did
            call.outcome = (False, exc)


class ThreadBatches:
    """Runs blocking calls in worker-thread batches; see the module's docstring."""

    def __init__(self, lanes: int = 8, batch_max: int = 64) -> None:
        assert lanes >= 1 and batch_max >= 1
        self._lanes, self._batch_max = lanes, batch_max
        self._queue: deque[_Call] = deque()
        self._leaders = 0  # lanes taken: leaders gathering or running a batch, and calls asked to lead
        self._gathering = False
        self.batches = 0  # batches run so far (for tests and curious readers)

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        """`function(*args)` in a worker thread, with the calls of other tasks made at the same time."""
        call = _Call(partial(function, *args))
        self._queue.append(call)
        with anyio.CancelScope(shield=True):  # made is made: see the module's docstring
            if not self._gathering and self._leaders < self._lanes:
                self._leaders += 1
                call.lead = True
            while call.outcome is None:
                if call.lead:
                    call.lead = False
                    await self._lead()
                else:
                    await call.wake.wait()
                    call.wake = anyio.Event()
            if call.lead:  # asked to lead, but a batch ran this call first: the lane it was given is free
                call.lead = False
                self._leaders -= 1
                self._hand_off()
        outcome = call.outcome
        assert outcome is not None  # the loop above ends only once it is set
        returned, value = outcome
        if returned:
            return value  # type: ignore[no-any-return]
        raise value

    async def _lead(self) -> None:
        """Gather the calls of this turn of the loop, then run the oldest `batch_max` queued calls in a thread."""
        try:
            self._gathering = True
            try:
                await anyio.lowlevel.cancel_shielded_checkpoint()  # the calls made in this turn queue meanwhile
            finally:
                self._gathering = False
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._batch_max))]
            self._hand_off()  # more than one batch's worth queued: another lane starts now
            if batch:
                self.batches += 1
                try:
                    await anyio.to_thread.run_sync(_run_all, batch)
                except BaseException as exc:  # no worker thread ran them: each call fails with why, none waits on
                    for call in batch:
                        if call.outcome is None:
                            call.outcome = (False, exc)
                finally:
                    for call in batch:
                        call.wake.set()
        finally:
            self._leaders -= 1
        self._hand_off()

    def _hand_off(self) -> None:
        """Ask the oldest waiting call to lead a batch, if a lane is free and nobody is gathering."""
        if self._queue and not self._gathering and self._leaders < self._lanes:
            first = self._queue[0]
            if not first.lead:
                self._leaders += 1
                first.lead = True
                first.wake.set()
