"""The contract between a mirror's actor and its destination.

The actor decides which source ranges become which destination writes; Spark tasks read them and
write them with the sink's `target()` (`sinks.write_target`): blobs staged for the sink to commit, or (the
Kafka destination) records produced by the task itself. The sink commits each write the tasks report, in
offset order, and on start tells the actor where the destination ends. Sinks know nothing of flush policy,
metrics or signals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from core.errors import MirrorV3Error
from sinks.write_target import WriteTarget, Written

W = TypeVar("W", bound=Written)


class DestinationError(MirrorV3Error):
    """The destination is unusable as found (corrupt chain, foreign writer, misaligned offsets)."""


class FencedError(DestinationError):
    """A newer producer took this destination partition over: another process runs this mirror. `owner` is that
    process's id where the owner group (`owner_group`) named it; otherwise the broker fenced `transactional_id`."""

    def __init__(
        self, destination: str, transactional_id: str, owner: int | None = None, owner_group: str | None = None
    ) -> None:
        self.destination, self.transactional_id = destination, transactional_id
        self.owner, self.owner_group = owner, owner_group
        if owner is None:
            by = f"a newer producer with transactional.id {transactional_id}"
        else:
            by = f"a newer producer: process {owner} took this partition over (group {owner_group})"
        super().__init__(f"{destination}: fenced by {by}: another process runs this mirror")


@dataclass(frozen=True)
class Inspection:
    """What a read-only look at the destination found (for `status`)."""

    next_offset: int | None  # None: the destination holds nothing for this partition yet
    last_write: float | None = None  # Unix time of the newest durable write, where the destination records it


@dataclass(frozen=True)
class Committed:
    """What a durable write produced: where it went and how many bytes it took."""

    location: str
    bytes_written: int


class Sink(Protocol[W]):
    """A destination partition as the actor's driver side sees it. `W` is what its tasks report of a write (a
    staged blob, a produced range): only the sink that handed out the target commits what it wrote."""

    @property
    def description(self) -> str:
        """Human-readable destination, free of secrets (for logs and status)."""
        ...

    async def open(self) -> int | None:
        """Inspect the destination and return the next source offset it expects.

        None means the destination holds nothing for this partition yet. Raises DestinationError
        when what is there cannot be continued safely.
        """
        ...

    def claimed_range(self) -> tuple[int, int] | None:
        """After open(): the inclusive offset range the next commit must cover exactly, as one write,
        because a writer that was interrupted claimed it at the destination; None when the next write
        is free to choose its end."""
        ...

    async def inspect(self, deep: bool = False) -> Inspection:
        """Like open(), but read-only (for `status`): changes nothing at the destination. `deep`
        validates the whole destination instead of its tail."""
        ...

    def target(self) -> WriteTarget[W]:
        """How Spark tasks write a range for this sink (called per job: a target may carry the
        position the sink expects)."""
        ...

    async def commit(self, item: W) -> Committed:
        """Make a staged blob durable and visible (or record a range the task produced). Its first
        offset is always the offset open()/the previous commit left as next. Either all of it is
        durable afterwards or an exception is raised and nothing of it is visible."""
        ...

    async def discard(self, item: W) -> None:
        """Drop a staged write that will not be committed (best effort; never raises)."""
        ...

    async def close(self) -> None: ...
