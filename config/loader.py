"""Load a YAML config into `Config`: ${ENV} substitution, strict decoding, cross-field checks.

Every error is a `ConfigError` whose message starts with the field path (`mirrors[3].partition: ...`)
so the CLI can print it as one line.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import msgspec
import yaml

from config.model import Config

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_MSGSPEC_PATH = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING_FIELD = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `(?P<field>[^`]+)`$")


class ConfigError(Exception):
    """A configuration problem; the message names the field path or the file."""


def load_config(path: str | os.PathLike[str]) -> Config:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{file}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read config file: {exc.strerror}") from None
    return parse_config(text, source=str(file))


def parse_config(text: str, source: str = "<config>", env: dict[str, str] | None = None) -> Config:
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{source}{where}: invalid YAML: {problem}") from None
    if raw is None:
        raise ConfigError(f"{source}: config file is empty")
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: top level must be a mapping with `destination` and `mirrors`")
    substituted = _substitute(raw, "", os.environ if env is None else env)
    try:
        config = msgspec.convert(substituted, Config)
    except msgspec.ValidationError as exc:
        raise ConfigError(_describe_validation_error(str(exc))) from None
    _check_cross_fields(config)
    return config


def _substitute(node: Any, path: str, env: Any) -> Any:
    """Replace ${VAR} / ${VAR:-default} in string values, naming the field when VAR is unset."""
    if isinstance(node, dict):
        return {k: _substitute(v, _join(path, str(k)), env) for k, v in node.items()}
    if isinstance(node, list):
        return [_substitute(v, f"{path}[{i}]", env) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        if name in env:
            return str(env[name])
        if default is not None:
            return default
        raise ConfigError(f"{path or '<root>'}: environment variable {name} is not set")

    value = _ENV_REF.sub(replace, node)
    # A value that is exactly one reference takes the YAML type of what it expands to, so
    # `partition: ${PARTITION}` is an integer, not the string "3".
    if _ENV_REF.fullmatch(node):
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if isinstance(parsed, (int, float, bool)) and not isinstance(parsed, type(None)):
            return parsed
    return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe_validation_error(message: str) -> str:
    match = _MSGSPEC_PATH.match(message)
    assert match is not None  # the pattern matches any string
    msg, path = match.group("msg"), (match.group("path") or "").lstrip(".")
    if missing := _MISSING_FIELD.match(msg):
        return f"{_join(path, missing.group('field'))}: required field is missing"
    if unknown := _UNKNOWN_FIELD.match(msg):
        return f"{_join(path, unknown.group('field'))}: unknown field"
    msg = msg.replace("`", "")
    if path.endswith(".type") or path == "type":
        msg = f"{msg}; expected one of: filesystem"
    return f"{path or '<root>'}: {msg}"


def _check_cross_fields(config: Config) -> None:
    names: dict[str, int] = {}
    destinations: dict[tuple[str, int], int] = {}
    for index, mirror in enumerate(config.mirrors):
        if mirror.name in names:
            raise ConfigError(
                f"mirrors[{index}].name: duplicate mirror name {mirror.name!r} (also mirrors[{names[mirror.name]}])"
            )
        names[mirror.name] = index
        target = (mirror.destination_name, mirror.partition)
        if target in destinations:
            other = destinations[target]
            raise ConfigError(
                f"mirrors[{index}]: writes the same destination "
                f"{mirror.destination_name}/{mirror.partition} as mirrors[{other}]; "
                "set destination-name-override on one of them"
            )
        destinations[target] = index
