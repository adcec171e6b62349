"""Runtime settings from the environment, parsed once at start, by the config file's rules.

These are the settings a deployment sets per pod rather than per estate (a StatefulSet's shard, a port,
log format). They are read in one place (the CLI, before anything else), and a bad value is a config error
naming the variable (exit 2) instead of a default used in silence. Pure: the environment is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

from config.errors import ConfigError

LogFormat = Literal["kv", "json"]
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_METRICS_PORT = 7780

# name → what it sets (docs/configuring.md's table says the same; a test keeps them equal)
VARIABLES = {
    "LOG_LEVEL": "log level: DEBUG, INFO (default), WARNING, ERROR",
    "LOG_FORMAT": "kv (default) or json",
    "MIRROR_V3_METRICS_PORT": "port of /metrics, /healthz, /readyz and /mirrors (default 7780; 0 disables)",
    "MIRROR_V3_READINESS_LAG": "/readyz needs every mirror's lag at or below this many offsets (default: no bound)",
    "MIRROR_V3_HEARTBEAT_SECS": "seconds between DEBUG heartbeat lines (default 30; 0 disables)",
    "MIRROR_V3_DRAIN_TIMEOUT_SECS": "seconds the drain after SIGTERM may take (default 25)",
    "MIRROR_V3_SHARD": "I/N: this process mirrors shard I of N (run, plan, status, verify; --shard overrides)",
    "MIRROR_V3_JVM_CACHE": "directory of the Spark JVM's class archive that `prepare-jvm` writes and every start "
    "maps (default ~/.cache/mirror-v3/jvm; off: none)",
}
DEFAULT_JVM_CACHE = "~/.cache/mirror-v3/jvm"


@dataclass(frozen=True)
class RuntimeSettings:
    log_level: str = "INFO"
    log_format: LogFormat = "kv"
    metrics_port: int = DEFAULT_METRICS_PORT  # 0: no HTTP endpoint
    readiness_lag: float | None = None
    heartbeat_secs: float = 30.0
    drain_timeout_secs: float = 25.0
    shard: str | None = None  # as written; config.estate.Shard.parse checks it, naming MIRROR_V3_SHARD
    jvm_cache: str | None = DEFAULT_JVM_CACHE  # as written (~ not expanded); None: no class archive


def parse_runtime(env: Mapping[str, str]) -> RuntimeSettings:
    """The settings `env` gives (unset or empty: the default). Raises ConfigError naming the variable."""

    def given(name: str) -> str | None:
        value = env.get(name, "").strip()
        return value or None

    defaults = RuntimeSettings()
    level = (given("LOG_LEVEL") or defaults.log_level).upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LOG_LEVELS:
        raise ConfigError("LOG_LEVEL", f"{env['LOG_LEVEL']!r} is not a log level: use {', '.join(LOG_LEVELS)}")
    log_format = (given("LOG_FORMAT") or defaults.log_format).lower()
    if log_format not in ("kv", "json"):
        raise ConfigError("LOG_FORMAT", f"{env['LOG_FORMAT']!r} is not a log format: use kv or json")
    port_text = given("MIRROR_V3_METRICS_PORT")
    port = defaults.metrics_port if port_text is None else _port(port_text)
    lag_text = given("MIRROR_V3_READINESS_LAG")
    return RuntimeSettings(
        log_level=level,
        log_format="json" if log_format == "json" else "kv",
        metrics_port=port,
        readiness_lag=None if lag_text is None else _seconds_or_count("MIRROR_V3_READINESS_LAG", lag_text, "offsets"),
        heartbeat_secs=_optional("MIRROR_V3_HEARTBEAT_SECS", given, defaults.heartbeat_secs),
        drain_timeout_secs=_optional("MIRROR_V3_DRAIN_TIMEOUT_SECS", given, defaults.drain_timeout_secs),
        shard=given("MIRROR_V3_SHARD"),
        jvm_cache=jvm_cache_dir(given("MIRROR_V3_JVM_CACHE")),
    )


def jvm_cache_dir(text: str | None) -> str | None:
    """The class archives' directory $MIRROR_V3_JVM_CACHE names (None: off); ConfigError when it is not absolute."""
    if text is None:
        return DEFAULT_JVM_CACHE
    if text.lower() == "off":
        return None
    if not text.startswith(("/", "~")):
        raise ConfigError("MIRROR_V3_JVM_CACHE", f"{text!r} is not an absolute directory (or off)")
    return text


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise ConfigError("MIRROR_V3_METRICS_PORT", f"{text!r} is not a port number (0-65535; 0 disables)")
    return int(text)


def _optional(name: str, given: Callable[[str], str | None], default: float) -> float:
    text = given(name)
    return default if text is None else _seconds_or_count(name, text, "seconds")


def _seconds_or_count(name: str, text: str, unit: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(name, f"{text!r} is not a number of {unit} (0 or more)")
    return value
