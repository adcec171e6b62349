"""The one scenario runner: the micro benchmarks (pytest-benchmark), then every row of a scenario table against one
source broker, each measurement appended as a JSON line to `<workdir>/results.jsonl` as soon as it is made.

The first line describes the machine; a scenario that fails leaves a line with its error (the report shows it) and
the run goes on with the next.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import confluent_kafka
import psutil  # type: ignore[import-untyped]  # no type information in the package

from bench import compaction, estate, idle, latency, outage, restart, restore, schemas, throughput
from bench.mirror import Context
from bench.scenarios import Scenario
from testkit.kafka_broker import KafkaBroker

REPO = Path(__file__).resolve().parent.parent
RESULTS = "results.jsonl"
MICRO = "micro.json"
MEASURES: dict[str, Callable[[Scenario, Context], Iterator[dict[str, Any]]]] = {
    "throughput": throughput.measure,
    "latency": latency.measure,
    "restart": restart.measure,
    "idle": idle.measure,
    "restore": restore.measure,
    "schemas": schemas.measure,
    "estate-steady": estate.measure,
    "outage": outage.measure,
    "compaction": compaction.measure,
}


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def append(workdir: Path, row: dict[str, Any]) -> None:
    with (workdir / RESULTS).open("a") as results:
        results.write(json.dumps(row, sort_keys=True) + "\n")


def _output(*command: str) -> str:
    try:
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "unknown"
    return (done.stdout or done.stderr).strip()


def machine(command: str) -> dict[str, Any]:
    """What the numbers were measured on, and how busy the machine was when the run began."""
    model = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
    dirty = _output("git", "status", "--porcelain", "--untracked-files=no")
    versions = {name: metadata.version(name) for name in ("pyspark", "pyarrow", "confluent-kafka", "moto", "psutil")}
    return {
        "kind": "machine",
        "command": command,
        "started": time.time(),
        "cpus": len(os.sched_getaffinity(0)),
        "cpu_model": model.group(1) if model else platform.processor(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "versions": {**versions, "librdkafka": confluent_kafka.libversion()[0]},
        "java": _output("java", "-version").splitlines()[0],
        "commit": _output("git", "rev-parse", "--short", "HEAD") + (" (uncommitted changes)" if dirty else ""),
        "load": os.getloadavg(),
    }


def run_micro(workdir: Path, quick: bool) -> bool:
    """bench/micro with pytest-benchmark; its JSON goes to `<workdir>/micro.json`."""
    command = [sys.executable, "-m", "pytest", str(REPO / "bench" / "micro"), "-q", "-p", "no:cacheprovider"]
    command += ["-o", "addopts=", f"--benchmark-json={workdir / MICRO}"]
    if quick:
        command += ["--benchmark-max-time=0.1", "--benchmark-min-rounds=3"]
    say("micro benchmarks: " + " ".join(command[1:]))
    return subprocess.run(command, cwd=REPO, check=False).returncode == 0


def slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def run_table(
    table: Sequence[Scenario], workdir: Path, *, repeat: int, profile: bool, timeout: float, spark: Mapping[str, Any]
) -> int:
    """Every scenario `repeat` times against one source broker; returns how many failed."""
    if not table:
        return 0
    failed = 0
    with KafkaBroker() as broker:
        say(f"source broker {broker.bootstrap}")
        for round_ in range(1, repeat + 1):
            for scenario in table:
                name = f"{slug(scenario.name)}-{round_}"
                logs = workdir / name
                logs.mkdir()
                say(f"{scenario.name} (round {round_} of {repeat}); logs in {logs}")
                began = time.monotonic()
                with tempfile.TemporaryDirectory(prefix="mirror-v3-bench-") as scratch:
                    ctx = Context(name, broker.bootstrap, broker.pid, logs, Path(scratch), profile, timeout, spark)
                    head = {"scenario": scenario.name, "kind": scenario.kind, "round": round_}
                    try:
                        for row in MEASURES[scenario.kind](scenario, ctx):
                            append(workdir, {**head, **row})
                            say(json.dumps(row, sort_keys=True)[:400])
                    except Exception as exc:
                        failed += 1
                        traceback.print_exc()
                        append(workdir, {**head, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"})
                say(f"{scenario.name}: {time.monotonic() - began:.0f} s")
    return failed
