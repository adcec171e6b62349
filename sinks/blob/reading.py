"""How Spark tasks read a chain's blobs back (`verify`, `restore`): whole, as bytes, by name. Each destination kind
that keeps blobs has its reader (`sinks.filesystem.reading`, `sinks.s3.reading`).

A blob is at most about `flush.max-bytes` compressed, so a task holds one at a time; a blob that is gone or
unreadable is a DestinationError naming it.
"""

from __future__ import annotations

from typing import Protocol


class BlobReader(Protocol):
    def location(self, name: str) -> str: ...

    def read(self, name: str) -> bytes:
        """The blob's bytes; DestinationError when it cannot be read."""
        ...
