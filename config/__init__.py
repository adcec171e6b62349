"""Configuration: msgspec structs, YAML loading with ${ENV} substitution, cross-field checks."""

from config.errors import ConfigError
from config.loader import parse_config
from config.model import Config, FilesystemDestination, FlushConfig, MirrorConfig, SourceConfig, SparkConfig

__all__ = [
    "Config",
    "ConfigError",
    "FilesystemDestination",
    "FlushConfig",
    "MirrorConfig",
    "SourceConfig",
    "SparkConfig",
    "parse_config",
]
