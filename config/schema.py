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
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mirror-v3 configuration"
    return schema


def render() -> str:
    return json.dumps(config_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not SCHEMA_PATH.exists() or SCHEMA_PATH.read_text(encoding="utf-8") != text:
            print(f"{SCHEMA_PATH} is stale: run `python -m config.schema`", file=sys.stderr)
            return 1
        return 0
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
