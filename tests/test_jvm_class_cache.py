"""The class archive's bookkeeping: which archive a JDK and a set of jars may use, and how archives are put in
place and cleaned. Recording one with a real JVM is e2e/test_jvm_cache.py."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from source import jvm_class_cache
from source.jvm_class_cache import (
    archive_path,
    fingerprint,
    install,
    java_binary,
    remove_leftovers,
    sharing_option,
    temporary_path,
)


def fake_jdk(root: Path) -> Path:
    java = root / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    (root / "jdk" / "lib").mkdir()
    (root / "jdk" / "lib" / "modules").write_bytes(b"modules")
    return java


def fake_jars(root: Path) -> Path:
    jars = root / "jars"
    jars.mkdir()
    for name in ("spark-core.jar", "spark-sql.jar"):
        (jars / name).write_bytes(name.encode())
    return jars


def test_the_fingerprint_changes_with_the_jdk_or_any_jar(tmp_path: Path) -> None:
    java, jars = fake_jdk(tmp_path), fake_jars(tmp_path)
    first = fingerprint(java, jars)
    assert fingerprint(java, jars) == first
    (jars / "spark-sql.jar").write_bytes(b"another build of spark-sql")
    changed_jar = fingerprint(java, jars)
    (jars / "extra.jar").write_bytes(b"x")
    added_jar = fingerprint(java, jars)
    (tmp_path / "jdk" / "lib" / "modules").write_bytes(b"an upgraded JDK's modules")
    upgraded = fingerprint(java, jars)
    assert len({first, changed_jar, added_jar, upgraded}) == 4


def test_java_comes_from_java_home_else_the_path(tmp_path: Path) -> None:
    java = fake_jdk(tmp_path)
    assert java_binary({"JAVA_HOME": str(tmp_path / "jdk"), "PATH": "/nowhere"}) == java.resolve()
    java.chmod(0o755)
    assert java_binary({"PATH": str(java.parent)}) == java.resolve()
    assert java_binary({"PATH": str(tmp_path / "empty")}) is None
    assert archive_path(tmp_path, {"PATH": str(tmp_path / "empty")}) is None


def test_only_an_archive_that_is_there_is_mapped(tmp_path: Path) -> None:
    archive = tmp_path / "spark-driver-0123.jsa"
    assert sharing_option(archive) == "" and sharing_option(None) == ""
    archive.write_bytes(b"archive")
    assert sharing_option(archive) == f"-XX:SharedArchiveFile={archive}"


def test_an_installed_archive_is_read_only_and_replaces_those_of_other_builds(tmp_path: Path) -> None:
    old = tmp_path / "spark-driver-old.jsa"
    old.write_bytes(b"an archive of another JDK")
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("kept")
    archive = tmp_path / "spark-driver-new.jsa"
    temporary = temporary_path(archive)
    temporary.write_bytes(b"the new archive")
    install(temporary, archive)
    assert archive.read_bytes() == b"the new archive" and not temporary.exists()
    assert stat.S_IMODE(archive.stat().st_mode) == 0o444
    assert not old.exists() and unrelated.exists()


def test_leftovers_of_dead_recordings_are_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    archive = tmp_path / "spark-driver-abc.jsa"
    live = temporary_path(archive)  # this process's own
    live.write_bytes(b"being written")
    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = archive.with_name(f".{archive.name}.tmp-{dead.pid}")
    gone.write_bytes(b"half")
    remove_leftovers(tmp_path)
    assert live.exists() and not gone.exists()
    assert live.name.endswith(f".tmp-{os.getpid()}")


def test_the_checked_archive_must_exist_and_hold_something(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsa"
    empty.write_bytes(b"")
    for missing in (tmp_path / "absent.jsa", empty):
        problem = jvm_class_cache.archive_problem("/nonexistent-jdk", "", missing)
        assert problem == f"{missing} was not written"
