"""CPU time and memory of the processes around a run, sampled with psutil so a report can say where the cores went."""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import psutil  # type: ignore[import-untyped]  # no type information in the package

MIRROR = "mirror (Python)"
JVM = "Spark JVM + workers"


@dataclass(frozen=True)
class Sample:
    at: float  # epoch seconds
    cpu: dict[str, float]  # label -> user + system CPU seconds so far
    rss: dict[str, int] = field(default_factory=dict)  # label -> resident bytes


def _cpu(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


class Sampler:
    """Samples named processes, and a mirror process with everything below it (Spark's JVM), every `interval` s
    in a background thread. Windows known only afterwards (the backlog starts at a log line) are then cut out of the
    samples by interpolation: `cpu_between(t0, t1)`."""

    def __init__(self, mirror: int, named: Mapping[str, int | None], interval: float = 0.25) -> None:
        self._mirror = psutil.Process(mirror)
        self._named = {label: psutil.Process(pid) for label, pid in named.items() if pid is not None}
        self._interval = interval
        self._children: dict[int, float] = {}  # last CPU seen of each descendant: a helper that exits keeps its share
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-sampler", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()  # the window's end

    def _loop(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self._interval):
                return

    def sample(self) -> None:
        cpu: dict[str, float] = {}
        rss: dict[str, int] = {}
        try:
            with self._mirror.oneshot():
                cpu[MIRROR], rss[MIRROR] = _cpu(self._mirror), self._mirror.memory_info().rss
            rss[JVM] = 0
            for child in self._mirror.children(recursive=True):
                with contextlib.suppress(psutil.Error):  # gone between listing and reading
                    self._children[child.pid] = _cpu(child)
                    rss[JVM] += child.memory_info().rss
            cpu[JVM] = sum(self._children.values())
        except psutil.Error:
            pass  # the mirror has exited: its last sample stands
        for label, process in self._named.items():
            with contextlib.suppress(psutil.Error):
                cpu[label] = _cpu(process)
        self.samples.append(Sample(time.time(), cpu, rss))

    def cpu_between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each process used in [start, end] (epoch seconds)."""
        labels = sorted({label for s in self.samples for label in s.cpu})
        return {label: round(max(0.0, self._at(label, end) - self._at(label, start)), 3) for label in labels}

    def _at(self, label: str, when: float) -> float:
        points = [(s.at, s.cpu[label]) for s in self.samples if label in s.cpu]
        if not points:
            return 0.0
        index = bisect.bisect_left(points, (when, float("-inf")))
        if index == 0 or index == len(points):
            return points[min(index, len(points) - 1)][1]
        (t0, v0), (t1, v1) = points[index - 1], points[index]
        return v0 + (v1 - v0) * (when - t0) / (t1 - t0) if t1 > t0 else v1
