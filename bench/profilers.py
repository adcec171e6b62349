"""The profilers behind `--profile`: py-spy on the mirror's Python process and every Python process below it (the
Spark tasks' workers, where the records are read and written), Java Flight Recorder in Spark's JVM.

Each gives its busiest frames as (frame, share of the profile's samples), for the report.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from workers.spark_session import LOG4J_CONFIG

RATE = 100  # py-spy samples per second per thread
# Innermost frames of a thread that waits (an event loop in epoll, an idle worker): py-spy cannot always tell them
# from running ones when it does not pause the process.
WAITING = ("select (selectors.py)", "wait (threading.py)")
TOP = 8


def _top(counts: Counter[str], total: int) -> list[tuple[str, float]]:
    return [(frame, round(count / max(1, total), 4)) for frame, count in counts.most_common(TOP)]


def py_spy() -> str | None:
    """py-spy from the PATH or beside this interpreter (a venv that is not activated)."""
    return shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))


class PySpy:
    """`py-spy record` attached to a running process and its Python descendants until stop(): folded stacks of the
    threads that were busy (waiting threads are not sampled), without pausing the processes."""

    def __init__(self, binary: str, pid: int, output: Path) -> None:
        self.output = output
        command = [binary, "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw", "--threads"]
        command += ["--subprocesses", "--nolineno", "--nonblocking", "--output", str(output)]
        self._proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the busy thread-seconds and the busiest innermost frames (shares of the busy samples)."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        self._proc.wait(60)
        leaves: Counter[str] = Counter()
        for line in self.output.read_text(errors="replace").splitlines() if self.output.exists() else []:
            stack, _, count = line.rpartition(" ")
            leaf = stack.rsplit(";", 1)[-1]
            if count.isdigit() and not leaf.endswith(WAITING):
                leaves[leaf] += int(count)
        total = sum(leaves.values())
        return {"busy_thread_seconds": total / RATE, "frames": _top(leaves, total)}


def jfr_options(recording: Path) -> str:
    """`spark.driver.extraJavaOptions`: the product's own options plus a flight recording written at exit."""
    return (
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG} -XX:+ExitOnOutOfMemoryError "
        f"-XX:StartFlightRecording=filename={recording},settings=profile,dumponexit=true"
    )


def jfr_summary(recording: Path) -> dict[str, Any]:
    """The execution samples of a recording (the JDK's `jfr print`): innermost frames and the methods anywhere on the
    stack, as shares of all samples."""
    tool = shutil.which("jfr")
    if tool is None or not recording.exists():
        return {"error": "no recording, or no `jfr` tool on the PATH"}
    command = [tool, "print", "--events", "jdk.ExecutionSample", str(recording)]
    events = subprocess.run(command, capture_output=True, text=True, check=True).stdout.split("jdk.ExecutionSample {")
    leaves: Counter[str] = Counter()
    methods: Counter[str] = Counter()
    for event in events[1:]:
        stack = re.search(r"stackTrace = \[(.*?)\n\s*\]", event, re.S)
        frames = [re.sub(r"\s+line:.*", "", f.strip()) for f in stack.group(1).splitlines()] if stack else []
        frames = [f for f in frames if f and not f.startswith("...")]
        if frames:
            leaves[frames[0]] += 1
        methods.update({frame.split("(")[0] for frame in frames})
    return {
        "samples": len(events) - 1,
        "frames": _top(leaves, len(events) - 1),
        "methods": _top(methods, len(events) - 1),
    }
