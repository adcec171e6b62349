"""The Structured Streaming reference of an estate-steady row: bench.streaming_job as its own process (the
virtualenv's pyspark, Spark's Kafka source from testkit.spark_jars) on the same broker, measured as the
mirror is (bench.estate): the same producer, warm-up and window, latency from its sink's commit log
(bench.durable.SinkLog), CPU of its whole process tree (the Python driver, its JVM), until every record landed.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Self

from bench.durable import SinkLog
from testkit.mirror_run import REPO, cli_env
from testkit.spark_jars import spark_kafka_jars

STARTED = "query started"


class StreamingError(AssertionError):
    """The reference query did not start, failed, or did not land every record in time."""


class StreamingQuery:
    """`python -m bench.streaming_job` reading every partition of `topic` into `directory/output`."""

    def __init__(self, bootstrap: str, topic: str, directory: Path, trigger_ms: int, log_path: Path) -> None:
        self.output, self.log_path = directory / "output", log_path
        jars = ",".join(str(jar) for jar in spark_kafka_jars())
        command = [sys.executable, "-m", "bench.streaming_job", "--bootstrap", bootstrap, "--topic", topic]
        command += ["--output", str(self.output), "--checkpoint", str(directory / "checkpoint")]
        command += ["--trigger-ms", str(trigger_ms), "--jars", jars]
        self.started_at = time.time()
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                command, cwd=REPO, env=cli_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        self.sink = SinkLog(self.output)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_until(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if self.proc.poll() is not None:
                raise StreamingError(f"the query exited {self.proc.returncode} before {what}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise StreamingError(f"timed out after {timeout:g} s waiting for {what}:\n{self.tail()}")
            time.sleep(0.2)

    def wait_started(self, timeout: float) -> None:
        self.wait_until(lambda: STARTED in self.log_path.read_text(errors="replace"), timeout, "the query to start")

    def wait_rows(self, rows: int, timeout: float) -> None:
        """Until the sink's committed files hold `rows` records."""
        self.wait_until(lambda: self.sink.poll() >= rows, timeout, f"{rows} records in the sink")

    def stop(self, timeout: float = 60) -> float:
        """SIGTERM (the job stops the query and the session); returns the seconds it took."""
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise StreamingError(f"the query still ran {timeout:g} s after SIGTERM:\n{self.tail()}") from None
        if code != 0:
            raise StreamingError(f"the query exited {code} after SIGTERM:\n{self.tail()}")
        return time.monotonic() - began

    def tail(self, lines: int = 30) -> str:
        kept = [line for line in self.log_path.read_text(errors="replace").splitlines() if not line.startswith("\tat ")]
        return "\n".join(kept[-lines:])
