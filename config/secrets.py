"""Secrets a config names by environment variable (`password-env`, `secret-access-key-env`, ...), resolved where a
client is built, with the one error for what a config refers to and cannot be used (a variable, a file)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from config.errors import ConfigError
from core.secrets import remember


class ConfigReferenceError(ConfigError):
    """A secret or file the config refers to cannot be used: `field` is the config path of the key naming it."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        super().__init__(field, problem)


class MissingSecretError(ConfigReferenceError):
    """The environment variable `variable` that `field` names is not set, or empty."""

    def __init__(self, field: str, variable: str) -> None:
        self.variable = variable
        super().__init__(field, f"environment variable {variable} is not set")


def env_secret(variable: str, field: str, env: Mapping[str, str] | None = None) -> str:
    """The value of `variable`, remembered so that no log line shows it; an unset or empty variable is an error
    naming `field`."""
    value = (os.environ if env is None else env).get(variable)
    if not value:
        raise MissingSecretError(field, variable)
    return remember(value)
