"""The Python worker's zip importers keep their archive directories across PySpark's per-task cache invalidation."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport
from pathlib import Path

import pytest

from workers.python_worker import keep_zip_directories


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
