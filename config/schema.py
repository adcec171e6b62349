"""The JSON Schema of the config, from its structs (written to schemas/ by `python -m tools.generated`)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from config.model import Config


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
