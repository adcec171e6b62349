"""Command-line tools the tests use beside the services: where `scripts/setup.sh` put them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def promtool() -> str:
    """Path of promtool (Prometheus' linter); setup.sh takes it from Debian's prometheus package."""
    tools = Path(os.environ.get("MIRROR_V3_TOOLS_DIR") or Path.home() / ".cache/mirror-v3/bin")
    found = tools / "promtool"
    if found.is_file():
        return str(found)
    on_path = shutil.which("promtool")
    if on_path is None:
        raise FileNotFoundError(f"promtool not found in {tools} or on PATH: run scripts/setup.sh")
    return on_path
