"""User-facing failures and the process exit codes (documented in the README)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1  # a mirror failed (destination, source, data loss, ...); details on the ERROR line
EXIT_CONFIG = 2  # the config file is invalid, or the command line is
EXIT_ENVIRONMENT = 3  # the runtime is incomplete (missing jars, Spark cannot start)
EXIT_SECOND_SIGNAL = 130  # a second SIGINT/SIGTERM during the graceful drain


class MirrorError(Exception):
    """A mirror cannot continue; the message is one operator-readable line."""


class SourceError(MirrorError):
    """The source cluster is unreachable or does not have the topic/partition."""


class SourceUnavailableError(SourceError):
    """The source cluster did not answer (refused, timed out, no leader): may pass, as a broker restart does."""


class DataLossError(MirrorError):
    """Records the destination still needs are gone from the source."""
