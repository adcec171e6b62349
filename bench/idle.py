"""Idle mirrors: what N mirrors with nothing to read cost in one mirror-v3 process.

For each N (100 and 1000 by default) the benchmark creates N empty source partitions (topics `idle-<N>-<i>` of
up to 100 partitions each), writes a config with one mirror per partition to a filesystem destination (defaults
otherwise: `poll-interval-ms` 500, `request-timeout-ms` 30000, `spark.master: local[*]`), starts the real CLI
(`python -m supervisor run`), waits until every mirror has logged `mirror starting` and the SparkSession is built,
lets it settle and then samples once a second from /proc:

- resident memory (RSS) of the Python process and of all its descendant processes (Spark's JVM), max and last;
- CPU time (utime + stime) over the sample window, as average cores, for the Python process (and its event-loop
  thread alone), the JVM and, when given its pid, the source broker;
- open file descriptors and threads of the Python process (threads of the JVM too);
- bytes exchanged with the source broker's port (`ss -tinp`): the traffic of the idle mirrors' offset polling.

Optionally (`profile_seconds`) it then runs `py-spy record` on the Python process, after the sample window so the
sampling does not inflate the numbers, to show where the idle CPU goes. Then SIGTERM, and the drain is timed.

A process that exits by itself (say, a mirror failing at start-up) is a result too: `failed` says when and why,
and the numbers are those sampled (every 0.5 s) from its start until it died.

    python -m bench.idle --counts 100,1000        # starts its own broker on 127.0.0.1
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench.mirror_run import REPO, _events, _log_time, _tail, start_mirror
from bench.pyspy import py_spy_binary
from config.model import SourceConfig

PARTITIONS_PER_TOPIC = 100
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
MIB = 1024 * 1024
PROFILE_RATE = 100  # py-spy samples per second per thread
_SS_PID = re.compile(r"pid=(\d+),")
_SS_FIELD = re.compile(r"\b(bytes_sent|bytes_received):(\d+)")
_KV_FIELD = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|\S*)')


class IdleRunError(RuntimeError):
    pass


@dataclass(frozen=True)
class IdleResult:
    mirrors: int
    started: int  # mirrors that logged `mirror starting`
    startup_seconds: float | None  # process start -> the last `mirror starting` line; None if not all started
    spark_seconds: float | None  # process start -> the SparkSession built (get_spark returned); None if never
    settle_seconds: float  # idle time between start-up and the sample window
    sample_seconds: float  # what the numbers below cover (the window, or start -> exit for a failed run)
    load_average: float  # the machine's 1-minute load average as the window began
    rss_python_max_bytes: int
    rss_python_last_bytes: int
    rss_jvm_max_bytes: int  # every descendant process (Spark's JVM is the only one of an idle mirror)
    rss_jvm_last_bytes: int
    rss_total_max_bytes: int  # max over samples of python + descendants
    rss_total_last_bytes: int
    cpu_python_cores: float
    cpu_python_loop_cores: float  # the main thread alone: the event loop, where offset polling runs
    cpu_jvm_cores: float
    cpu_broker_cores: float | None
    python_fds: int  # at the last sample
    python_threads: int
    jvm_threads: int
    source_sent_kib_per_second: float | None  # TCP payload to the source broker's port; None if not measured
    source_received_kib_per_second: float | None  # and from it
    jvm_busiest_threads: tuple[tuple[str, float], ...]  # (thread name, cores), busiest first
    startup_cpu_seconds: float | None  # python + descendants, from process start to the end of start-up
    startup_cpu_python_seconds: float | None  # the Python process alone
    log_errors: int
    log_warnings: int
    first_error: str | None  # the first ERROR line's message, error and mirror
    failed: str | None  # why there was no idle window: "exited 1 after 48.7 s during start-up"
    drain_seconds: float | None  # SIGTERM -> exit; None when it exited by itself
    exit_code: int
    poll_interval_ms: int
    source_settings: tuple[tuple[str, str], ...] = ()  # what the config sets beyond bootstrap-servers
    code: str = ""  # the commit measured, and the product files changed on top of it
    profile: ProfileSummary | None = None  # py-spy after the window, when asked for


# ------------------------------------------------------------------------------------------------ /proc


@dataclass(frozen=True)
class ProcStat:
    pid: int
    ppid: int
    comm: str
    cpu_seconds: float
    threads: int
    rss_bytes: int


def parse_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat (or task/<tid>/stat) line; the command name may hold spaces and parentheses."""
    head, _, rest = text.rpartition(")")
    pid, _, comm = head.partition(" (")
    fields = rest.split()  # fields[0] is the state, the 3rd field of the line
    return ProcStat(
        pid=int(pid),
        ppid=int(fields[1]),
        comm=comm,
        cpu_seconds=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
        threads=int(fields[17]),
        rss_bytes=int(fields[21]) * PAGE_SIZE,
    )


