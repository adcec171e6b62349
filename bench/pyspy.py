"""Sampling profile of the mirror process with py-spy, summarised as "where the Python side spends its time".

py-spy attaches to the running mirror (`py-spy record --pid`, non-blocking, idle frames included) and writes
folded stacks (`--format raw`: one line per distinct stack, `thread;frame;frame... count`). Each sample of each
thread is 1/rate seconds of that thread's wall time; the summary sorts them into what the mirror was doing.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

RATE = 100  # samples per second per thread

# Leaf frames of a thread that is waiting, not working.
_IDLE_LEAVES = (
    "select (selectors.py",  # an event loop or the metrics server waiting
    "Condition.wait (threading.py",
    "_worker (concurrent/futures/thread.py",  # an idle executor thread
    "FinalizerWorker.run (py4j/clientserver.py",  # py4j's garbage-collection thread, sleeping
    "Event.wait (threading.py",
)
_LINE = re.compile(r":\d+\)")


def py_spy_binary() -> str | None:
    """py-spy from the PATH or next to this interpreter (the venv's bin, when the venv is not activated)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return spy if Path(spy).exists() else None


class PySpyRecorder:
    """`py-spy record` attached to a running process; stop() makes it write its output and exit."""

    def __init__(self, pid: int, output: Path, rate: int = RATE) -> None:
        binary = py_spy_binary()
        if binary is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.output, self.rate = output, rate
        self._proc = subprocess.Popen(
            [
                binary,
                "record",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--threads",
                "--idle",
                "--nonblocking",
                "-o",
                str(output),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
        try:
            self._proc.wait(60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(10)


@dataclass(frozen=True)
class ProfileSummary:
    seconds: float  # wall time profiled
    activities: list[tuple[str, float]]  # what the threads did, in thread-seconds, largest first
    top_frames: list[tuple[str, float]]  # busiest leaf functions (not waiting), thread-seconds
    threads: int


def _activity(thread: str, frames: list[str]) -> str:
    leaf = frames[-1] if frames else ""
    stack = ";".join(frames)
    if "read_range (workers/range_reader.py" in stack:
        if "readinto (socket.py" in leaf:
            return "Spark read: waiting for the JVM (Kafka fetch, rows, Arrow, results to Python)"
        return "Spark read: Python side (py4j calls, Arrow stream into a table, offset checks)"
    if "encode_parquet (sinks/records.py" in stack:
        return "Parquet encoding (pyarrow)"
    if "get_spark (workers/spark_session.py" in stack:
        return "Spark session start-up"
    if any(idle in leaf for idle in _IDLE_LEAVES):
        return "idle (waiting for work)" if "MainThread" not in thread else "event loop: waiting (epoll)"
    if "MainThread" in thread:
        return "event loop: running (actor, offset queries, logging, metrics)"
    if thread.startswith("asyncio_"):
        return "file writes and fsync (asyncio executor threads)"
    return f"other ({thread})"


def summarise(path: Path, rate: int = RATE) -> ProfileSummary:
    activities: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    thread_ids: set[str] = set()
    per_thread: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rstrip().rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        thread_frame, *frames = stack.split(";")
        thread_ids.add(thread_frame)
        # "thread (0x7f..): MainThread" -> "MainThread"; py-spy numbers threads, names may repeat
        thread = thread_frame.split(": ", 1)[-1] if ": " in thread_frame else thread_frame
        thread = re.sub(r"^AnyIO worker thread.*", "AnyIO worker thread", thread)
        per_thread[thread_frame] += count
        frames = [_LINE.sub(")", frame) for frame in frames]
        activity = _activity(thread, frames)
        activities[activity] += count
        if (
            frames
            and not activity.startswith(("idle", "event loop: waiting"))
            and "waiting for the JVM" not in activity
        ):
            leaves[frames[-1]] += count
    seconds = max(per_thread.values(), default=0) / rate
    return ProfileSummary(
        seconds=seconds,
        activities=[(name, count / rate) for name, count in activities.most_common()],
        top_frames=[(name, count / rate) for name, count in leaves.most_common(8)],
        threads=len(thread_ids),
    )
