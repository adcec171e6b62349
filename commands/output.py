"""How the commands print (`plan`, `status`, `verify`): padded plain-text tables, and the JSON Schema of each
`--format json` document. Pure; no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec


def about(text: str) -> Any:
    """A field's description in an output document's schema."""
    return msgspec.Meta(description=text)


def table_lines(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Header and rows, each column padded to its widest cell, two spaces apart, no trailing blanks."""
    widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in [headers, *rows]]


def document_schema(document: type, title: str) -> dict[str, Any]:
    """The JSON Schema of an output document. Every key is always present (null when unknown), so consumers never
    test for absence: every property is required."""
    schema: dict[str, Any] = msgspec.json.schema(document)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = title
    for definition in schema.get("$defs", {}).values():
        definition["required"] = sorted(definition.get("properties", {}))
    return schema
