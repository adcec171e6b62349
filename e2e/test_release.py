"""The release as a user gets it: `python -m build` makes an sdist and a wheel, the wheel installs into a clean
virtualenv (its dependencies from the package index, nothing from this checkout), and the installed `mirror-v3`
says its version and validates the examples from a directory that holds no source."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Files every distribution must carry: the licence terms and what it bundles.
LEGAL = ("LICENSE", "NOTICE")


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH, no checkout on the path: what runs is what was installed.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{argv[:4]}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done


# A soak case (CI time: a clean virtualenv installs pyspark and every dependency, about a minute of the run's CPU):
# tests/test_layers.py is its fast half in every run (the wheel's packages are the product's layers, the image copies
# them, no tooling in either), and the quickstart e2e runs the CLI as the README's first command installs it.
@pytest.mark.soak
def test_the_wheel_installs_into_a_clean_virtualenv_and_the_command_works(tmp_path: Path) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)], tmp_path, 600)
    (sdist,) = dist.glob("mirror_v3-*.tar.gz")
    (wheel,) = dist.glob("mirror_v3-*.whl")
    assert sdist.name == f"mirror_v3-{version}.tar.gz" and wheel.name.startswith(f"mirror_v3-{version}-")
    with tarfile.open(sdist) as archive:
        names = {Path(name).name for name in archive.getnames()}
    assert set(LEGAL) <= names and "CHANGELOG.md" in names
    with zipfile.ZipFile(wheel) as archive:
        licences = {Path(name).name for name in archive.namelist() if ".dist-info/licenses/" in name}
        packaged = {name.split("/")[0] for name in archive.namelist()}
    assert set(LEGAL) <= licences
    product = {"core", "config", "kafka_clients", "telemetry", "sinks", "source", "workers", "supervisor", "commands"}
    assert product <= packaged
    assert not packaged & {"testkit", "tests", "e2e", "bench", "tools"}  # tooling stays in the checkout

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, 120)
    # --no-compile: what is tested is that the wheel and its dependencies install and run; compiling every module of
    # them (pyspark's thousands) took 13 of the install's 36 s (measured), on each CI run.
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)], tmp_path, 900)
    command = str(venv / "bin" / "mirror-v3")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert _run([command, "--version"], elsewhere, 60).stdout.strip() == f"mirror-v3 {version}"
    for example in ("minimal.yaml", "estate.yaml", "kafka-to-s3.yaml"):
        checked = _run([command, "validate", "--config", str(REPO / "examples" / example)], elsewhere, 120)
        assert ": valid (" in checked.stdout, checked.stdout
