"""The Helm chart's `values.schema.json`: Helm checks every install, upgrade, template and lint against it, so a bad
value (`--set config.destination.type=bogus`, `shards: 0`, a misspelt key) fails before anything reaches the
cluster instead of a pod exiting 2 later. `config` is checked with the config's own JSON Schema
(config.schema.config_schema), the chart's other values as values.yaml describes them. Helm 3 reads JSON Schema
draft 7, so the config's `$defs` sit at the root, where its `$ref`s point."""

from __future__ import annotations

import json
from typing import Any

from config.runtime import LOG_LEVELS
from config.schema import config_schema

STRING: dict[str, Any] = {"type": "string"}
BOOLEAN: dict[str, Any] = {"type": "boolean"}
PORT: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 65535}
PORTS: dict[str, Any] = {"type": "array", "items": PORT}
STRING_MAP: dict[str, Any] = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT: dict[str, Any] = {"type": "object"}  # passed to Kubernetes as written: its own schemas check it
OBJECTS: dict[str, Any] = {"type": "array", "items": OBJECT}


def _values(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """An object of exactly these keys (a misspelt one is an error, as in the config)."""
    block: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if description:
        block["description"] = description
    return block


def values_schema() -> dict[str, Any]:
    config = config_schema()
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "mirror-v3 Helm chart values",
        "$defs": config["$defs"],
        **_values(
            {
                "global": OBJECT,  # what a parent chart passes down
                "image": _values(
                    {
                        "repository": {**STRING, "minLength": 1},
                        "tag": STRING,
                        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    }
                ),
                "shards": {"type": "integer", "minimum": 1, "description": "1: a Deployment; N: a StatefulSet of N"},
                "config": {"$ref": config["$ref"], "description": "The mirror's config, as `validate` reads it."},
                "secretName": STRING,
                "logLevel": {"enum": list(LOG_LEVELS)},
                "logFormat": {"enum": ["kv", "json"]},
                "readinessLag": {"type": ["integer", "null"], "minimum": 0},
                "metricsPort": PORT,
                "terminationGracePeriodSeconds": {"type": "integer", "minimum": 0},
                "resources": OBJECT,
                "scratchSizeLimit": {"type": ["string", "integer"]},
                "serviceAccount": _values({"create": BOOLEAN, "name": STRING, "annotations": STRING_MAP}),
                "podAnnotations": STRING_MAP,
                "podLabels": STRING_MAP,
                "nodeSelector": STRING_MAP,
                "tolerations": OBJECTS,
                "affinity": OBJECT,
                "extraEnv": OBJECTS,
                "extraVolumes": OBJECTS,
                "extraVolumeMounts": OBJECTS,
                "networkPolicy": _values(
                    {
                        "enabled": BOOLEAN,
                        "kafkaPorts": PORTS,
                        "httpsPorts": PORTS,
                        "schemaRegistryPorts": PORTS,
                        "objectStorePorts": PORTS,
                        "sparkPorts": PORTS,
                        "sparkDriverPorts": PORTS,
                        "extraEgress": OBJECTS,
                    }
                ),
                "podDisruptionBudget": _values({"enabled": BOOLEAN, "maxUnavailable": {"type": ["integer", "string"]}}),
                "podMonitor": _values({"enabled": BOOLEAN, "interval": STRING, "labels": STRING_MAP}),
                "prometheusRule": _values({"enabled": BOOLEAN, "labels": STRING_MAP}),
            }
        ),
    }


def render() -> str:
    return json.dumps(values_schema(), indent=2, sort_keys=True) + "\n"
