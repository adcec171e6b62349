"""The JSON Schema of the config, from its structs (written to schemas/ by `python -m tools.generated`)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from config.deprecated_keys import DEPRECATED_KEYS, Renamed
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
    # The keys of earlier releases load (with a WARN): the schema takes them too, marked deprecated.
    for struct, changes in DEPRECATED_KEYS.items():
        properties = schema["$defs"][struct.__name__]["properties"]
        for change in changes:
            if isinstance(change, Renamed):
                old = {key: value for key, value in properties[change.new].items() if key != "default"}
                properties[change.old] = {**old, "description": f"Deprecated: the old name of `{change.new}`."}
                properties[change.old]["deprecated"] = True
            else:
                properties[change.key] = {"deprecated": True, "description": f"Retired, ignored: {change.why}."}
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mirror-v3 configuration"
    return schema


def render() -> str:
    return json.dumps(config_schema(), indent=2, sort_keys=True) + "\n"
