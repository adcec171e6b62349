"""Runtime settings from the environment: defaults when unset, one error naming the variable when wrong."""

from __future__ import annotations

import pytest

from config import ConfigError
from config.runtime import DEFAULT_JVM_CACHE, DEFAULT_METRICS_PORT, RuntimeSettings, parse_runtime


def test_unset_or_empty_variables_give_the_defaults() -> None:
    assert parse_runtime({}) == RuntimeSettings()
    assert parse_runtime({"LOG_LEVEL": "", "MIRROR_V3_METRICS_PORT": " "}).metrics_port == DEFAULT_METRICS_PORT


def test_every_variable_is_read() -> None:
    settings = parse_runtime(
        {
            "LOG_LEVEL": "debug",
            "LOG_FORMAT": "JSON",
            "MIRROR_V3_METRICS_PORT": "0",
            "MIRROR_V3_READINESS_LAG": "1000",
            "MIRROR_V3_HEARTBEAT_SECS": "0.2",
            "MIRROR_V3_DRAIN_TIMEOUT_SECS": "40",
            "MIRROR_V3_SHARD": "1/3",
        }
    )
    assert settings == RuntimeSettings("DEBUG", "json", 0, 1000.0, 0.2, 40.0, "1/3")
    assert parse_runtime({"LOG_LEVEL": "warn"}).log_level == "WARNING"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("LOG_LEVEL", "loud", "is not a log level"),
        ("LOG_FORMAT", "xml", "is not a log format"),
        ("MIRROR_V3_METRICS_PORT", "http", "is not a port number"),
        ("MIRROR_V3_METRICS_PORT", "70000", "is not a port number"),
        ("MIRROR_V3_READINESS_LAG", "lots", "is not a number of offsets"),
        ("MIRROR_V3_HEARTBEAT_SECS", "-1", "is not a number of seconds"),
        ("MIRROR_V3_DRAIN_TIMEOUT_SECS", "nan", "is not a number of seconds"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable(name: str, value: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_runtime({name: value})
    assert str(caught.value).startswith(f"{name}: {value!r} {says}"), caught.value


def test_the_configuring_page_lists_every_variable() -> None:
    from pathlib import Path

    from config.runtime import VARIABLES

    readme = (Path(__file__).resolve().parent.parent / "docs" / "configuring.md").read_text(encoding="utf-8")
    for name, text in VARIABLES.items():
        assert f"| `{name}` | {text} |" in readme, name


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, DEFAULT_JVM_CACHE), ("off", None), ("OFF", None), ("/var/cache/jvm", "/var/cache/jvm")],
)
def test_the_cache_directory_comes_from_the_environment(value: str | None, expected: str | None) -> None:
    env = {} if value is None else {"MIRROR_V3_JVM_CACHE": value}
    assert parse_runtime(env).jvm_cache == expected


def test_a_relative_cache_directory_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_runtime({"MIRROR_V3_JVM_CACHE": "cache/jvm"})
    assert caught.value.where == "MIRROR_V3_JVM_CACHE"
