"""Is a mirror held at the source's last stable offset by an open transaction, and since when?

A read_committed reader may not pass the last stable offset (LSO): the first offset of the oldest
transaction still open. While that transaction stays open, a mirror that has copied everything up to
the LSO shows lag 0 against the LSO although records sit behind it up to the high watermark. A stuck
or crashed transactional producer then looks exactly like a healthy, caught-up mirror; this tells the two
apart.

The hold starts when the LSO is first seen at its current value below the high watermark (the transaction
has been open at least that long) and is reported while the mirror's position has reached the LSO. Pure:
the caller passes the time in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class TransactionHold:
    _stuck_at: int | None = None  # the LSO value seen below the high watermark
    _since: float | None = None  # when that LSO value was first seen so
    _held: bool = False

    def observe(self, last_stable: int, high_watermark: int, position: int, now: float) -> None:
        """One offset query's answer, and the mirror's position (next offset to copy) at the time."""
        if last_stable >= high_watermark:
            self._stuck_at = self._since = None
            self._held = False
            return
        if self._stuck_at != last_stable:
            self._stuck_at, self._since = last_stable, now
        self._held = position >= last_stable

    @property
    def since(self) -> float | None:
        """When the hold began (the caller's clock), or None when the mirror is not held."""
        return self._since if self._held else None

    def seconds(self, now: float) -> float:
        """How long the mirror has been held, 0 when it is not."""
        since = self.since
        return 0.0 if since is None else max(0.0, now - since)
