"""Idle mirrors: what N mirrors with nothing to read cost in one mirror-v3 process (one config entry per
partition, or one `topic-regex` selection of them all: the estate form, whose start-up reads the metadata once).

N empty source partitions (topics of up to 100 partitions), one mirror each, filesystem destination, every other
setting default. Once every mirror logged `mirror starting` and the SparkSession is up, the process is left alone
for the settling time, then psutil samples it once a second over the window: resident memory of the Python process
and of everything below it (Spark's JVM), their CPU as average cores, and the source broker's; open fds and threads
at the end.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import psutil  # type: ignore[import-untyped]  # no type information in the package

from bench.mirror import Context, finish, start, start_selection, wait_for
from bench.procs import JVM, MIRROR, Sampler
from bench.scenarios import Scenario
from testkit.kafka_data import create_topic
from testkit.mirror_run import log_time
from testkit.targets import FilesystemTarget

PER_TOPIC = 100
MIB = 1024 * 1024


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    layout = {
        f"{ctx.name}-{i}": min(PER_TOPIC, s.mirrors - first) for i, first in enumerate(range(0, s.mirrors, PER_TOPIC))
    }
    for topic, partitions in layout.items():
        create_topic(ctx.bootstrap, topic, partitions, timeout=300)  # leader election of 100 partitions takes a while
    target = FilesystemTarget(ctx.scratch / "idle")
    mirrors = [{"topic": topic, "partition": p} for topic, partitions in layout.items() for p in range(partitions)]
    if s.selection:
        run = start_selection(ctx, "idle", target, {"topic-regex": re.escape(ctx.name) + "-[0-9]+"}, 1000)
    else:
        run = start(ctx, "idle", target, mirrors, 1000)
    with run:
        wait_for(run, "spark session ready", ctx.timeout)
        started = max(log_time(f) for f in wait_for(run, "mirror starting", ctx.timeout, count=s.mirrors))
        run.wait_until(lambda: time.time() >= started + s.warmup, s.warmup + 60, "the settling time")
        with Sampler(run.pid, {"source broker": ctx.broker_pid}, interval=1.0) as sampler:
            end = time.time() + s.seconds
            run.wait_until(lambda: time.time() >= end, s.seconds + 60, "the end of the sampled window")
        process = psutil.Process(run.pid)
        threads = process.num_threads(), sum(child.num_threads() for child in process.children(recursive=True))
        fds = process.num_fds()
        result = finish(run, target, {topic: dict.fromkeys(range(n), 0) for topic, n in layout.items()})
    first, last = sampler.samples[0], sampler.samples[-1]
    cpu = sampler.cpu_between(first.at, last.at)
    rss = {label: max(sample.rss.get(label, 0) for sample in sampler.samples) for label in (MIRROR, JVM)}
    yield {
        "mirrors": s.mirrors,
        "selection": s.selection,
        "window_seconds": round(last.at - first.at, 1),
        "settle_seconds": s.warmup,
        "startup_seconds": round(started - run.started_at, 2),
        "rss_python_mib": round(rss[MIRROR] / MIB, 1),
        "rss_jvm_mib": round(rss[JVM] / MIB, 1),
        "rss_total_mib": round(max(sum(sample.rss.values()) for sample in sampler.samples) / MIB, 1),
        "cores": {label: round(seconds / (last.at - first.at), 4) for label, seconds in cpu.items()},
        "python_threads": threads[0],
        "jvm_threads": threads[1],
        "python_fds": fds,
        **result,
    }
