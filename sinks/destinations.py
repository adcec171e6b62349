"""The one place that looks at the configured destination's kind (outside `config/`): everything above calls
through the `Destination` it returns. A new kind is a package under `sinks/` and one line here.

A kind's package is imported when it is chosen: every command's process would otherwise load every kind's clients
(S3's aiobotocore and aiohttp alone, 0.4 s of CPU at each start of a command, measured)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from config.model import Destination as DestinationConfig
from config.model import FilesystemDestination as FilesystemConfig
from config.model import KafkaDestination as KafkaConfig
from config.model import S3Destination as S3Config
from sinks.destination import Destination, SourceRegistries
from sinks.leases import Holder

if TYPE_CHECKING:
    from sinks.kafka.destination import SourceLookups


def open_destination(
    config: DestinationConfig,
    *,
    holder: Holder | None = None,
    source_lookups: SourceLookups | None = None,
    source_registries: SourceRegistries | None = None,
) -> Destination:
    """The destination `config` describes. Nothing is reached yet. `holder`: the writing process (`run`), whose
    sinks take their chains' leases; `source_lookups` (a Kafka destination's sinks check preserve alignment with
    the source) and `source_registries` (mirrors with `schemas`): the caller's access to the sources."""
    match config:
        case FilesystemConfig():
            from sinks.filesystem.destination import FilesystemDestination

            return FilesystemDestination(config, holder, source_registries)
        case S3Config():
            from sinks.s3.destination import S3Destination

            return S3Destination(config, holder, source_registries)
        case KafkaConfig():
            from sinks.kafka.destination import KafkaDestination

            return KafkaDestination(config, holder, source_lookups, source_registries)
    raise TypeError(f"unsupported destination {type(config).__name__}")  # pragma: no cover - the union is exhaustive
