"""Configuration keys that were renamed or retired: a configuration written for an earlier release keeps
loading, and each old key costs one WARN that says what to write instead.

The loader applies these before decoding (`config/loader.py`), so the rest of the code knows only the current
names. A renamed key given together with its new name is refused: which one was meant cannot be told.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from config.model import S3Destination, SparkConfig


@dataclass(frozen=True)
class Renamed:
    old: str
    new: str


@dataclass(frozen=True)
class Retired:
    """A key that no longer means anything: accepted and ignored."""

    key: str
    why: str


DEPRECATED_KEYS: dict[type[msgspec.Struct], tuple[Renamed | Retired, ...]] = {
    # One Spark job per flush used to be one read; the limits now bound a job of several partitions' reads.
    SparkConfig: (
        Renamed("max-offsets-per-read", "max-offsets-per-job"),
        Renamed("max-bytes-per-read", "max-bytes-per-job"),
    ),
    S3Destination: (
        Retired("multipart-threshold-bytes", "every blob is staged as a multipart upload of `part-size-bytes`"),
    ),
}
