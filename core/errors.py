"""The one family of user-facing errors, and the process exit codes (documented in docs/errors.md).

Every error an operator sees derives from `MirrorV3Error`. It carries the exit code of a command that ends with
it and the facts the sentence is built from (topic, partition, offsets, files, field paths) as attributes, so
code and tests read the facts, never parse the message. `exit_code_for` is the one place a command's exit code
is decided from an exception.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import anyio

EXIT_OK = 0
EXIT_FAILURE = 1  # a mirror failed (destination, source, data loss, ...); details on the ERROR line
EXIT_CONFIG = 2  # the config file is invalid, or the command line is
EXIT_ENVIRONMENT = 3  # the runtime is incomplete (missing jars, Spark cannot start)
EXIT_SECOND_SIGNAL = 130  # a second SIGINT/SIGTERM during the graceful drain


class MirrorV3Error(Exception):
    """A failure the operator reads: one line, no traceback.

    `exit_code`: what a command that ends with it returns. `headline`: how the CLI introduces it on stderr
    (`invalid config: ...`); None means `<command> failed: ...`.
    """

    exit_code: ClassVar[int] = EXIT_FAILURE
    headline: ClassVar[str | None] = None

    @property
    def facts(self) -> dict[str, object]:
        """The attributes the message was built from."""
        return {key: value for key, value in vars(self).items() if not key.startswith("_")}

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take facts, not the message, in __init__: copies and pickles are rebuilt without calling it.
        return (_rebuild, (type(self), self.args, dict(vars(self))))


def _rebuild(cls: type[MirrorV3Error], args: tuple[object, ...], state: dict[str, object]) -> MirrorV3Error:
    exc = cls.__new__(cls)
    exc.args = args
    vars(exc).update(state)
    return exc


def first_line(exc: BaseException, *, named: bool = False) -> str:
    """The first line of an exception's message (a multi-line message, a Java stack): what one log line or one
    error field carries. `named`: prefixed with the exception's type. No message: the type's name."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else ""
    if not line:
        return type(exc).__name__
    return f"{type(exc).__name__}: {line}" if named else line


def exit_code_for(exc: BaseException) -> int:
    """The exit code of a command that ends with `exc`: its own for the family, EXIT_FAILURE for anything else."""
    return exc.exit_code if isinstance(exc, MirrorV3Error) else EXIT_FAILURE


def cli_line(exc: MirrorV3Error, command: str) -> str:
    """The one stderr line a command ends with: `invalid config: mirrors[0].topic: ...`, `verify failed: ...`."""
    return f"{exc.headline or command + ' failed'}: {exc}"


def first_error(exc: BaseException) -> BaseException:
    """The failure itself, out of the task groups that wrapped it (a cancellation only when nothing else failed)."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    for inner in exc.exceptions:
        found = first_error(inner)
        if not isinstance(found, BaseExceptionGroup) and not isinstance(found, anyio.get_cancelled_exc_class()):
            return found
    return exc


@contextmanager
def task_group_failures_unwrapped() -> Iterator[None]:
    """Around a task group: its failure passes as itself (`first_error`), not inside the ExceptionGroup the group
    wraps it in, so callers catch the error types they know; a group of cancellations alone passes as it is."""
    try:
        yield
    except BaseExceptionGroup as group:
        failure = first_error(group)
        if failure is group:
            raise
        raise failure from None


class MirrorError(MirrorV3Error):
    """A mirror cannot continue; the message is one operator-readable line."""


class SourceError(MirrorError):
    """The source cluster is unreachable or does not have the topic/partition."""


class SourceUnavailableError(SourceError):
    """The source cluster did not answer (refused, timed out, no leader): may pass, as a broker restart does."""


class MissingSourcePartitionError(SourceError):
    """The source cluster answers but has no such topic, or no such partition of it."""

    def __init__(self, topic: str, partition: int, bootstrap_servers: str, partitions: tuple[int, ...] | None) -> None:
        self.topic, self.partition, self.bootstrap_servers = topic, partition, bootstrap_servers
        self.partitions = partitions  # None: the topic does not exist
        if partitions is None:
            super().__init__(f"source topic {topic!r} does not exist on {bootstrap_servers}")
        else:
            listed = ", ".join(str(p) for p in partitions)
            super().__init__(f"source topic {topic!r} has no partition {partition} (partitions: {listed})")


class DataLossError(MirrorError):
    """Records the destination still needs are gone from the source: offsets `lost_first`..`lost_last`."""

    def __init__(self, topic: str, partition: int, log_start: int, next_offset: int) -> None:
        self.topic, self.partition, self.log_start, self.next_offset = topic, partition, log_start, next_offset
        super().__init__(
            f"source {topic}-{partition} log start offset {log_start} is above the next offset to mirror "
            f"{next_offset}: offsets {self.lost_first}..{self.lost_last} were deleted before they were mirrored "
            "(set source.on-data-loss: skip to continue without them)"
        )

    @property
    def lost_first(self) -> int:
        return self.next_offset

    @property
    def lost_last(self) -> int:
        return self.log_start - 1


class SourceBehindDestinationError(MirrorError):
    """The source partition ends below what the destination already holds: a recreated topic or the wrong
    cluster. `source_end` is the source's offset named by `measure`; `destination_next` the destination's (or,
    with `claimed`, the end of the blob an interrupted writer claimed as the next one)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        measure: str,
        source_end: int,
        destination_next: int,
        claimed: tuple[int, int] | None = None,
    ) -> None:
        self.topic, self.partition, self.measure = topic, partition, measure
        self.source_end, self.destination_next, self.claimed = source_end, destination_next, claimed
        where = f"source {topic}-{partition} {measure} {source_end}"
        if claimed is None:
            below = f"is below the destination's next offset {destination_next}"
        else:
            below = (
                f"does not reach offsets {claimed[0]}-{claimed[1]}, claimed by an interrupted writer as the next blob"
            )
        super().__init__(f"{where} {below}: was the topic recreated, or is this the wrong cluster?")
