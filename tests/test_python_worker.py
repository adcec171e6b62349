"""The Python worker processes: their zip importers keep their archive directories across PySpark's per-task cache
invalidation, and the daemon takes pyspark's zips off sys.path only where the installed package holds the same code
and leaves its workers little for the garbage collector to walk."""

from __future__ import annotations

import importlib
import subprocess
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from workers.python_worker import keep_zip_directories
from workers.spark_daemon import installed_spark_zips


def test_existing_zip_importers_skip_the_per_task_rescan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "lib.zip"
    with zipfile.ZipFile(archive, "w") as zip_file:
        zip_file.writestr("zipped_pkg/__init__.py", "")
        zip_file.writestr("zipped_pkg/first.py", "VALUE = 1\n")
        zip_file.writestr("zipped_pkg/second.py", "VALUE = 2\n")
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.setattr(sys, "path_importer_cache", dict(sys.path_importer_cache))
    for name in ("zipped_pkg", "zipped_pkg.first", "zipped_pkg.second"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.import_module("zipped_pkg.first")
    reads: list[str] = []
    read_directory = zipimport._read_directory  # type: ignore[attr-defined]

    def counting(path: str) -> object:
        reads.append(path)
        return read_directory(path)

    monkeypatch.setattr(zipimport, "_read_directory", counting)
    importlib.invalidate_caches()  # what PySpark's worker does before every task
    assert reads.count(str(archive)) >= 2  # the archive's importer and its package's both re-read it

    reads.clear()
    keep_zip_directories()
    importlib.invalidate_caches()
    assert reads == []
    assert importlib.import_module("zipped_pkg.second").VALUE == 2  # imports from the archive still work


def _package(root: Path, name: str) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    return root / name


def _spark_zips(lib: Path) -> list[str]:
    lib.mkdir(parents=True, exist_ok=True)
    zips = [lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"]
    for path in zips:
        with zipfile.ZipFile(path, "w") as zip_file:
            zip_file.writestr("placeholder.py", "")
    return [str(path) for path in zips]


def test_the_zips_inside_the_importable_pyspark_package_are_dropped(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zips = _spark_zips(_package(site, "pyspark") / "python" / "lib")
    _package(site, "py4j")
    path = [*zips, str(tmp_path / "app"), str(site)]
    assert installed_spark_zips(path) == zips


def test_a_spark_distributions_zips_stay_when_no_package_holds_the_same_code(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    _package(site, "py4j")
    distribution_zips = _spark_zips(tmp_path / "opt" / "spark" / "python" / "lib")
    assert installed_spark_zips([*distribution_zips, str(site)]) == []  # no pyspark package at all
    _package(site, "pyspark")
    assert installed_spark_zips([*distribution_zips, str(site)]) == []  # another pyspark: maybe another version


def test_the_zips_stay_when_py4j_is_only_in_its_zip(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    zips = _spark_zips(_package(site, "pyspark") / "python" / "lib")
    assert installed_spark_zips([*zips, str(site)]) == []


def test_the_session_starts_its_python_workers_from_the_daemon_it_is_given() -> None:
    from config.model import SparkConfig
    from workers.spark_session import session_conf

    assert "spark.python.daemon.module" not in session_conf(SparkConfig())
    assert session_conf(SparkConfig(), python_daemon="workers.spark_daemon")["spark.python.daemon.module"] == (
        "workers.spark_daemon"
    )
    own = SparkConfig(conf={"spark.python.daemon.module": "pyspark.daemon"})  # the user's spark.conf wins
    assert session_conf(own, python_daemon="workers.spark_daemon")["spark.python.daemon.module"] == "pyspark.daemon"


def test_the_daemon_leaves_its_workers_little_for_the_collector_to_walk() -> None:
    # pyspark's daemon runs a full gc.collect() in a worker after every task: what the imports made must be frozen,
    # so the walk covers only what tasks make (it was about 97 000 objects and 36 ms a task).
    probe = (
        "import gc, sys; from workers.spark_daemon import prepare_process, TASK_MODULES; prepare_process(); "
        "assert all(m in sys.modules for m in TASK_MODULES); print(gc.get_freeze_count(), len(gc.get_objects()))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    frozen, walked = (int(word) for word in done.stdout.split())
    assert frozen > 30_000  # the imports' objects (about 43 000 since the jobs no longer import pandas)
    assert walked < 2_000
