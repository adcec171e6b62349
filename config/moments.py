"""Moments and ages as the command line gives them (`--as-of`, `--before`, `--older-than`)."""

from __future__ import annotations

import re
from datetime import datetime

from config.errors import ConfigError

_AGE = re.compile(r"^(\d+)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_moment(text: str, flag: str) -> int:
    """Milliseconds since the epoch, or an RFC 3339 time with its zone; ConfigError naming `flag` otherwise."""
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ConfigError((flag,), f"{text!r} is not a time: give milliseconds since the epoch or RFC 3339 with a zone")
    return int(moment.timestamp() * 1000)


def parse_age(text: str, flag: str) -> int:
    """An age such as `30d`, `12h`, `90m`, `45s` or `500ms`, in milliseconds; ConfigError naming `flag` otherwise."""
    match = _AGE.match(text.strip())
    if match is None:
        raise ConfigError((flag,), f"{text!r} is not an age: give a number and a unit (ms, s, m, h, d), e.g. 30d")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]
