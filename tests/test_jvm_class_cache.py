"""The class archive's bookkeeping: which archive a JDK and a set of jars may use, and how archives are put in
place and cleaned. Recording one with a real JVM is e2e/test_jvm_cache.py."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from workers import jvm_class_cache
from workers.jvm_class_cache import (
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


def test_an_installed_archive_is_read_only_and_those_no_installation_can_use_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    ours = fake_jdk(tmp_path / "ours"), fake_jars(tmp_path / "ours")
    other = fake_jdk(tmp_path / "other"), fake_jars(tmp_path / "other")
    (other[1] / "spark-core.jar").write_bytes(b"another pyspark")  # another virtualenv, alive
    live = cache / f"spark-driver-{fingerprint(*other)}.jsa"
    install(write(temporary_path(live), b"other's archive"), live, *other)
    gone = cache / "spark-driver-gone.jsa"
    install(write(temporary_path(gone), b"an uninstalled env's archive"), gone, *fake_env(tmp_path / "gone"))
    shutil.rmtree(tmp_path / "gone")
    unknown = write(cache / "spark-driver-unknown.jsa", b"no origin beside it")
    unrelated = write(cache / "notes.txt", b"kept")

    archive = cache / f"spark-driver-{fingerprint(*ours)}.jsa"
    temporary = write(temporary_path(archive), b"the new archive")
    install(temporary, archive, *ours)
    assert archive.read_bytes() == b"the new archive" and not temporary.exists()
    assert stat.S_IMODE(archive.stat().st_mode) == 0o444
    assert live.exists() and unrelated.exists()
    assert not gone.exists() and not unknown.exists()
    assert sorted(p.name for p in cache.glob("*.origin.json")) == sorted(
        f"{a.name}.origin.json" for a in (archive, live)
    )

    (other[1] / "spark-sql.jar").write_bytes(b"upgraded in place")  # the other env's archive is stale now
    install(write(temporary_path(archive), b"again"), archive, *ours)
    assert not live.exists()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def fake_env(root: Path) -> tuple[Path, Path]:
    return fake_jdk(root), fake_jars(root)


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


def test_the_test_brokers_archive_lives_beside_the_drivers_and_follows_its_jdk_and_jars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from testkit.kafka_broker import class_archive

    java, jars = fake_jdk(tmp_path / "jdk"), fake_jars(tmp_path)
    monkeypatch.setenv("MIRROR_V3_JVM_CACHE", str(tmp_path / "cache"))
    archive = class_archive(jars, str(java))
    assert archive is not None and archive.parent == tmp_path / "cache"
    assert archive.name == f"kafka-broker-{fingerprint(java.resolve(), jars)}.jsa"
    (jars / "kafka-clients.jar").write_bytes(b"a newer jar")
    assert class_archive(jars, str(java)) != archive  # an archive of other jars is never mapped
    monkeypatch.setenv("MIRROR_V3_JVM_CACHE", "off")
    assert class_archive(jars, str(java)) is None


def test_each_jvms_archives_are_cleaned_up_by_their_own_installs_only(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    ours = fake_jdk(tmp_path / "ours"), fake_jars(tmp_path / "ours")
    stale_driver = write(cache / "spark-driver-unknown.jsa", b"no origin beside it")
    stale_broker = write(cache / "kafka-broker-unknown.jsa", b"no origin beside it")
    leftover = write(cache / ".kafka-broker-x.jsa.tmp-999999999", b"a killed recording's")
    jvm_class_cache.remove_leftovers(cache, "kafka-broker-")
    broker = jvm_class_cache.archive_of(cache, *ours, "kafka-broker-")
    assert broker.name == f"kafka-broker-{fingerprint(*ours)}.jsa"
    install(write(temporary_path(broker), b"the broker's"), broker, *ours, "kafka-broker-")
    assert broker.read_bytes() == b"the broker's" and not leftover.exists()
    assert not stale_broker.exists() and stale_driver.exists()  # the driver's are its own installs' to judge
