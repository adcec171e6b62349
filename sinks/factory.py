"""Build the sink a mirror writes to from the shared destination block."""

from __future__ import annotations

from config.model import Destination, FilesystemDestination, MirrorConfig
from sinks.base import Sink
from sinks.filesystem import filesystem_sink


def build_sink(destination: Destination, mirror: MirrorConfig) -> Sink:
    if isinstance(destination, FilesystemDestination):
        return filesystem_sink(destination, mirror.destination_name, mirror.partition)
    raise TypeError(f"unsupported destination {type(destination).__name__}")
