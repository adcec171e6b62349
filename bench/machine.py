"""What a measurement ran on: hardware, versions, how busy the machine was."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Machine:
    cpus: int
    ram_gib: float
    cpu_model: str
    kernel: str
    python: str
    pyspark: str
    pyarrow: str
    confluent_kafka: str
    librdkafka: str
    aiobotocore: str  # the mirror's S3 client
    botocore: str
    java: str
    commit: str


def describe_machine() -> Machine:
    import confluent_kafka
    import pyarrow
    import pyspark

    return Machine(
        cpus=len(os.sched_getaffinity(0)),
        ram_gib=_meminfo_kib("MemTotal") / 1024 / 1024,
        cpu_model=_cpu_model(),
        kernel=platform.release(),
        python=platform.python_version(),
        pyspark=pyspark.__version__,
        pyarrow=pyarrow.__version__,
        confluent_kafka=str(confluent_kafka.__version__),
        librdkafka=confluent_kafka.libversion()[0],
        aiobotocore=_version("aiobotocore"),
        botocore=_version("botocore"),
        java=_java_version(),
        commit=_git_commit(),
    )


def load_average() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return one, five, fifteen


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _meminfo_kib(key: str) -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name == key:
                return int(rest.split()[0])
    except OSError:
        pass
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _java_version() -> str:
    """The first line of `java -version` for the java Spark will use (JAVA_HOME first, like spark-submit)."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None:
        return "not found"
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=30
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if not head:
        return "unknown"
    return f"{head} (uncommitted changes)" if dirty else head
