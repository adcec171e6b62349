"""CPU time of the processes around a benchmark run, from /proc, so a report can say where the cores went."""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (all its threads) so far; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def rss_bytes(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, grandchildren, ...), from the parent pids in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    frontier = [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found += below
        frontier += below
    return found


@dataclass
class CpuMonitor:
    """Samples the CPU time of named processes, and of everything a root process started, over time.

    `between(t0, t1)` then gives each one's CPU seconds inside a window known only afterwards (e.g. the backlog
    window, which starts at the first Spark job), interpolating between samples.
    """

    named: dict[str, int]  # label -> pid
    root: int | None = None  # the mirror process: its own CPU and its descendants' (the Spark JVM)
    root_label: str = "mirror process (Python)"
    children_label: str = "Spark JVM (its child)"
    interval: float = 0.25
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    _last: float = float("-inf")
    _children: dict[int, float] = field(default_factory=dict)  # last seen CPU of each descendant (they may exit)

    def sample(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        seconds: dict[str, float] = {}
        for label, pid in self.named.items():
            value = cpu_seconds(pid)
            if value is not None:
                seconds[label] = value
        if self.root is not None:
            own = cpu_seconds(self.root)
            if own is not None:
                seconds[self.root_label] = own
                for child in descendants(self.root):
                    value = cpu_seconds(child)
                    if value is not None:
                        self._children[child] = value
            seconds[self.children_label] = sum(self._children.values())
        self.samples.append((now, seconds))

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU seconds each process used in [start, end] (epoch seconds)."""
        labels = {label for _, seconds in self.samples for label in seconds}
        return {label: max(0.0, self._at(label, end) - self._at(label, start)) for label in sorted(labels)}

    def _at(self, label: str, when: float) -> float:
        points = [(at, seconds[label]) for at, seconds in self.samples if label in seconds]
        if not points:
            return 0.0
        if when <= points[0][0]:
            return points[0][1]
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            if t0 <= when <= t1:
                return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)
        return points[-1][1]
