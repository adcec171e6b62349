"""Config files read from disk: their text (a ConfigError naming the file when it cannot be read), parsed by
config/ with librdkafka's check of the `client-properties` maps."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from config.errors import ConfigError
from config.loader import parse_config
from config.model import Config
from config.restore import RestoreConfig, parse_restore_config
from kafka_clients.property_check import librdkafka_refusal


def load_config(path: str | os.PathLike[str]) -> Config:
    return parse_config(read_config_text(path), source=str(Path(path)), library_check=librdkafka_refusal)


def read_config_text(path: str | os.PathLike[str]) -> str:
    """The file's text; ConfigError naming the file when it cannot be read."""
    file = Path(path)
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(str(file), "config file not found") from None
    except IsADirectoryError:
        raise ConfigError(str(file), "is a directory, not a config file") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(file), f"not UTF-8 text (invalid byte at offset {exc.start})") from None
    except OSError as exc:
        raise ConfigError(str(file), f"cannot read config file: {exc.strerror or exc}") from None


def load_restore_config(path: str | os.PathLike[str]) -> RestoreConfig:
    return parse_restore_config(read_config_text(path), source=str(Path(path)), library_check=librdkafka_refusal)


def is_restore_config(path: str | os.PathLike[str]) -> bool:
    """Whether the file is a restore config (its top level names `archive` and `restore`), which `verify` checks
    against the archive instead of a source. ConfigError when it cannot be read."""
    try:
        document = yaml.safe_load(read_config_text(path))
    except yaml.YAMLError:
        return False  # the loader names the syntax error
    return isinstance(document, dict) and "archive" in document and "restore" in document
