"""A Spark standalone cluster on 127.0.0.1 from the pyspark install: one master, one worker.

    with SparkCluster(tmp_path, cores=2) as cluster:
        config = {"master": cluster.master_url, "conf": cluster.driver_conf()}
        cluster.kill_worker()     # SIGKILL: its executors die with it
        cluster.start_worker()    # a new worker registers; the driver gets new executors

Both run in the foreground through pyspark's `bin/spark-class` (no daemon scripts, no pid files),
as children of this process with their output in `workdir`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from testkit.ports import HOST, free_ports
from testkit.processes import ChildProcess, StartStop, tail


class SparkClusterError(RuntimeError):
    pass


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class SparkCluster(StartStop):
    def __init__(self, workdir: Path, *, cores: int = 2, memory: str = "2g", start_timeout: float = 90.0) -> None:
        self.workdir = workdir
        self.cores, self.memory = cores, memory
        self._timeout = start_timeout
        self.port, self.master_ui_port, self.worker_port, self.worker_ui_port = free_ports(4)
        self._master: ChildProcess | None = None
        self._worker: ChildProcess | None = None
        self._workers_started = 0

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def is_running(self) -> bool:
        return self._master is not None and self._master.is_running

    @property
    def worker_pid(self) -> int | None:
        return None if self._worker is None else self._worker.pid

    def driver_conf(self) -> dict[str, str]:
        """What a driver on this machine needs: executors connect back to 127.0.0.1 only."""
        return {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST, "spark.executor.memory": "1g"}

    def _env(self) -> dict[str, str]:
        return {
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.workdir),
            "PYSPARK_PYTHON": sys.executable,
            # The master declares a silent worker lost after this many seconds (default 60), and a worker sends
            # its heartbeat every quarter of it: both daemons read it. A killed worker's replacement on the same
            # address is registered only once the old one is declared lost.
            "SPARK_DAEMON_JAVA_OPTS": "-Dspark.worker.timeout=5",
        }

    def _spark_class(self, *args: str, log: str) -> ChildProcess:
        command = [str(spark_home() / "bin" / "spark-class"), *args]
        (self.workdir / log).unlink(missing_ok=True)  # startup is read from this log: no earlier run's lines
        return ChildProcess(command, cwd=self.workdir, log_path=self.workdir / log, env=self._env())

    def start(self) -> SparkCluster:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._master = self._spark_class(
            "org.apache.spark.deploy.master.Master",
            "--host", HOST, "--port", str(self.port), "--webui-port", str(self.master_ui_port),
            log="master.out",
        )  # fmt: skip
        self._wait_for("master.out", "I have been elected leader", self._master)
        self.start_worker()
        return self

    def start_worker(self) -> None:
        """Start a worker (again, after kill_worker) and wait until the master has registered it."""
        self._workers_started += 1
        work = self.workdir / f"work-{self._workers_started}"
        work.mkdir(exist_ok=True)
        log = f"worker-{self._workers_started}.out"
        self._worker = self._spark_class(
            "org.apache.spark.deploy.worker.Worker",
            "--host", HOST, "--port", str(self.worker_port), "--webui-port", str(self.worker_ui_port),
            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work), self.master_url,
            log=log,
        )  # fmt: skip
        self._wait_for(log, "Successfully registered with master", self._worker)

    def kill_worker(self) -> None:
        """SIGKILL the worker and the executors it launched (a lost machine)."""
        if self._worker is None:
            return
        pid = self._worker.pid
        for child in _children(pid):
            _kill(child)
        self._worker.stop(graceful=False, timeout=10.0)
        self._worker = None

    def stop(self) -> None:
        self.kill_worker()
        if self._master is not None:
            self._master.stop(graceful=True, timeout=10.0)
            self._master = None

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(f"--- {p.name}\n{tail(p, lines)}" for p in sorted(self.workdir.glob("*.out")))

    def _wait_for(self, log: str, line: str, child: ChildProcess) -> None:
        deadline = time.monotonic() + self._timeout
        path = self.workdir / log
        while time.monotonic() < deadline:
            if line in tail(path, 200):
                return
            if not child.is_running:
                raise SparkClusterError(f"{log}: process exited\n{tail(path, 40)}")
            time.sleep(0.2)
        raise SparkClusterError(f"{log}: no '{line}' within {self._timeout:g}s\n{tail(path, 40)}")


def _children(pid: int | None) -> list[int]:
    """Every descendant of `pid` (executors, their Python workers), from /proc."""
    if pid is None:
        return []
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            parents[int(entry.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        current = frontier.pop()
        for child, parent in parents.items():
            if parent == current:
                found.append(child)
                frontier.append(child)
    return found


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def available() -> bool:
    return shutil.which("java") is not None and (spark_home() / "bin" / "spark-class").exists()
