"""Time as the actors see it, injected so that timer tests run on a fake clock instead of sleeping.

`monotonic` is for deadlines and durations, `wall` (Unix time) for ages an operator reads, `sleep` is the only way
the code waits for time to pass. `wait_for` waits for an event or a timeout, whichever comes first.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


async def wait_for(clock: Clock, event: anyio.Event, timeout_s: float) -> bool:
    """Until `event` is set or `timeout_s` of `clock` have passed; whether the event was set."""
    if event.is_set():
        return True
    async with anyio.create_task_group() as waiting:

        async def time_out() -> None:
            await clock.sleep(timeout_s)
            waiting.cancel_scope.cancel()

        waiting.start_soon(time_out)
        await event.wait()
        waiting.cancel_scope.cancel()
    return event.is_set()
