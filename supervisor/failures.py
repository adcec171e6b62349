"""What a failed mirror's restart policy may do about it (`on-mirror-failure: restart`).

A mirror that failed for a reason another attempt can cure (an unreachable broker or store, retries
exhausted, a Spark job that broke) is restarted with capped exponential backoff; its position comes from
the destination again, so a restart can neither lose nor repeat a record. A failure that says the data or
the ownership is wrong is never retried: restarting would only repeat it, or, worse, fight another
writer. Those stop the mirror for good and are reported.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass

from core.describe import describe_error
from core.errors import DataLossError
from core.logs import log_exception_event
from core.retry import RetryPolicy
from sinks.base import FencedError
from sinks.blob.chain import BlobExistsError, CorruptChainError
from sinks.kafka.produce import DestinationMovedError, PreserveHoleError
from sinks.s3.errors import PreconditionFailed
from source.range_reader import OffsetsDeletedError

log = logging.getLogger("mirror_v3.supervisor")

# Facts about the data or the destination's owner: corrupt chain, lost records, a hole preserve mode cannot write,
# a second writer (fenced producers included), a destination moved under the mirror.
PERMANENT_ERRORS = (
    CorruptChainError,
    BlobExistsError,
    PreconditionFailed,
    DataLossError,
    OffsetsDeletedError,
    FencedError,
    PreserveHoleError,
    DestinationMovedError,
)


def is_permanent(exc: BaseException) -> bool:
    """Whether another attempt would meet the same facts."""
    return isinstance(exc, PERMANENT_ERRORS)


@dataclass(frozen=True)
class RestartPolicy:
    """Capped exponential backoff between restarts of one mirror, jittered so many failed mirrors do not
    restart in step; `healthy_after_s` of running resets it."""

    initial_s: float = 1.0
    max_s: float = 60.0
    multiplier: float = 2.0
    healthy_after_s: float = 300.0

    def delay(self, restart: int, rng: random.Random) -> float:
        """Delay before restart number `restart` (1-based)."""
        return RetryPolicy(self.initial_s, self.max_s, multiplier=self.multiplier).backoff(restart, rng)


@dataclass(frozen=True)
class Collapse:
    """End the process: one failed mirror collapses it (`on-mirror-failure: exit`, or a drain under way); the
    orchestrator restarts it and every mirror finds its position in its destination again."""


@dataclass(frozen=True)
class StopForGood:
    """Keep the process, stop this mirror and report it: another attempt would meet the same facts."""


@dataclass(frozen=True)
class Restart:
    """Run the mirror again after `delay_s`; `restart` counts this mirror's restarts since it last ran healthily."""

    restart: int
    delay_s: float


def after_failure(
    exc: BaseException,
    *,
    on_mirror_failure: str,
    stopping: bool,
    restarts_before: int,
    ran_for_s: float,
    policy: RestartPolicy,
    rng: random.Random,
) -> Collapse | StopForGood | Restart:
    """What the supervisor does about a mirror that failed with `exc` after running `ran_for_s` (pure: the caller
    measures the time and owns the randomness). A mirror that ran `healthy_after_s` before failing starts its
    backoff over."""
    if on_mirror_failure == "exit" or stopping:
        return Collapse()
    if is_permanent(exc):
        return StopForGood()
    restart = 1 if ran_for_s > policy.healthy_after_s else restarts_before + 1
    return Restart(restart, policy.delay(restart, rng))


class FirstFailure:
    """The process's first failure: its cause, and so its exit code (`core.errors.exit_code_for`), reported as one
    ERROR line; the failures after it are its consequences and say nothing more."""

    def __init__(self) -> None:
        self.cause: BaseException | None = None

    def record(self, mirror: str | None, exc: BaseException, message: str = "mirror failed", **fields: object) -> None:
        if self.cause is not None:
            return
        self.cause = exc
        if mirror is not None:
            fields = {"mirror": mirror, **fields}
        # Its traceback goes with it: in a JSON line's exc_info, in a key=value line at DEBUG (else one line).
        log_exception_event(log, logging.ERROR, message, exc, **fields, error=describe_error(exc))
