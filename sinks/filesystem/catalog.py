"""Which chains a filesystem archive holds: the names and partitions mirror-v3 wrote under its root
(`<root>/<name>/<partition>/<blobs>`). Blocking (run it in a thread): one listing of the root and one per name."""

from __future__ import annotations

from pathlib import Path

from sinks.base import DestinationError


def filesystem_chains(base: Path) -> dict[str, list[int]]:
    """{name: partitions} under a filesystem archive's root (resolved)."""
    try:
        names = sorted(entry for entry in base.iterdir() if entry.is_dir())
    except OSError as exc:
        raise DestinationError(f"archive {base}: cannot be listed: {exc.strerror or exc}") from None
    found: dict[str, list[int]] = {}
    for entry in names:
        partitions = sorted(int(p.name) for p in entry.iterdir() if p.is_dir() and p.name.isdigit())
        if partitions:
            found[entry.name] = partitions
    return found
