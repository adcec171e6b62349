"""Whether the destination answers, seen from the mirrors' retry spells (SPEC §5's retries, `sinks.retry`).

The destination is *down* from the first write any mirror had to retry until no mirror is retrying any more.
Writes are per partition (a Kafka destination's partitions have their own leaders, an S3 prefix its own
throttling), so one mirror's success does not prove the others': counting the mirrors in a spell, rather than
flipping on every outcome as a source cluster's single estate-wide poll may, keeps one slow partition among
hundreds from turning the state (and its WARN and INFO lines) over at every commit.

An operator sees a WARN at the start of an outage (the first failure's words), an INFO with how long it lasted
when the last mirror recovers, and the listeners' gauge and readiness. No I/O; the clock is injectable.
Cost: a dict operation per retry and per spell's end; nothing per healthy write.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from core.logs import log_event

log = logging.getLogger("mirror_v3.destination")


@dataclass(frozen=True)
class DestinationOutage:
    """A spell of the destination failing writes: since when (monotonic), the first failure's words, and how many
    mirrors are retrying now."""

    since: float
    cause: str
    retrying: int


class DestinationHealth:
    def __init__(self, location: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.location = location  # the destination as a whole (sinks.destination.Destination.where)
        self._clock = clock
        self._failing: dict[str, str] = {}  # mirror → the words of its spell's latest failure
        self._since: float | None = None
        self._cause = ""
        self._listeners: list[Callable[[DestinationOutage | None], None]] = []

    @property
    def outage(self) -> DestinationOutage | None:
        if self._since is None:
            return None
        return DestinationOutage(self._since, self._cause, len(self._failing))

    def listen(self, listener: Callable[[DestinationOutage | None], None]) -> None:
        """Call `listener` when the destination goes down or comes back; at once with the current state."""
        self._listeners.append(listener)
        listener(self.outage)

    def failing(self, mirror: str, cause: str) -> None:
        """A write of `mirror` failed transiently and will be retried."""
        self._failing[mirror] = cause
        if self._since is None:
            self._since, self._cause = self._clock(), cause
            log_event(log, logging.WARNING, "destination unreachable", destination=self.location, error=cause)
            self._changed()

    def ended(self, mirror: str, succeeded: bool) -> None:
        """`mirror`'s spell is over: its write succeeded, or it gave up or stopped (its failure, if any, is
        reported as its own). The outage ends with the last spell; "reachable again" is said only when that one
        succeeded."""
        if self._failing.pop(mirror, None) is None or self._failing or self._since is None:
            return
        down_s = self._clock() - self._since
        self._since = None
        if succeeded:
            log_event(
                log, logging.INFO, "destination reachable again", destination=self.location, down_s=round(down_s, 1)
            )
        self._changed()

    def spells(self, mirror: str) -> MirrorSpells:
        """What one mirror's sink reports its retries to (`sinks.retry.RetrySpells`)."""
        return MirrorSpells(self, mirror)

    def retrying(self, mirror: str) -> str | None:
        """Why `mirror` is retrying its destination now (None: it is not)."""
        return self._failing.get(mirror)

    def _changed(self) -> None:
        outage = self.outage
        for listener in self._listeners:
            listener(outage)


@dataclass(frozen=True)
class MirrorSpells:
    health: DestinationHealth
    mirror: str

    def failing(self, cause: str) -> None:
        self.health.failing(self.mirror, cause)

    def ended(self, succeeded: bool) -> None:
        self.health.ended(self.mirror, succeeded)
