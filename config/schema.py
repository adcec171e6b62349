"""Generate the JSON Schema of the config (`python -m config.schema [--check]`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec

from config.model import Config

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schemas" / "mirror-v3.config.schema.json"


def config_schema() -> dict[str, Any]:
    schema: dict[str, Any] = msgspec.json.schema(Config)
    # What msgspec cannot say about an entry's forms; the loader checks the same with field paths.
    entry = schema["$defs"]["MirrorConfig"]
    entry["dependentRequired"] = {"topic": ["partition"], "partition": ["topic"]}
    entry["allOf"] = [
        {"oneOf": [{"required": ["source"]}, {"required": ["cluster"]}]},
        {"anyOf": [{"required": ["topic"]}, {"required": ["topics"]}, {"required": ["topic-regex"]}]},
        {"not": {"required": ["topic", "topics"]}},
        {"not": {"required": ["topic", "topic-regex"]}},
    ]
    schema["$defs"]["DestinationNameRule"]["dependentRequired"] = {"regex": ["replacement"], "replacement": ["regex"]}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mirror-v3 configuration"
    return schema


def render() -> str:
    return json.dumps(config_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(SCHEMA_PATH, render(), check="--check" in argv, command="python -m config.schema")


def write_or_check(path: Path, text: str, *, check: bool, command: str) -> int:
    """Write a generated schema, or (check) exit 1 when the committed file differs from it."""
    if check:
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            print(f"{path} is stale: run `{command}`", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
