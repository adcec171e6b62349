"""Whether one remote service answers (a source cluster, a schema registry), from the outcomes of its requests.

It is *down* from the first request that went unanswered until one is answered again. Its transitions are what an
operator needs: a WARN when it goes down (the first failure's words), an INFO with how long it was down when it is
back, and the listeners (a gauge, the readiness endpoint) at each. No I/O; the clock is injectable.
Cost: a comparison per request outcome; the listeners run at transitions only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from core.logs import log_event


@dataclass(frozen=True)
class Outage:
    """A spell of a service not answering: its name, since when (monotonic) and the first failure's words."""

    name: str
    since: float
    cause: str


class Reachability:
    def __init__(
        self, name: str, kind: str, label: str, log: logging.Logger, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """`kind` names the service in the log lines ("source cluster"), `label` is the field that names it."""
        self.name = name
        self._kind, self._label, self._log, self._clock = kind, label, log, clock
        self._listeners: list[Callable[[Outage | None], None]] = []
        self.outage: Outage | None = None

    def listen(self, listener: Callable[[Outage | None], None]) -> None:
        """Call `listener` at every transition with the outage (None: back); at once with the current state."""
        self._listeners.append(listener)
        listener(self.outage)

    def answered(self) -> None:
        """A request was answered: it is up."""
        if self.outage is None:
            return
        down_s = self._clock() - self.outage.since
        self.outage = None
        fields = {self._label: self.name, "down_s": round(down_s, 1)}
        log_event(self._log, logging.INFO, f"{self._kind} reachable again", **fields)
        self._changed()

    def down(self, cause: str) -> None:
        """A request went unanswered for `cause`: down, since now unless it was already."""
        if self.outage is not None:
            return
        self.outage = Outage(self.name, self._clock(), cause)
        log_event(self._log, logging.WARNING, f"{self._kind} unreachable", **{self._label: self.name, "error": cause})
        self._changed()

    def _changed(self) -> None:
        for listener in self._listeners:
            listener(self.outage)
