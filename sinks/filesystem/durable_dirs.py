"""Directories whose entries survive a crash: what every file the filesystem destination writes (blobs, leases,
archive documents) relies on once it is renamed into place."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def make_durable_dirs(directory: Path) -> None:
    """Create the partition directory and fsync the parent of every level created, so the first
    blob's directory entry survives a crash too."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir()
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
