"""The files generated from the code, and the command that writes them: `python -m tools.generated`.

Each is rendered by the module that owns its facts (the config structs, the status and verify documents); this
module only knows where each one is committed. `tests/test_generated.py` fails when a committed file differs from
what its renderer gives, so a change to the code and its generated files land together.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from commands import restore_verify, status, verify
from config import reference, restore, schema
from core import logs
from tools import helm_values

REPO = Path(__file__).resolve().parent.parent
COMMAND = "python -m tools.generated"


@dataclass(frozen=True)
class Generated:
    path: Path
    render: Callable[[], str]


CONFIG_SCHEMA = Generated(REPO / "schemas" / "mirror-v3.config.schema.json", schema.render)
RESTORE_SCHEMA = Generated(REPO / "schemas" / "mirror-v3.restore.schema.json", restore.restore_schema)
STATUS_SCHEMA = Generated(REPO / "schemas" / "mirror-v3.status.schema.json", status.render_schema)
VERIFY_SCHEMA = Generated(REPO / "schemas" / "mirror-v3.verify.schema.json", verify.render_schema)
RESTORE_VERIFY_SCHEMA = Generated(
    REPO / "schemas" / "mirror-v3.verify-restore.schema.json", restore_verify.render_schema
)
CONFIG_REFERENCE = Generated(REPO / "docs" / "configuration.md", reference.render)
LOG_LINE_SCHEMA = Generated(REPO / "schemas" / "mirror-v3.log-line.schema.json", logs.log_line_schema)
HELM_VALUES_SCHEMA = Generated(REPO / "deploy" / "helm" / "mirror-v3" / "values.schema.json", helm_values.render)
GENERATED = (
    CONFIG_SCHEMA,
    RESTORE_SCHEMA,
    STATUS_SCHEMA,
    VERIFY_SCHEMA,
    RESTORE_VERIFY_SCHEMA,
    CONFIG_REFERENCE,
    LOG_LINE_SCHEMA,
    HELM_VALUES_SCHEMA,
)


def main() -> int:
    for generated in GENERATED:
        text = generated.render()
        if not generated.path.exists() or generated.path.read_text(encoding="utf-8") != text:
            generated.path.write_text(text, encoding="utf-8")
            print(f"wrote {generated.path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
