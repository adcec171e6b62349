"""`prepare-jvm` with a real JVM: it records the class archive once (the default run finds the one the set-up
recorded; the soak run records one from nothing), a mirror's Spark JVM then maps it (its memory map names the file)
and copies exactly, and a truncated archive is refused by the check that guards installing."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import psutil  # type: ignore[import-untyped]  # no type information in the package
import pytest

from config.runtime import DEFAULT_JVM_CACHE
from e2e.harness import assert_exactly_once, backlog, one_mirror
from testkit.kafka_broker import KafkaBroker
from testkit.mirror_run import MirrorRun, run_cli
from testkit.targets import FilesystemTarget
from workers.jvm_class_cache import archive_problem


def spark_jvm(run: MirrorRun) -> psutil.Process:
    (jvm,) = [p for p in psutil.Process(run.proc.pid).children(recursive=True) if p.name() == "java"]
    return jvm


def _record_or_find(cache: Path, env: dict[str, str]) -> Path:
    """`prepare-jvm` into `cache`: the archive it recorded (the JVM's warnings kept quiet) or found there, read-only,
    beside its origin, and `present` when asked again."""
    first = run_cli("prepare-jvm", env=env, timeout=300)
    assert first.returncode == 0, first.stderr
    assert "Skipping" not in first.stderr, "the JVM's warnings of classes it cannot keep must stay quiet"
    (archive,) = [p for p in cache.glob("spark-driver-*.jsa") if first.stdout.startswith(f"{p}: ")]
    assert first.stdout.startswith((f"{archive}: recorded (", f"{archive}: present ("))
    assert stat.S_IMODE(archive.stat().st_mode) == 0o444
    assert archive.with_name(f"{archive.name}.origin.json").is_file()
    again = run_cli("prepare-jvm", env=env, timeout=120)
    assert again.returncode == 0 and again.stdout.startswith(f"{archive}: present ("), again.stdout + again.stderr
    return archive


def _mapped_by_a_mirror_and_checked_whole(
    archive: Path, env: dict[str, str], kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [2_000], seed=41)
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, flush={"max-time-ms": 500, "max-offsets": 500})
    with MirrorRun(config, tmp_path / "run.log", env={**fs.env(), **env}) as run:
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 2_000})
        jvm = spark_jvm(run)
        assert any(m.path == str(archive) for m in jvm.memory_maps(grouped=True)), "the JVM did not map the archive"
        command = jvm.cmdline()
        java_home = str(Path(command[0]).resolve().parent.parent)
        class_path = command[command.index("-cp") + 1]
        run.drain()
    assert_exactly_once(kafka.bootstrap, fs, topic_name)

    # What prepare-jvm checks before installing: the archive whole, as the mirror's JVM would map it.
    assert archive_problem(java_home, class_path, archive) is None
    truncated = tmp_path / "truncated.jsa"
    with archive.open("rb") as whole, truncated.open("wb") as part:
        shutil.copyfileobj(whole, part, length=1 << 20)
        part.truncate(archive.stat().st_size // 2)
    problem = archive_problem(java_home, class_path, truncated)
    assert problem is not None and problem.startswith(f"{truncated} is unusable (exit "), problem


def test_the_archive_of_this_install_is_mapped_by_a_mirror_and_checked_whole(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """The default cache's archive, as every command maps it: the set-up recorded it (scripts/setup.sh runs
    `prepare-jvm`, and fails when it fails), so here it is found (recorded, where nothing made it yet)."""
    cache = Path(os.environ.get("MIRROR_V3_JVM_CACHE") or DEFAULT_JVM_CACHE).expanduser()
    env = {"MIRROR_V3_JVM_CACHE": str(cache)}
    _mapped_by_a_mirror_and_checked_whole(_record_or_find(cache, env), env, kafka, fs, topic_name, tmp_path)


# A recording from nothing costs 27 s of a JVM (measured): the default run finds the set-up's recording instead.
@pytest.mark.soak
def test_the_archive_is_recorded_once_mapped_by_a_mirror_and_checked_whole(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    cache = tmp_path / "jvm"
    env = {"MIRROR_V3_JVM_CACHE": str(cache)}
    archive = _record_or_find(cache, env)
    assert sorted(p.name for p in cache.iterdir()) == [archive.name, f"{archive.name}.origin.json"]
    _mapped_by_a_mirror_and_checked_whole(archive, env, kafka, fs, topic_name, tmp_path)