def read_stat(pid: int, tid: int | None = None) -> ProcStat | None:
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    try:
        return parse_stat(Path(path).read_text())
    except (OSError, ValueError, IndexError):
        return None  # gone between listing and reading


def descendants(pid: int) -> list[ProcStat]:
    """Every process below `pid` (children, grandchildren, ...): Spark's launcher scripts and its JVM."""
    by_parent: dict[int, list[ProcStat]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := read_stat(int(entry))) is not None:
            by_parent.setdefault(stat.ppid, []).append(stat)
    found: list[ProcStat] = []
    parents = [pid]
    while parents:
        children = [child for parent in parents for child in by_parent.get(parent, [])]
        found.extend(children)
        parents = [child.pid for child in children]
    return found


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """tid -> (thread name, CPU seconds) of every thread of `pid`."""
    threads: dict[int, tuple[str, float]] = {}
    try:
        tids = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return threads
    for tid in tids:
        stat = read_stat(pid, tid)
        if stat is not None:
            threads[tid] = (stat.comm, stat.cpu_seconds)
    return threads


def busiest_threads(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], seconds: float, top: int = 4
) -> tuple[tuple[str, float], ...]:
    """CPU per thread name (digits folded, `GC Thread#3` -> `GC Thread#N`) over a window, as cores."""
    used: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        key = re.sub(r"\d+", "N", name)
        used[key] = used.get(key, 0.0) + cpu - before.get(tid, (name, 0.0))[1]
    busiest = sorted(used.items(), key=lambda item: item[1], reverse=True)[:top]
    return tuple((name, cpu / seconds) for name, cpu in busiest if cpu > 0)


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def socket_counters(pid: int, port: int) -> tuple[int, int] | None:
    """(bytes sent, bytes received) on `pid`'s established TCP connections to `port`; None without `ss`.

    Bytes, not requests: the process may put several partitions in one request, and the kernel merges
    back-to-back segments on loopback (autocorking), so segment counts say little.
    """
    if shutil.which("ss") is None:
        return None
    try:
        out = subprocess.run(
            ["ss", "-tinpH", "state", "established", "dport", "=", f":{port}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_ss(out, pid)


def parse_ss(out: str, pid: int) -> tuple[int, int]:
    """Sum `bytes_sent` and `bytes_received` of the sockets of `pid` in `ss -tinp` output (a socket line, then an
    indented info line)."""
    sent = received = 0
    owner: int | None = None
    for line in out.splitlines():
        if not line[:1].isspace():  # a socket line: its owners are on it as users:(("python",pid=N,fd=M))
            owners = {int(found) for found in _SS_PID.findall(line)}
            owner = pid if pid in owners else None
            continue
        if owner is None:
            continue
        fields = dict(_SS_FIELD.findall(line))
        sent += int(fields.get("bytes_sent", 0))
        received += int(fields.get("bytes_received", 0))
    return sent, received


def code_state() -> str:
    """`<commit>` or `<commit> + uncommitted changes to <files>` (product directories only); "" outside git."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "supervisor", "workers", "sinks", "config"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return ""
    files = [line[3:] for line in changed if line.strip()]
    return f"{commit} + uncommitted changes to {', '.join(files)}" if files else commit


# ------------------------------------------------------------------------------------------------ topics, config


def topic_layout(mirrors: int, per_topic: int = PARTITIONS_PER_TOPIC) -> list[tuple[str, int]]:
    """(topic, partitions) adding up to `mirrors` partitions: `idle-<N>-<i>`, at most `per_topic` each."""
    layout = []
    for index, first in enumerate(range(0, mirrors, per_topic)):
        layout.append((f"idle-{mirrors}-{index}", min(per_topic, mirrors - first)))
    return layout


def create_topics(bootstrap: str, layout: Sequence[tuple[str, int]]) -> None:
    """Create each topic empty; one already there with the same partition count (an earlier run) is reused."""
    from testkit.kafka_data import admin_client, create_topic

    existing = admin_client(bootstrap).list_topics(timeout=30).topics
    for topic, partitions in layout:
        if topic in existing:
            found = len(existing[topic].partitions)
            if found != partitions:
                raise IdleRunError(f"topic {topic} exists with {found} partitions, expected {partitions}")
            continue
        # Leader election for 100 partitions on one KRaft broker takes a few seconds, more on a busy machine.
        create_topic(bootstrap, topic, partitions, timeout=300)


def write_idle_config(
    path: Path,
    *,
    bootstrap: str,
    root: Path,
    layout: Sequence[tuple[str, int]],
    source_settings: Mapping[str, Any] | None = None,
) -> Path:
    """One mirror per (topic, partition) named `idle-<topic>-<p>`; every setting not written is the default."""
    config: dict[str, Any] = {
        "destination": {"type": "filesystem", "root": str(root)},
        "mirrors": [
            {
                "name": f"idle-{topic}-{partition}",
                "source": {"bootstrap-servers": bootstrap, **(source_settings or {})},
                "topic": topic,
                "partition": partition,
            }
            for topic, partitions in layout
            for partition in range(partitions)
        ],
        "spark": {"master": "local[*]"},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# ------------------------------------------------------------------------------------------------ py-spy


def profile_python(pid: int, seconds: float, output: Path, rate: int = PROFILE_RATE) -> Path | None:
    """`py-spy record` (collapsed stacks, one line per distinct stack with its sample count); None without py-spy.

    --nonblocking: the target is not paused per sample, so it keeps its own pace; --threads puts each thread
    at the root of its stacks; idle samples (a thread waiting in epoll or on a lock) are left out.
    """
    spy = py_spy_binary()
    if spy is None:
        return None
    command = [spy, "record", "-p", str(pid), "-d", str(max(1, round(seconds))), "-r", str(rate)]
    command += ["--nonblocking", "--threads", "--nolineno", "-f", "raw", "-o", str(output)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, check=False)
    if result.returncode != 0 or not output.exists():
        print(f"bench.idle: py-spy failed: {result.stderr.strip()[-500:]}", file=sys.stderr)
        return None
    return output


def spark_starting(pid: int) -> bool | None:
    """Whether a thread of `pid` is still inside `get_spark` (the SparkSession being built); None without py-spy.

    The JVM appears seconds before the session is usable (py4j gateway, then SparkContext, then the session); only
    the supervisor's own stack tells when `get_spark` has returned. --nonblocking: the process is not paused, so a
    dump may fail (a stack changing while read); that counts as "still starting" and the caller asks again.
    """
    spy = py_spy_binary()
    if spy is None:
        return None
    try:
        dump = subprocess.run(
            [spy, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return True
    if dump.returncode != 0 or "MainThread" not in dump.stdout:
        return True
    return "get_spark (workers/spark_session.py" in dump.stdout


_PLUMBING = {"asyncio", "anyio", "threading", "concurrent", "selectors"}  # how the loop runs code, not what
_LOOP_DISPATCH = "._run_once (asyncio/base_events.py)"  # BaseEventLoop._run_once: runs the ready callbacks


@dataclass(frozen=True)
class ProfileSummary:
    """Shares of a py-spy recording's busy samples (a thread running Python code, not waiting)."""

    samples: int
    busy_threads: float  # busy samples / (rate x seconds); py-spy calls waiting for the GIL busy: reads above /proc
    threads: tuple[tuple[str, float], ...]  # per thread name
    below_loop: tuple[tuple[str, float], ...]  # package anywhere on the stack under the event loop's dispatch
    innermost: tuple[tuple[str, float], ...]  # package of the innermost Python frame (adds up to 1)
    functions: tuple[tuple[str, float], ...] = ()  # functions under the dispatch, event-loop plumbing left out


def _package(frame: str) -> str:
    """`run_once (asyncio/base_events.py)` -> `asyncio`; `<module> (supervisor/app.py)` -> `supervisor`."""
    _, _, where = frame.rpartition(" (")
    return where.rstrip(")").split("/")[0].removesuffix(".py")


def summarize_profile(text: str, rate: int, seconds: float, top: int = 6) -> ProfileSummary | None:
    """Summarize `py-spy record --threads -f raw` output: `thread (tid): name;frame;...;frame count` lines.

    On the main thread the frames from `python -m` down to the event loop's dispatch (`_run_once`) are on every
    stack and say nothing, so `below_loop` counts only what runs under it: a sample whose stack ends in
    `_run_once` itself (selecting, scheduling) counts as `asyncio`.
    """
    threads: Counter[str] = Counter()
    below: Counter[str] = Counter()
    innermost: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack.startswith("thread (") or not count_text.isdigit():
            continue
        count = int(count_text)
        root, *frames = stack.split(";")
        total += count
        threads[root.partition(": ")[2] or root] += count
        dispatch = max((i for i, frame in enumerate(frames) if frame.endswith(_LOOP_DISPATCH)), default=-1)
        under = frames[dispatch + 1 :] if dispatch >= 0 else frames
        packages = {_package(frame) for frame in under} - {"threading"} or {"asyncio" if frames else "(native code)"}
        for package in packages:
            below[package] += count
        for function in {frame.rpartition(" (")[0] for frame in under if _package(frame) not in _PLUMBING}:
            functions[function] += count
        innermost[_package(frames[-1]) if frames else "(native code)"] += count
    if not total:
        return None

    def shares(counter: Counter[str], most: int = top) -> tuple[tuple[str, float], ...]:
        return tuple((name, n / total) for name, n in counter.most_common(most))

    return ProfileSummary(
        samples=total,
        busy_threads=total / (rate * max(1, round(seconds))),
        threads=shares(threads),
        below_loop=shares(below),
        innermost=shares(innermost),
        functions=shares(functions, 10),
    )


# ------------------------------------------------------------------------------------------------ measuring


class _Exited(Exception):
    """The mirror process exited by itself."""


@dataclass
class _Window:
    """CPU and memory of the mirror process tree between `begin` and the last `sample`.

    A process first seen after `begin` counts from zero CPU (a window from the process start has nothing before
    it); the CPU of one that has gone is its last sampled value. The Python process's total comes from its own
    /proc/<pid>/stat, which keeps the time of threads that have exited (anyio retires idle worker threads).
    """

    pid: int
    port: int
    broker_pid: int | None
    from_start: bool = False
    began: float = 0.0
    last: float = 0.0
    jvm_pid: int | None = None
    python_before: float = 0.0
    python_now: float = 0.0
    loop_before: float = 0.0
    loop_now: float = 0.0
    children_before: dict[int, float] = field(default_factory=dict)
    children_now: dict[int, float] = field(default_factory=dict)
    jvm_before: dict[int, tuple[str, float]] = field(default_factory=dict)
    jvm_now: dict[int, tuple[str, float]] = field(default_factory=dict)
    broker_before: float = 0.0
    broker_now: float = 0.0
    sockets_before: tuple[int, int] | None = None
    sockets_now: tuple[int, int] | None = None
    rss_python: list[int] = field(default_factory=list)
    rss_children: list[int] = field(default_factory=list)
    fds: int = 0
    threads: int = 0
    jvm_threads: int = 0
    load_average: float = 0.0

    def begin(self) -> None:
        self.began = self.last = time.monotonic()
        self.load_average = os.getloadavg()[0]
        if not self.from_start:
            self.sample()
            self.python_before, self.loop_before = self.python_now, self.loop_now
            self.children_before = dict(self.children_now)
            self.jvm_before, self.broker_before = dict(self.jvm_now), self.broker_now
            self.sockets_before = socket_counters(self.pid, self.port)
            self.rss_python.clear()
            self.rss_children.clear()

    def sample(self) -> bool:
        """Read the process tree once; False if the Python process is gone."""
        own = read_stat(self.pid)
        loop = read_stat(self.pid, self.pid)  # the main thread: the event loop
        if own is None or loop is None:
            return False
        children = descendants(self.pid)
        if self.jvm_pid is None:
            self.jvm_pid = next((child.pid for child in children if child.comm == "java"), None)
        self.last = time.monotonic()
        self.python_now, self.loop_now = own.cpu_seconds, loop.cpu_seconds
        self.children_now.update({child.pid: child.cpu_seconds for child in children})
        if self.jvm_pid is not None:
            self.jvm_now.update(thread_cpu(self.jvm_pid))
            jvm = read_stat(self.jvm_pid)
            self.jvm_threads = jvm.threads if jvm is not None else self.jvm_threads
        if self.broker_pid is not None:
            self.broker_now = _cpu(self.broker_pid)
        self.rss_python.append(own.rss_bytes)
        self.rss_children.append(sum(child.rss_bytes for child in children))
        self.fds, self.threads = open_fds(self.pid), own.threads
        return True

    def finish(self) -> None:
        self.sockets_now = socket_counters(self.pid, self.port) if self.sockets_before is not None else None

    def cpu_seconds(self) -> tuple[float, float]:
        """(Python, descendants) since `begin`."""
        children = sum(cpu - self.children_before.get(pid, 0.0) for pid, cpu in self.children_now.items())
        return self.python_now - self.python_before, children

    def fields(self) -> dict[str, Any]:
        """The IdleResult fields this window measured."""
        elapsed = max(1e-9, self.last - self.began)
        python, children = self.cpu_seconds()
        loop = self.loop_now - self.loop_before
        sent = received = None
        if self.sockets_before is not None and self.sockets_now is not None:
            sent = (self.sockets_now[0] - self.sockets_before[0]) / 1024 / elapsed
            received = (self.sockets_now[1] - self.sockets_before[1]) / 1024 / elapsed
        totals = [a + b for a, b in zip(self.rss_python, self.rss_children, strict=True)] or [0]
        return {
            "sample_seconds": elapsed,
            "load_average": self.load_average,
            "rss_python_max_bytes": max(self.rss_python, default=0),
            "rss_python_last_bytes": self.rss_python[-1] if self.rss_python else 0,
            "rss_jvm_max_bytes": max(self.rss_children, default=0),
            "rss_jvm_last_bytes": self.rss_children[-1] if self.rss_children else 0,
            "rss_total_max_bytes": max(totals),
            "rss_total_last_bytes": totals[-1],
            "cpu_python_cores": python / elapsed,
            "cpu_python_loop_cores": loop / elapsed,
            "cpu_jvm_cores": children / elapsed,
            "cpu_broker_cores": (self.broker_now - self.broker_before) / elapsed if self.broker_pid else None,
            "python_fds": self.fds,
            "python_threads": self.threads,
            "jvm_threads": self.jvm_threads,
            "source_sent_kib_per_second": sent,
            "source_received_kib_per_second": received,
            "jvm_busiest_threads": busiest_threads(self.jvm_before, self.jvm_now, elapsed),
        }


def measure_idle(
    bootstrap: str,
    workdir: Path,
    counts: Sequence[int] = (100, 1000),
    settle_seconds: float = 30.0,
    sample_seconds: float = 30.0,
    *,
    broker_pid: int | None = None,
    startup_timeout: float = 900.0,
    profile_seconds: float = 0.0,
    source_settings: Mapping[str, Any] | None = None,
) -> list[IdleResult]:
    """Measure each N in `counts` in turn (a fresh process each) against the running broker at `bootstrap`.

    `broker_pid` adds the broker's CPU; `source_settings` (kebab-case keys of a mirror's `source:` block, e.g.
    `{"request-timeout-ms": 120000}`) are written into every mirror.
    """
    results = []
    for mirrors in counts:
        run_dir = workdir / f"idle-{mirrors}"
        run_dir.mkdir(parents=True, exist_ok=True)
        layout = topic_layout(mirrors)
        began = time.monotonic()
        create_topics(bootstrap, layout)
        _say(f"{mirrors} mirrors: {len(layout)} topic(s) ready in {time.monotonic() - began:.1f} s")
        config = write_idle_config(
            run_dir / "config.yaml",
            bootstrap=bootstrap,
            root=run_dir / "data",
            layout=layout,
            source_settings=source_settings,
        )
        results.append(
            _run_idle(
                config,
                mirrors=mirrors,
                port=int(bootstrap.split(",")[0].rsplit(":", 1)[1]),
                log_path=run_dir / "mirror.log",
                settle_seconds=settle_seconds,
                sample_seconds=sample_seconds,
                broker_pid=broker_pid,
                startup_timeout=startup_timeout,
                profile_seconds=profile_seconds,
                profile_path=run_dir / "py-spy.txt",
                source_settings=dict(source_settings or {}),
            )
        )
    return results


def _run_idle(
    config: Path,
    *,
    mirrors: int,
    port: int,
    log_path: Path,
    settle_seconds: float,
    sample_seconds: float,
    broker_pid: int | None,
    startup_timeout: float,
    profile_seconds: float,
    profile_path: Path,
    source_settings: dict[str, Any],
) -> IdleResult:
    started, startup_seconds, spark_seconds = 0, None, None
    startup_cpu: tuple[float, float] | None = None
    profile, failed, drain_seconds = None, None, None
    code = code_state()  # what the process is about to import (the tree may change under a long benchmark)
    with log_path.open("wb") as log_file:
        process_start = time.time()
        proc = start_mirror(config, log_file)
        life = _Window(proc.pid, port, broker_pid, from_start=True)  # start-up, and what a failed run measured
        life.begin()
        window = life
        phase = "start-up"
        try:
            started, startup_seconds, spark_seconds = _wait_started(
                proc, life, mirrors, log_path, process_start, startup_timeout
            )
            startup_cpu = life.cpu_seconds()
            _say(
                f"{mirrors} mirrors: {started} started"
                + (f" in {startup_seconds:.1f} s" if startup_seconds is not None else f" after {startup_timeout} s")
                + f", SparkSession after {spark_seconds:.1f} s; settling {settle_seconds:g} s"
            )
            phase = "settle"
            _sample_for(proc, life, settle_seconds, 1.0)
            phase = "the sample window"
            window = _Window(proc.pid, port, broker_pid)
            window.begin()
            _sample_for(proc, window, sample_seconds, 1.0)
            window.finish()
            if profile_seconds > 0 and profile_python(proc.pid, profile_seconds, profile_path) is not None:
                profile = summarize_profile(profile_path.read_text(), PROFILE_RATE, profile_seconds)
            if proc.poll() is not None:
                raise _Exited
            stop_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                exit_code = proc.wait(300)
            except subprocess.TimeoutExpired:
                exit_code = -1  # recorded as a failed drain; the finally block kills it
            drain_seconds = time.monotonic() - stop_at
        except _Exited:
            exit_code = proc.wait()
            failed = f"exited {exit_code} after {time.time() - process_start:.1f} s during {phase}"
            _say(f"{mirrors} mirrors: {failed}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    levels, first_error = _log_levels(log_path)
    result = IdleResult(
        mirrors=mirrors,
        started=started if failed is None else len(_events(log_path, "mirror starting")),
        startup_seconds=startup_seconds,
        spark_seconds=spark_seconds,
        settle_seconds=settle_seconds,
        startup_cpu_seconds=None if startup_cpu is None else sum(startup_cpu),
        startup_cpu_python_seconds=None if startup_cpu is None else startup_cpu[0],
        log_errors=levels["ERROR"],
        log_warnings=levels["WARNING"] + levels["WARN"],
        first_error=first_error,
        failed=failed,
        drain_seconds=drain_seconds,
        exit_code=exit_code,
        poll_interval_ms=int(
            source_settings.get("poll-interval-ms", SourceConfig(bootstrap_servers="x").poll_interval_ms)
        ),
        source_settings=tuple((key, str(value)) for key, value in source_settings.items()),
        code=code,
        profile=profile,
        **window.fields(),
    )
    _say(console_idle([result])[0].strip())
    return result


def _wait_started(
    proc: subprocess.Popen[bytes], life: _Window, mirrors: int, log_path: Path, process_start: float, timeout: float
) -> tuple[int, float | None, float]:
    """Wait for every `mirror starting` line and a built SparkSession: (started, start-up s, Spark s)."""
    deadline = time.monotonic() + timeout
    spark_seconds: float | None = None
    while True:
        if proc.poll() is not None or not life.sample():
            raise _Exited
        # get_spark starts the JVM, so once a java descendant exists, "no get_spark on a stack" means it returned
        # (spark_starting gives None without py-spy: then the JVM's existence has to do).
        if spark_seconds is None and life.jvm_pid is not None and not spark_starting(proc.pid):
            spark_seconds = time.time() - process_start
        starts = [_log_time(fields) for fields in _events(log_path, "mirror starting")]
        if len(starts) == mirrors and spark_seconds is not None:
            # The log's clock (ms), not our poll's: the last mirror may have started well before this poll.
            return len(starts), max(starts) - process_start, spark_seconds
        if time.monotonic() > deadline:
            if spark_seconds is None:
                raise IdleRunError(f"no SparkSession after {timeout} s:\n{_tail(log_path)}")
            # Measured anyway: what a process that cannot start all its mirrors costs is the interesting part.
            _say(f"{mirrors} mirrors: only {len(starts)} started within {timeout} s")
            return len(starts), None, spark_seconds
        time.sleep(0.5)


def _sample_for(proc: subprocess.Popen[bytes], window: _Window, seconds: float, every: float) -> None:
    """Sample `window` every `every` seconds for `seconds` (a sample at both ends); _Exited if the process exits."""
    end = time.monotonic() + seconds
    tick = time.monotonic()
    while True:
        if proc.poll() is not None or not window.sample():
            raise _Exited
        if tick >= end - 1e-6:
            return
        tick = min(end, tick + every)
        time.sleep(max(0.0, tick - time.monotonic()))


def _cpu(pid: int) -> float:
    stat = read_stat(pid)
    return 0.0 if stat is None else stat.cpu_seconds


def _log_levels(log_path: Path) -> tuple[Counter[str], str | None]:
    """Lines per level (key=value lines only, not Spark's own) and the first ERROR line, shortened."""
    levels: Counter[str] = Counter()
    first_error = None
    for line in log_path.read_text(errors="replace").splitlines():
        if not line.startswith("ts=") or " level=" not in line:
            continue
        fields = {key: value[1:-1] if value.startswith('"') else value for key, value in _KV_FIELD.findall(line)}
        level = fields.get("level", "")
        levels[level] += 1
        if level == "ERROR" and first_error is None:
            where = f" (mirror {fields['mirror']})" if "mirror" in fields else ""
            error = f": {fields['error']}" if "error" in fields else ""
            first_error = f"{fields.get('msg', '')}{error}{where}"
    return levels, first_error


# ------------------------------------------------------------------------------------------------ output


def _mib(value: int) -> str:
    return f"{value / MIB:,.0f}"


def _cores(value: float | None) -> str:
    return "–" if value is None else f"{value:.3f}"


def _traffic(r: IdleResult) -> str:
    if r.source_sent_kib_per_second is None or r.source_received_kib_per_second is None:
        return "–"
    return f"{r.source_sent_kib_per_second:,.1f} / {r.source_received_kib_per_second:,.1f}"


def _shares(shares: Sequence[tuple[str, float]]) -> str:
    return ", ".join(f"{name} {share:.0%}" for name, share in shares)


def _startup_cell(r: IdleResult) -> str:
    if r.failed is not None:
        return f"**failed**: {r.failed} ({r.started} started)"
    if r.startup_seconds is None:
        return f"– (only {r.started} started)"
    return f"{r.startup_seconds:.1f}"


def markdown_idle(results: Sequence[IdleResult]) -> list[str]:
    """A `### Idle mirrors` section: what was measured and how, a table, and where the idle CPU goes."""
    if not results:
        return []
    first = results[0]
    measured = next((r for r in results if r.failed is None), first)  # a failed run's span is not the window
    settings = ", ".join(f"`{key}: {value}`" for key, value in first.source_settings)
    lines = [
        "### Idle mirrors",
        "",
        "N mirrors in one `python -m supervisor run` process, one per partition of empty source topics (topics of "
        f"up to {PARTITIONS_PER_TOPIC} partitions on one local broker), filesystem destination, every other setting "
        f"at its default (`poll-interval-ms` {first.poll_interval_ms}, `request-timeout-ms` 30000, `spark.master: "
        "local[*]`, `driver-memory` 2g)" + (f" except {settings}" if settings else "") + ". "
        "After every mirror logged `mirror starting` and the SparkSession was built, the process was left alone "
        f"for {measured.settle_seconds:g} s and then sampled from `/proc` once a second for "
        f"{measured.sample_seconds:.0f} "
        "s: RSS of the Python process and of its descendant processes (Spark's JVM), the highest sample; CPU time "
        "(utime + stime) over the window as average cores; open file descriptors and threads of the Python process "
        "at the end. Start-up is process start to the last `mirror starting` line. A run that exited by itself "
        "shows what was sampled (every 0.5 s) from its start until it died."
        + (f" Code: {first.code}." if first.code else ""),
        "",
        "| mirrors | RSS Python (MiB) | RSS Spark JVM (MiB) | RSS total (MiB) | CPU Python (cores) | CPU JVM (cores) "
        "| fds | threads | start-up s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.mirrors:,} | {_mib(r.rss_python_max_bytes)} | {_mib(r.rss_jvm_max_bytes)} "
            f"| {_mib(r.rss_total_max_bytes)} | {_cores(r.cpu_python_cores)} | {_cores(r.cpu_jvm_cores)} "
            f"| {r.python_fds} | {r.python_threads} | {_startup_cell(r)} |"
        )
    lines += [
        "",
        "Where the idle CPU goes: every `poll-interval-ms` each idle mirror asks the source for its log start, "
        "last stable offset and high watermark (ListOffsets requests from aiokafka, on the supervisor's event loop). "
        "Traffic is the TCP payload between the process and the broker's port over the window (`ss -ti`); the "
        "broker's CPU is its whole JVM's. Start-up CPU is used from process start to the last `mirror starting` "
        "line (each mirror checks its partition in the cluster metadata, finds its position in the destination and "
        "queries its offsets; the JVM builds the SparkSession meanwhile); SparkSession s is process start to "
        "`get_spark` returning.",
        "",
        "| mirrors | CPU event-loop thread (cores) | to / from broker (KiB/s) | CPU broker (cores) "
        "| start-up CPU s (Python / JVM) | SparkSession s | load avg (1 min) | log ERROR / WARN | drain s | exit |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        drain = "–" if r.drain_seconds is None else f"{r.drain_seconds:.1f}"
        spark = "–" if r.spark_seconds is None else f"{r.spark_seconds:.1f}"
        startup_cpu = "–"
        if r.startup_cpu_seconds is not None and r.startup_cpu_python_seconds is not None:
            startup_cpu = (
                f"{r.startup_cpu_python_seconds:.1f} / {r.startup_cpu_seconds - r.startup_cpu_python_seconds:.1f}"
            )
        lines.append(
            f"| {r.mirrors:,} | {_cores(r.cpu_python_loop_cores)} | {_traffic(r)} | {_cores(r.cpu_broker_cores)} "
            f"| {startup_cpu} | {spark} | {r.load_average:.1f} | {r.log_errors} / {r.log_warnings} | {drain} "
            f"| {r.exit_code} |"
        )
    errors = [r for r in results if r.first_error is not None]
    if errors:
        lines += ["", "First ERROR line of each run that logged one:", ""]
        lines += [f"- {r.mirrors:,} mirrors: `{r.first_error}`" for r in errors]
    profiled = [(r.mirrors, r.profile) for r in results if r.profile is not None]
    if profiled:
        lines += [
            "",
            "`py-spy record` of the Python process right after the window (shares of its busy samples; busy = a "
            "thread running Python code, not waiting in epoll or on a lock):",
            "",
        ]
        lines += [f"- {mirrors:,} mirrors: {_profile_text(profile)}" for mirrors, profile in profiled]
    return lines


def _profile_text(profile: ProfileSummary) -> str:
    return (
        f"{profile.samples} samples; by thread: {_shares(profile.threads)}; under the event loop's "
        f"dispatch (other threads: whole stack): {_shares(profile.below_loop)}; innermost frame in: "
        f"{_shares(profile.innermost)}; functions on the stack (event-loop plumbing left out): "
        f"{_shares(profile.functions)}"
    )


def console_idle(results: Sequence[IdleResult]) -> list[str]:
    lines = []
    for r in results:
        if r.failed is not None:
            startup = f"FAILED: {r.failed}, {r.started} started"
        elif r.startup_seconds is None:
            startup = f"TIMED OUT ({r.started} started)"
        else:
            startup = f"{r.startup_seconds:.1f} s"
        spark = "never" if r.spark_seconds is None else f"{r.spark_seconds:.1f} s"
        startup_cpu = ""
        if r.startup_cpu_seconds is not None and r.startup_cpu_python_seconds is not None:
            startup_cpu = (
                f", start-up CPU {r.startup_cpu_seconds:.1f} s (Python {r.startup_cpu_python_seconds:.1f} s, "
                f"JVM {r.startup_cpu_seconds - r.startup_cpu_python_seconds:.1f} s)"
            )
        drain = "" if r.drain_seconds is None else f"drain {r.drain_seconds:.1f} s, "
        lines.append(
            f"{r.mirrors:>5} idle mirrors: RSS python {_mib(r.rss_python_max_bytes)} MiB "
            f"(last {_mib(r.rss_python_last_bytes)}), JVM {_mib(r.rss_jvm_max_bytes)} MiB "
            f"(last {_mib(r.rss_jvm_last_bytes)}), total {_mib(r.rss_total_max_bytes)} MiB; "
            f"CPU python {r.cpu_python_cores:.3f} cores (event loop {r.cpu_python_loop_cores:.3f}), "
            f"JVM {r.cpu_jvm_cores:.3f}, broker {_cores(r.cpu_broker_cores)} over {r.sample_seconds:.0f} s "
            f"(load {r.load_average:.1f}); to / from broker {_traffic(r)} KiB/s; fds {r.python_fds}, "
            f"threads {r.python_threads} "
            f"(JVM {r.jvm_threads}); start-up {startup}, Spark {spark}{startup_cpu}; {drain}exit {r.exit_code}; "
            f"log ERROR {r.log_errors}, WARN {r.log_warnings}"
        )
        if r.first_error is not None:
            lines.append(f"        first ERROR: {r.first_error}")
        if r.jvm_busiest_threads:
            lines.append(f"        JVM busiest threads: {', '.join(f'{n} {c:.3f}' for n, c in r.jvm_busiest_threads)}")
        if r.profile is not None:
            lines.append(f"        py-spy: {_profile_text(r.profile)}")
    return lines


def _say(message: str) -> None:
    print(f"bench.idle: {message}", file=sys.stderr, flush=True)


def _source_setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, yaml.safe_load(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--counts", default="100,1000", help="comma-separated mirror counts (default 100,1000)")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds idle before sampling (default 30)")
    parser.add_argument("--sample", type=float, default=30.0, help="seconds sampled, once a second (default 30)")
    parser.add_argument("--startup-timeout", type=float, default=900.0, help="seconds allowed for start-up")
    parser.add_argument(
        "--profile", type=float, default=15.0, help="seconds of py-spy after the window (default 15, 0: none)"
    )
    parser.add_argument(
        "--source",
        type=_source_setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of every mirror's source block, e.g. request-timeout-ms=120000 (repeatable)",
    )
    parser.add_argument("--workdir", type=Path, help="keep configs, logs and profiles here (default: a temp dir)")
    args = parser.parse_args(argv)
    try:
        counts = [int(part) for part in args.counts.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--counts {args.counts!r}: expected comma-separated integers")
    if not counts or min(counts) < 1 or args.settle < 0 or args.sample < 1:
        parser.error("--counts must be >= 1, --settle >= 0, --sample >= 1")

    from testkit.kafka_broker import KafkaBroker
    from testkit.kafka_data import KafkaDataError

    began = time.monotonic()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-idle-"))
    workdir.mkdir(parents=True, exist_ok=True)
    _say(f"workdir {workdir}")
    try:
        with KafkaBroker(workdir / "broker") as broker:
            _say(f"broker {broker.bootstrap} (pid {broker.pid})")
            results = measure_idle(
                broker.bootstrap,
                workdir,
                counts,
                args.settle,
                args.sample,
                broker_pid=broker.pid,
                startup_timeout=args.startup_timeout,
                profile_seconds=args.profile,
                source_settings=dict(args.source),
            )
    except (IdleRunError, KafkaDataError) as exc:
        _say(f"FAILED: {exc}")
        return 1
    finally:
        shutil.rmtree(workdir / "broker" / "data", ignore_errors=True)  # empty partitions; the logs stay
    for line in console_idle(results):
        print(line)
    print()
    for line in markdown_idle(results):
        print(line)
    _say(f"done in {time.monotonic() - began:.0f} s; configs and logs under {workdir}")
    return 0 if all(r.failed is None for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
