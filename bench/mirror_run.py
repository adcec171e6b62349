"""Run the real CLI (`python -m supervisor run`) over a backlog and time it from its own log lines."""

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
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from config.model import FilesystemDestination, FlushConfig, SparkConfig
from sinks.blob_chain import parse_blob_name

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
    offsets_per_task: int = SparkConfig().offsets_per_task
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_log_level: str = SparkConfig().log_level


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


class MirrorRunError(RuntimeError):
    pass


def write_config(
    path: Path,
    *,
    bootstrap: str,
    root: Path,
    topic: str,
    partitions: int,
    settings: MirrorSettings,
    event_log_dir: Path,
) -> Path:
    """The mirror's config; Spark also writes its event log (job and task timings) to `event_log_dir`."""
    event_log_dir.mkdir(parents=True, exist_ok=True)
    spark: dict[str, Any] = {
        "max-offsets-per-read": settings.max_offsets_per_read,
        "offsets-per-task": settings.offsets_per_task,
        "log-level": settings.spark_log_level,
        "conf": {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_log_dir.resolve().as_uri(),
            "spark.eventLog.compress": "false",
            **settings.spark_conf,
        },
    }
    config = {
        "destination": {
            "type": "filesystem",
            "root": str(root),
            "compression": settings.compression,
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


def run_mirror(
    config: Path, *, root: Path, topic: str, ends: dict[int, int], log_path: Path, event_log_dir: Path, timeout: float
) -> MirrorResult:
    """Start the CLI, wait until every partition's chain ends at its end offset, SIGTERM it, verify the files.

    The clock starts when the mirror is ready to read: at the later of its first `mirror starting` line and its
    first Spark job (the supervisor may log `mirror starting` while the Spark JVM is still starting).
    """
    env = dict(os.environ)
    env["MIRROR_V3_METRICS_PORT"] = "0"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("LOG_FORMAT", None)  # key=value lines, which this module parses
    env["LOG_LEVEL"] = "INFO"
    directories = {partition: root / topic / str(partition) for partition in ends}
    with log_path.open("wb") as log_file:
        process_start = time.time()
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", "--config", str(config)],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_file,
        )
        try:
            deadline = time.monotonic() + timeout
            started_at: float | None = None
            while True:
                if proc.poll() is not None:
                    raise MirrorRunError(
                        f"mirror exited {proc.returncode} before finishing{_diagnosis(log_path)}:\n{_tail(log_path)}"
                    )
                if time.monotonic() > deadline:
                    raise MirrorRunError(f"mirror did not finish within {timeout} s:\n{_tail(log_path)}")
                if started_at is None:
                    starts = [_log_time(fields) for fields in _events(log_path, "mirror starting")]
                    if len(starts) == len(ends):
                        started_at = min(starts)
                if all(chain_next(directories[p]) == end for p, end in ends.items()):
                    done_at = time.time()
                    break
                time.sleep(0.02)
            if started_at is None:  # finished between two polls of the log
                started_at = min(_log_time(fields) for fields in _events(log_path, "mirror starting"))
            stop_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            exit_code = proc.wait(120)
            drain_seconds = time.monotonic() - stop_at
        finally:
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
    files, parquet_bytes = verify_chains(directories, ends)
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
    )


def chain_next(directory: Path) -> int | None:
    """`to + 1` of the chain's last file (temporaries and other names ignored), None while it has none."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    lasts = [blob.last for blob in map(parse_blob_name, names) if blob is not None]
    return max(lasts) + 1 if lasts else None


def verify_chains(directories: dict[int, Path], ends: dict[int, int]) -> tuple[int, int]:
    """Each chain is contiguous from 0, holds offsets 0..end-1 exactly once, each inside its file's range.

    Reads only the `offset` column. Returns (file count, total file bytes).
    """
    files = size = 0
    for partition, directory in directories.items():
        blobs = sorted(blob for blob in map(parse_blob_name, os.listdir(directory)) if blob is not None)
        expected_first = 0
        offsets: list[pa.Array] = []
        for blob in blobs:
            if blob.first != expected_first:
                raise MirrorRunError(
                    f"{directory}: chain gap or overlap at {blob.name} (expected from {expected_first})"
                )
            expected_first = blob.last + 1
            path = directory / blob.name
            column = pq.read_table(path, columns=["offset"]).column("offset").combine_chunks()
            if len(column) and (pc.min(column).as_py() < blob.first or pc.max(column).as_py() > blob.last):
                raise MirrorRunError(f"{path} holds offsets outside its name's range")
            offsets.append(column)
            files += 1
            size += path.stat().st_size
        end = ends[partition]
        if expected_first != end:
            raise MirrorRunError(f"{directory}: chain ends at {expected_first}, expected {end}")
        every = pa.chunked_array(offsets, type=pa.int64()).combine_chunks()
        rows, distinct = len(every), len(pc.unique(every))
        if rows != end or distinct != end or (end and (pc.min(every).as_py(), pc.max(every).as_py()) != (0, end - 1)):
            raise MirrorRunError(
                f"{directory}: {rows} rows, {distinct} distinct offsets; expected 0..{end - 1} once each"
            )
    return files, size


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
        partition=int(Path(fields["path"]).parent.name),
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
