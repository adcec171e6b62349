"""One mirror process of a scenario: the real CLI on a testkit target, started and finished the same way by every
kind of scenario (config and log kept in the scenario's directory; after the drain every destination is verified)."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testkit.mirror_run import MirrorRun, log_time, write_config
from testkit.targets import Target, verify_offsets

# The log lines the bench reads are INFO `key=value` lines, whatever this shell's environment says.
LOG_ENV = {"LOG_FORMAT": "kv", "LOG_LEVEL": "INFO"}


@dataclass(frozen=True)
class Context:
    """What the runner gives each scenario."""

    name: str  # unique in the run and a legal Kafka topic name: the scenario's topics and files are named after it
    bootstrap: str  # the source broker
    broker_pid: int | None
    logs: Path  # configs, mirror logs and profiles: kept
    scratch: Path  # destinations' data: removed after the scenario
    profile: bool  # py-spy and JFR on the throughput runs into the filesystem
    timeout: float  # seconds allowed for each wait
    spark: Mapping[str, Any]  # keys of every mirror config's `spark:` block (--spark), over the product's defaults


def start(
    ctx: Context,
    label: str,
    target: Target,
    mirrors: Sequence[Mapping[str, Any]],
    flush_ms: int,
    spark: Mapping[str, Any] | None = None,
    destination: Mapping[str, Any] | None = None,
) -> MirrorRun:
    """`python -m supervisor run` on `mirrors` (testkit.mirror_run's shape) into `target`; `destination`: keys added
    to the target's destination block."""
    config = write_config(
        ctx.logs / f"{label}.yaml",
        bootstrap=ctx.bootstrap,
        destination={**target.config({"max-time-ms": flush_ms}), **(destination or {})},
        mirrors=mirrors,
        spark={**ctx.spark, **(spark or {})},
    )
    return MirrorRun(config, ctx.logs / f"{label}.log", env={**LOG_ENV, **target.env()})


def start_selection(
    ctx: Context,
    label: str,
    target: Target,
    selection: Mapping[str, Any],
    flush_ms: int,
    metrics_port: int | None = None,
    destination: Mapping[str, Any] | None = None,
) -> MirrorRun:
    """`python -m supervisor run` on one entry selecting every partition of some topics: `selection` is the entry's
    `topic-regex` or `topics` (and `destination-name`, ...); `metrics_port` serves /metrics there; `destination`:
    keys added to the target's destination block."""
    document = {
        "destination": {**target.config({"max-time-ms": flush_ms}), **(destination or {})},
        "clusters": {"source": {"bootstrap-servers": ctx.bootstrap}},
        "mirrors": [{"name": label, "cluster": "source", **selection}],
        "spark": dict(ctx.spark),
    }
    config = ctx.logs / f"{label}.yaml"
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    env = {**LOG_ENV, **target.env()}
    return MirrorRun(config, ctx.logs / f"{label}.log", env=env, metrics_port=metrics_port)


def wait_for(run: MirrorRun, message: str, timeout: float, count: int = 1) -> list[dict[str, str]]:
    """The fields of the first `count` lines of `message`, once they are logged."""
    run.wait_for_log(f'msg="?{re.escape(message)}[" ]', timeout, count)
    return run.events(message)


def wait_landed(run: MirrorRun, target: Target, name: str, ends: Mapping[int, int], timeout: float) -> None:
    """Until the destination holds offsets up to ends[p] of each partition p. The target is asked only once the log
    shows each partition's last flush (asking a Kafka target opens a consumer per partition: polled every 0.2 s,
    that would take CPU from the run being measured). Mirrors are named `<topic>-<partition>` (testkit's default)."""

    def landed() -> bool:
        flushed = {int(f["mirror"].rsplit("-", 1)[1]): int(f["to"]) + 1 for f in run.events("flushed")}
        return all(flushed.get(p) == end for p, end in ends.items()) and all(
            target.next_offset(name, p) == end for p, end in ends.items()
        )

    run.wait_until(landed, timeout, f"{name} to hold offsets up to {dict(ends)}")


def flushes(run: MirrorRun) -> dict[str, Any]:
    """What the `flushed` lines say: how many, their bytes, write seconds and triggers, and when the last one was."""
    found = run.events("flushed")
    return {
        "flushes": len(found),
        "flush_bytes": sum(int(f["bytes"]) for f in found),
        "flush_seconds": sum(int(f["elapsed_ms"]) for f in found) / 1000,
        "triggers": dict(Counter(f["trigger"] for f in found)),
        "last_flush_at": max((log_time(f) for f in found), default=0.0),
    }


def finish(run: MirrorRun, target: Target, ends: Mapping[str, Mapping[int, int]]) -> dict[str, Any]:
    """SIGTERM (exit 0 expected), then check that each name's partition p holds source offsets 0..end-1 once each."""
    drain = run.drain()
    began = time.monotonic()
    for name, partitions in ends.items():
        verify_offsets(target, name, partitions)
    return {"drain_seconds": round(drain, 3), "verified": True, "verify_seconds": round(time.monotonic() - began, 2)}
