"""How a Spark task reads a filesystem chain's blobs back: a file of the partition's directory, whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sinks.base import DestinationError


@dataclass(frozen=True)
class FilesystemBlobReader:
    directory: str

    def location(self, name: str) -> str:
        return str(Path(self.directory) / name)

    def read(self, name: str) -> bytes:
        try:
            return (Path(self.directory) / name).read_bytes()
        except OSError as exc:
            raise DestinationError(f"{self.location(name)}: cannot be read: {exc.strerror or exc}") from None
