"""The one place that looks at the configured destination's kind (outside `config/`): everything above calls
through the `Destination` it returns. A new kind is a package under `sinks/` and one line here."""

from __future__ import annotations

from config.model import Destination as DestinationConfig
from config.model import FilesystemDestination as FilesystemConfig
from config.model import KafkaDestination as KafkaConfig
from config.model import S3Destination as S3Config
from sinks.destination import Destination, SourceRegistries
from sinks.filesystem.destination import FilesystemDestination
from sinks.kafka.destination import KafkaDestination, SourceLookups
from sinks.leases import Holder
from sinks.s3.destination import S3Destination


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
            return FilesystemDestination(config, holder, source_registries)
        case S3Config():
            return S3Destination(config, holder, source_registries)
        case KafkaConfig():
            return KafkaDestination(config, holder, source_lookups, source_registries)
    raise TypeError(f"unsupported destination {type(config).__name__}")  # pragma: no cover - the union is exhaustive
