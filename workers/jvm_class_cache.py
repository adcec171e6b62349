"""The Spark driver JVM's class-data-sharing archive (the JDK's AppCDS): the classes a Spark session and its jobs
load, recorded once by `prepare-jvm`, then mapped by every later start instead of being parsed and verified again.

Measured on this 2-core machine (a session start and one job, JDK 17, pyspark 4.3): the JVM spent
4.4-6.6 s of CPU with the archive against 8.8-12.2 s without, and the session was up in 2.6-4.1 s against 4.5-6.3 s.
Every start of a mirror, restore or verify pays this, so it is what a restart costs and most of what the
end-to-end tests cost.

An archive is only good for the JDK and the Spark jars it was made with, so its name carries a fingerprint of
both: after an upgrade the JVM finds no archive of that name and starts as it always did. What else must match
(the heap's pointer layout, the class path) the JVM checks itself, and starts without the archive if it does not.
A truncated archive would crash the JVM that maps it (SIGBUS, measured): an archive is written under a temporary
name, read whole by a JVM that checks its checksum, and only then renamed into place, read-only; nothing writes it
again.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ARCHIVE_PREFIX = "spark-driver-"
ARCHIVE_SUFFIX = ".jsa"
CHECK_TIMEOUT_S = 120.0


def java_binary(env: dict[str, str] | None = None) -> Path | None:
    """The `java` Spark's launcher runs: $JAVA_HOME/bin/java, else the one on PATH (resolved), or None."""
    env = dict(os.environ) if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return candidate.resolve() if candidate.exists() else None
    found = shutil.which("java", path=env.get("PATH"))
    return None if found is None else Path(found).resolve()


def spark_jars() -> Path:
    """The jars of the pyspark install: the driver JVM's class path."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def fingerprint(java: Path, jars: Path) -> str:
    """What an archive is only good for: this JDK (its java binary and the modules file beside it) and these jars
    (names, sizes and modification times, as the JVM itself checks them)."""
    digest = hashlib.sha256()
    home = java.parent.parent
    for path in (java, home / "lib" / "modules"):
        if path.exists():
            stat = path.stat()
            digest.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        digest.update(f"{jar.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_path(directory: Path, env: dict[str, str] | None = None) -> Path | None:
    """Where the archive of this JDK and these jars lives in `directory`; None without a java."""
    java = java_binary(env)
    if java is None:
        return None
    return archive_of(directory, java, spark_jars())


def archive_of(directory: Path, java: Path, jars: Path, prefix: str = ARCHIVE_PREFIX) -> Path:
    """The archive of this JDK and these jars; `prefix` names the JVM it is for (the test brokers' have their own)."""
    return directory / f"{prefix}{fingerprint(java, jars)}{ARCHIVE_SUFFIX}"


def _origin(archive: Path) -> Path:
    """Beside each archive: the java and the jars it was made with, so that a later install can tell an archive of
    another live installation (kept) from one of an installation that is gone or upgraded (removed)."""
    return archive.with_name(archive.name + ".origin.json")


def sharing_option(archive: Path | None) -> str:
    """The JVM option that maps `archive`, when it is there ('' otherwise: the JVM starts as without one)."""
    return f"-XX:SharedArchiveFile={archive}" if archive is not None and archive.is_file() else ""


def recording_option(temporary: Path) -> str:
    """The JVM options that record every class it loaded into `temporary` when it exits, with a checksum. The JVM
    warns of each class it cannot keep (signed jars, old class files: hundreds of lines); only errors are shown."""
    return f"-XX:ArchiveClassesAtExit={temporary} -XX:+VerifySharedSpaces -Xlog:cds*=error"


def temporary_path(archive: Path) -> Path:
    return archive.with_name(f".{archive.name}.tmp-{os.getpid()}")


def archive_problem(java_home: str, class_path: str, archive: Path) -> str | None:
    """Why a JVM with this home and class path could not use `archive`, or None when it maps it and every byte of
    it matches its checksum (-Xshare:on makes any problem fatal instead of silent)."""
    if not archive.is_file() or archive.stat().st_size == 0:
        return f"{archive} was not written"
    with tempfile.TemporaryDirectory() as scratch:  # where a JVM that crashes on the archive leaves its report
        command = [
            str(Path(java_home) / "bin" / "java"),
            "-Xshare:on",
            f"-XX:SharedArchiveFile={archive}",
            "-XX:+VerifySharedSpaces",
            f"-XX:ErrorFile={scratch}/hs_err_%p.log",
            "-cp",
            class_path,
            "-version",
        ]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False, cwd=scratch
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"checking {archive} failed: {exc}"
    if done.returncode != 0:
        lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
        return f"{archive} is unusable (exit {done.returncode}): {lines[0] if lines else 'no output'}"
    return None


def install(temporary: Path, archive: Path, java: Path, jars: Path, prefix: str = ARCHIVE_PREFIX) -> None:
    """Put a checked archive of `java` and `jars` in place, read-only, and remove the archives no installation can
    use any more: their JDK or jars are gone or changed (several virtualenvs may share one cache directory; a
    running JVM that maps a removed archive keeps its copy until it exits)."""
    _origin(archive).write_text(json.dumps({"java": str(java), "jars": str(jars)}))
    temporary.chmod(0o444)
    os.replace(temporary, archive)
    for other in archive.parent.glob(f"{prefix}*{ARCHIVE_SUFFIX}"):
        if other != archive and not _still_usable(other, prefix):
            other.unlink(missing_ok=True)
            _origin(other).unlink(missing_ok=True)


def _still_usable(archive: Path, prefix: str) -> bool:
    try:
        origin = json.loads(_origin(archive).read_text())
        java, jars = Path(origin["java"]), Path(origin["jars"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return java.exists() and jars.is_dir() and archive_of(archive.parent, java, jars, prefix) == archive


def remove_leftovers(directory: Path, prefix: str = ARCHIVE_PREFIX) -> None:
    """Temporary archives of recordings that never finished (the process was killed)."""
    for leftover in directory.glob(f".{prefix}*{ARCHIVE_SUFFIX}.tmp-*"):
        pid = leftover.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            leftover.unlink(missing_ok=True)
