"""Time as the actors see it, injected so that timer tests run on a fake clock instead of sleeping.

`monotonic` is for deadlines and durations, `wall` (Unix time) for ages an operator reads; `sleep` and `wait_for`
(an event or a timeout, whichever comes first) are the only ways the code waits for time to pass.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    async def wait_for(self, event: anyio.Event, timeout_s: float) -> bool:
        """Until `event` is set or `timeout_s` have passed; whether the event was set."""
        ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)

    async def wait_for(self, event: anyio.Event, timeout_s: float) -> bool:
        # A cancel scope's deadline, not a timer task: every idle actor waits here once per poll interval, and a
        # task group with a sleeping task per wait took a fifth of the event loop's CPU with 1 000 idle mirrors.
        with anyio.move_on_after(timeout_s):
            await event.wait()
        return event.is_set()


SYSTEM_CLOCK = SystemClock()
