"""Renamed config keys keep working with a WARN naming the new key; retired ones are ignored with a WARN."""

from __future__ import annotations

import logging

import msgspec
import pytest

from config import ConfigError, parse_config
from config.deprecated_keys import DEPRECATED_KEYS, Renamed, Retired
from config.model import S3Destination, SparkConfig
from tests.test_config import config_text, set_in


def test_the_deprecated_keys() -> None:
    """Every old key of every release, and each new name exists (this list is what docs/configuration.md's table
    shows)."""
    listed = {
        struct.__name__: [(c.old, c.new) if isinstance(c, Renamed) else (c.key, None) for c in changes]
        for struct, changes in DEPRECATED_KEYS.items()
    }
    assert listed == {
        "SparkConfig": [("max-offsets-per-read", "max-offsets-per-job"), ("max-bytes-per-read", "max-bytes-per-job")],
        "S3Destination": [("multipart-threshold-bytes", None)],
    }
    for struct, changes in DEPRECATED_KEYS.items():
        fields = {field.encode_name for field in msgspec.structs.fields(struct)}
        for change in changes:
            old = change.old if isinstance(change, Renamed) else change.key
            assert old not in fields, f"{struct.__name__}.{old} is a current key"
            if isinstance(change, Renamed):
                assert change.new in fields, f"{struct.__name__}.{change.new} does not exist"


def warnings(caplog: pytest.LogCaptureFixture) -> list[tuple[str, dict[str, object]]]:
    return [
        (record.getMessage(), getattr(record, "mirror_v3_fields", {}))
        for record in caplog.records
        if record.levelno == logging.WARNING
    ]


def test_a_renamed_key_still_works_with_one_warn_naming_the_new_key(caplog: pytest.LogCaptureFixture) -> None:
    text = config_text(set_in("spark", "max-offsets-per-read", value=12_345))
    config = parse_config(text)
    assert config.spark.max_offsets_per_job == 12_345
    line = text.splitlines().index("  max-offsets-per-read: 12345") + 1
    assert warnings(caplog) == [
        (
            "deprecated config key",
            {"key": "spark.max-offsets-per-read", "use": "spark.max-offsets-per-job", "line": line},
        )
    ]
    assert config.spark == SparkConfig(max_offsets_per_job=12_345)


def test_an_old_and_a_new_name_together_are_refused() -> None:
    text = config_text(lambda data: data.update(spark={"max-bytes-per-read": 1 << 20, "max-bytes-per-job": 1 << 21}))
    with pytest.raises(ConfigError) as refused:
        parse_config(text)
    assert str(refused.value).startswith("spark.max-bytes-per-read: the old name of `max-bytes-per-job`")


def test_a_retired_key_is_ignored_with_a_warn_that_says_why(caplog: pytest.LogCaptureFixture) -> None:
    destination = {"type": "s3", "bucket": "b", "multipart-threshold-bytes": 8 << 20}
    config = parse_config(config_text(lambda data: data.update(destination=destination)))
    assert isinstance(config.destination, S3Destination)
    [(message, fields)] = warnings(caplog)
    assert message == "retired config key ignored" and fields["key"] == "destination.multipart-threshold-bytes"
    assert "part-size-bytes" in str(fields["why"])
    # Only in the struct it was retired from: on a filesystem destination the key is unknown.
    with pytest.raises(ConfigError, match="multipart-threshold-bytes"):
        parse_config(config_text(set_in("destination", "multipart-threshold-bytes", value=1)))


def test_retired_keys_name_why() -> None:
    assert all(
        isinstance(c, Renamed) or (isinstance(c, Retired) and c.why) for cs in DEPRECATED_KEYS.values() for c in cs
    )
