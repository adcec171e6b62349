"""Run the real CLI (`python -m supervisor run`) over a backlog and time it from its own log lines.

The destination (a directory, or a bucket on an S3 server) is a `bench.targets.Target`: it fills in the config's
`destination:` block, tells when the chains reach their end, and gives the objects back for verification.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from bench.cpu import CpuMonitor
from bench.pyspy import ProfileSummary, PySpyRecorder, summarise
from bench.targets import StoreUsage, Target, VerificationError
from config.model import FilesystemDestination, FlushConfig, KafkaDestination, S3Destination, SparkConfig

REPO = Path(__file__).resolve().parent.parent
_FIELD = re.compile(r'([A-Za-z_][\w.-]*)=("(?:[^"\\]|\\.)*"|\S*)')


@dataclass(frozen=True)
class MirrorSettings:
    """What the benchmark's config file says; every default is config/model.py's."""

    flush_max_time_ms: int = FlushConfig().max_time_ms
    flush_max_bytes: int = FlushConfig().max_bytes
    flush_max_offsets: int = FlushConfig().max_offsets
    compression: str = FilesystemDestination(root="x").compression
    max_offsets_per_read: int = SparkConfig().max_offsets_per_read
    max_bytes_per_read: int = SparkConfig().max_bytes_per_read
    offsets_per_task: int = SparkConfig().offsets_per_task
    bytes_per_task: int = SparkConfig().bytes_per_task
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_log_level: str = SparkConfig().log_level
    s3_multipart_threshold_bytes: int = S3Destination(bucket="x").multipart_threshold_bytes
    s3_part_size_bytes: int = S3Destination(bucket="x").part_size_bytes
    kafka_compression: str = KafkaDestination(bootstrap_servers="x").compression


@dataclass(frozen=True)
class Flush:
    partition: int
    first: int
    last: int
    count: int
    bytes: int
    elapsed_ms: int
    trigger: str
    logged_at: float  # epoch seconds


@dataclass(frozen=True)
class SparkJob:
    """One Spark job (one range read) from the event log; times in epoch seconds."""

    submitted: float
    completed: float
    tasks: int
    task_seconds: float  # executor run time, summed over tasks
    cpu_seconds: float
    gc_seconds: float
    result_bytes: int
    records_read: int

    @property
    def seconds(self) -> float:
        return self.completed - self.submitted


@dataclass(frozen=True)
class MirrorResult:
    records: int
    startup_seconds: float  # process start -> ready: the later of the first `mirror starting` and the first Spark job
    starting_logged_seconds: float  # process start -> first `mirror starting` log line
    backlog_seconds: float  # ready -> every partition's chain reaches its end
    total_seconds: float  # process start -> done
    ready_at: float  # epoch seconds
    done_at: float
    drain_seconds: float  # SIGTERM -> exit
    exit_code: int
    flushes: list[Flush]
    jobs: list[SparkJob]
    files: int
    parquet_bytes: int
    store: StoreUsage | None  # what the S3 server did from process start to done; None for the filesystem
    cpu: dict[str, float] = field(default_factory=dict)  # CPU seconds of each process inside the backlog window
    profile: ProfileSummary | None = None  # py-spy's view of the mirror process over the backlog


class MirrorRunError(RuntimeError):
    pass


def write_config(
    path: Path,
    *,
    bootstrap: str,
    target: Target,
    topic: str,
    partitions: int,
    settings: MirrorSettings,
    event_log_dir: Path,
) -> Path:
    """The mirror's config; Spark also writes its event log (job and task timings) to `event_log_dir`."""
    event_log_dir.mkdir(parents=True, exist_ok=True)
    spark: dict[str, Any] = {
        "max-offsets-per-read": settings.max_offsets_per_read,
        "max-bytes-per-read": settings.max_bytes_per_read,
        "offsets-per-task": settings.offsets_per_task,
        "bytes-per-task": settings.bytes_per_task,
        "log-level": settings.spark_log_level,
        "conf": {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log_dir.resolve().as_uri(),
            "spark.eventLog.compress": "false",
            **settings.spark_conf,
        },
    }
    destination = target.destination()
    if destination["type"] == "s3":
        destination["multipart-threshold-bytes"] = settings.s3_multipart_threshold_bytes
        destination["part-size-bytes"] = settings.s3_part_size_bytes
    config = {
        "destination": {
            "compression": settings.compression,
            **destination,  # a Kafka target brings its own record-batch compression
            "flush": {
                "max-time-ms": settings.flush_max_time_ms,
                "max-bytes": settings.flush_max_bytes,
                "max-offsets": settings.flush_max_offsets,
            },
        },
        "mirrors": [
            {
                "name": f"bench-{partition}",
                "source": {"bootstrap-servers": bootstrap},
                "topic": topic,
                "partition": partition,
            }
            for partition in range(partitions)
        ],
        "spark": spark,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def start_mirror(config: Path, log_file: IO[bytes], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`python -m supervisor run --config <config>` from this checkout, its stderr (the log) into `log_file`.

    No metrics port; `key=value` log lines at INFO (what `_events` parses); `env` adds to this process's environment.
    """
    process_env = dict(os.environ)
    process_env["MIRROR_V3_METRICS_PORT"] = "0"
    process_env["PYTHONPATH"] = str(REPO) + os.pathsep + process_env.get("PYTHONPATH", "")
    process_env.pop("LOG_FORMAT", None)
    process_env["LOG_LEVEL"] = "INFO"
    process_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor", "run", "--config", str(config)],
        cwd=REPO,
        env=process_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )


def run_mirror(
    config: Path,
    *,
    target: Target,
    ends: dict[int, int],
    log_path: Path,
    event_log_dir: Path,
    timeout: float,
    watch: dict[str, int] | None = None,
    profile: Path | None = None,
) -> MirrorResult:
    """Start the CLI, wait until every partition's chain ends at its end offset, SIGTERM it, verify the blobs.

    The clock starts when the mirror is ready to read: at the later of its first `mirror starting` line and its
    first Spark job (the supervisor may log `mirror starting` while the Spark JVM is still starting). It stops at
    the first look at the destination that finds every chain at its end. The log is read every 20 ms; the chains are
    looked at on each such tick where the log shows a new `flushed` line (a blob was just committed) and otherwise
    at least every `target.idle_look_seconds` (0 for the filesystem: every tick).

    The CPU time of the mirror, its Spark JVM and the `watch` processes (label -> pid: brokers, the S3 server) is
    sampled throughout and reported for the backlog window. With `profile`, py-spy samples the mirror process from
    its `spark session ready` line to the end of the backlog and writes its folded stacks there.
    """
    with log_path.open("wb") as log_file:
        target.begin_usage()
        process_start = time.time()
        proc = start_mirror(config, log_file, target.env())
        monitor = CpuMonitor(named=dict(watch or {}), root=proc.pid)
        recorder: PySpyRecorder | None = None
        try:
            deadline = time.monotonic() + timeout
            started_at: float | None = None
            flushed = _LineCounter(log_path, "flushed")
            looked_at_flushes, looked_at = -1, float("-inf")
            while True:
                if proc.poll() is not None:
                    raise MirrorRunError(
                        f"mirror exited {proc.returncode} before finishing{_diagnosis(log_path)}:\n{_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise MirrorRunError(f"mirror did not finish within {timeout} s:\n{_tail(log_path)}")
                monitor.sample()
                if started_at is None:
                    starts = [_log_time(fields) for fields in _events(log_path, "mirror starting")]
                    if len(starts) == len(ends):
                        started_at = min(starts)
                if profile is not None and recorder is None and _events(log_path, "spark session ready"):
                    recorder = PySpyRecorder(proc.pid, profile)
                    # Its sampling takes CPU from the same machine: account for it next to the others.
                    monitor.named["py-spy (profiler)"] = recorder.pid
                flushes_logged, now = flushed.count(), time.monotonic()
                if flushes_logged != looked_at_flushes or now - looked_at >= target.idle_look_seconds:
                    looked_at_flushes, looked_at = flushes_logged, now
                    if all(target.chain_next(p) == end for p, end in ends.items()):
                        done_at = time.time()
                        monitor.sample(force=True)
                        break
                time.sleep(0.02)
            store = target.end_usage()
            if recorder is not None:
                recorder.stop()
            if started_at is None:  # finished between two polls of the log
                started_at = min(_log_time(fields) for fields in _events(log_path, "mirror starting"))
            stop_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(120)
            drain_seconds = time.monotonic() - stop_at
        finally:
            if recorder is not None:
                recorder.stop()
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    if exit_code != 0:
        raise MirrorRunError(f"mirror exited {exit_code} after SIGTERM (expected 0):\n{_tail(log_path)}")
    flushes = [_flush(fields) for fields in _events(log_path, "flushed")]
    jobs = spark_jobs(event_log_dir)
    if not jobs:
        raise MirrorRunError(f"no Spark job in the event log under {event_log_dir}")
    ready_at = max(started_at, jobs[0].submitted)
    try:
        files, parquet_bytes = target.verify(ends)
    except VerificationError as exc:
        raise MirrorRunError(str(exc)) from None
    return MirrorResult(
        records=sum(ends.values()),
        startup_seconds=ready_at - process_start,
        starting_logged_seconds=started_at - process_start,
        backlog_seconds=done_at - ready_at,
        total_seconds=done_at - process_start,
        ready_at=ready_at,
        done_at=done_at,
        drain_seconds=drain_seconds,
        exit_code=exit_code,
        flushes=flushes,
        jobs=jobs,
        files=files,
        parquet_bytes=parquet_bytes,
        store=store,
        cpu=monitor.between(ready_at, done_at),
        profile=summarise(profile) if profile is not None and profile.exists() else None,
    )


def spark_jobs(event_log_dir: Path) -> list[SparkJob]:
    """Every job of the (single) application whose event log is in `event_log_dir`, in submission order."""
    logs = sorted(event_log_dir.iterdir())
    if len(logs) != 1:
        raise MirrorRunError(f"expected one Spark event log in {event_log_dir}, found {[p.name for p in logs]}")
    submitted: dict[int, float] = {}
    completed: dict[int, float] = {}
    stage_job: dict[int, int] = {}
    tasks: dict[int, list[dict[str, Any]]] = {}
    for line in _event_lines(logs[0]):
        if '"SparkListenerJob' in line or '"SparkListenerTaskEnd"' in line:
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                job = int(event["Job ID"])
                submitted[job] = event["Submission Time"] / 1000
                for stage in event.get("Stage IDs", []):
                    stage_job[int(stage)] = job
            elif kind == "SparkListenerJobEnd":
                completed[int(event["Job ID"])] = event["Completion Time"] / 1000
            elif kind == "SparkListenerTaskEnd" and int(event["Stage ID"]) in stage_job:
                tasks.setdefault(stage_job[int(event["Stage ID"])], []).append(event.get("Task Metrics") or {})
    jobs = []
    for job, began in sorted(submitted.items(), key=lambda item: item[1]):
        metrics = tasks.get(job, [])
        jobs.append(
            SparkJob(
                submitted=began,
                completed=completed.get(job, began),
                tasks=len(metrics),
                task_seconds=sum(m.get("Executor Run Time", 0) for m in metrics) / 1000,
                cpu_seconds=sum(m.get("Executor CPU Time", 0) for m in metrics) / 1e9,
                gc_seconds=sum(m.get("JVM GC Time", 0) for m in metrics) / 1000,
                result_bytes=sum(m.get("Result Size", 0) for m in metrics),
                records_read=sum((m.get("Input Metrics") or {}).get("Records Read", 0) for m in metrics),
            )
        )
    return jobs


def _event_lines(path: Path) -> Iterator[str]:
    """Lines of an event log: one file, or (rolling logs, Spark 4's default) a directory of `events_<n>_<app>`."""
    if path.is_dir():
        parts = [p for p in path.iterdir() if p.name.startswith("events_")]
        files = sorted(parts, key=lambda p: int(p.name.split("_")[1]) if p.name.split("_")[1].isdigit() else 0)
    else:
        files = [path]
    for file in files:
        with file.open(encoding="utf-8", errors="replace") as lines:
            yield from lines


class _LineCounter:
    """Counts the log lines of one message, reading only what was appended since the last count."""

    def __init__(self, log_path: Path, message: str) -> None:
        self._path = log_path
        self._markers = (f"msg={message} ".encode(), f'msg="{message}"'.encode())
        self._offset = 0
        self._partial = b""
        self._count = 0

    def count(self) -> int:
        with self._path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        self._count += sum(1 for line in lines if any(marker in line for marker in self._markers))
        return self._count


def _events(log_path: Path, message: str) -> list[dict[str, str]]:
    events = []
    for line in log_path.read_text(errors="replace").splitlines():
        if f"msg={message} " not in line and f'msg="{message}"' not in line:
            continue
        fields = {key: value[1:-1] if value.startswith('"') else value for key, value in _FIELD.findall(line)}
        if fields.get("msg") == message:
            events.append(fields)
    return events


def _log_time(fields: dict[str, str]) -> float:
    """`ts=2025-01-02T03:04:05.678Z` as epoch seconds."""
    stamp = fields["ts"].rstrip("Z")
    whole, _, millis = stamp.partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + int(millis or 0) / 1000


def _flush(fields: dict[str, str]) -> Flush:
    return Flush(
        partition=int(fields["mirror"].rsplit("-", 1)[1]),  # the benchmark names its mirrors bench-<partition>
        first=int(fields["from"]),
        last=int(fields["to"]),
        count=int(fields["count"]),
        bytes=int(fields["bytes"]),
        elapsed_ms=int(fields["elapsed_ms"]),
        trigger=fields["trigger"],
        logged_at=_log_time(fields),
    )


def _diagnosis(log_path: Path) -> str:
    text = log_path.read_text(errors="replace")
    if "java.lang.OutOfMemoryError" in text:
        return (
            " (the Spark JVM ran out of heap: give it more, e.g. --spark-conf spark.driver.memory=4g, or make each "
            "task smaller with --offsets-per-task)"
        )
    return ""


def _tail(path: Path, lines: int = 30) -> str:
    """The log's last lines, without Java stack frames."""
    kept = [line for line in path.read_text(errors="replace").splitlines() if not line.startswith(("\tat ", "\t... "))]
    return "\n".join(kept[-lines:])
