"""The installed `mirror-v3` command is the CLI, both entry points say which version they are, and that version lives
in one place (pyproject.toml), named by the newest release of CHANGELOG.md."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_the_mirror_v3_command_and_python_m_supervisor_print_the_installed_version() -> None:
    command = Path(sys.executable).parent / "mirror-v3"  # scripts/setup.sh installs the package into this venv
    expected = f"mirror-v3 {version('mirror-v3')}"
    for argv in ([str(command), "--version"], [sys.executable, "-m", "supervisor", "--version"]):
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert (done.returncode, done.stdout.strip()) == (0, expected), done.stderr
    usage = subprocess.run([str(command)], cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: mirror-v3 "), usage.stderr


def test_the_version_lives_in_pyproject_and_the_changelog_names_it() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert version("mirror-v3") == declared, "the installed metadata is stale: run scripts/setup.sh again"
    released = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert released and released[0] == declared, "the newest release in CHANGELOG.md is not pyproject's version"
