"""Configuration: msgspec structs, YAML loading with ${ENV} substitution, cross-field checks.

The names below are loaded when first asked for: a Spark Python worker imports `config.model` (the settings its
task carries), and importing this package must not load the YAML loader with it (yaml, the estate rules, the
loader's own set-up: 0.09 s of CPU at every command's first job, measured).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from config.errors import ConfigError
    from config.loader import parse_config
    from config.model import Config, FilesystemDestination, FlushConfig, MirrorConfig, SourceConfig, SparkConfig

_WHERE = {
    "Config": "config.model",
    "ConfigError": "config.errors",
    "FilesystemDestination": "config.model",
    "FlushConfig": "config.model",
    "MirrorConfig": "config.model",
    "SourceConfig": "config.model",
    "SparkConfig": "config.model",
    "parse_config": "config.loader",
}

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


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'config' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
