"""outage: two source clusters mirrored by one `run` process into a filesystem, both written steadily, and one of them
made to fail under the shared flush jobs (issue 46): what the healthy cluster's produce -> durable latency is while
the other is up, blackholed and killed.

Cluster a is the run's source broker; cluster b is a broker of its own behind the test kit's TCP proxy (b's mirrors
read it through the proxy, b's producer writes to it directly). Both topics have P partitions and get `rate`
records/s each (bench.steady), so their small flushes fall due together and share Spark jobs. After the warm-up,
three windows of `seconds` each:

1. **both up**: the baseline, in the same run;
2. **b blackholed**: the proxy forwards nothing and answers nothing (a dropped route: b's reads get no answer, no
   error), then the route is restored and b catches up for SETTLE_S;
3. **b killed**: b's producer has stopped; b gets a backlog (BURST records, acknowledged) and its broker is killed
   (SIGKILL) at once, while b's mirrors read it; started again when the window ends. (b's producer stops first: a
   single broker killed or stopped under a steady produce came back, in this bench, without the last records it had
   acknowledged and served, which the mirror rightly refuses as a source behind its destination.)

Per window: the latency of a's records produced in it (p50 / p90 / p99 / max, durable = the committed blob's ctime,
bench.durable), how many of a's flushes took longer than a second, and how often a /mirrors poll (every 0.5 s) found
one of a's mirrors `held-by-job`. After the producers stop, everything must land; the run is drained and both
destinations are checked offset by offset. Every setting is the product's default but `flush.max-time-ms`.

    python -m bench outage                              # the row alone, its report in WORKDIR
    python -m bench outage --set partitions=4 --set seconds=20
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import yaml

from bench.durable import filesystem_landings
from bench.mirror import LOG_ENV, Context, finish, wait_for
from bench.scenarios import Scenario
from bench.steady import SteadyProducer, produce_now
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic
from testkit.mirror_run import MirrorRun, log_time
from testkit.ports import free_port
from testkit.targets import FilesystemTarget, VerificationError
from testkit.tcp_proxy import TcpProxy

PRIME = 100  # records into partition 0 of each topic made durable before the clock starts
SETTLE_S = 10.0  # after the blackhole is lifted, before the broker is killed: b catches up
GAP_MAX_TIMES = 3  # max-times between the both-up window and the blackhole
POLL_S = 0.5  # how often /mirrors is asked during the windows
PHASES = ("both up", "b blackholed", "b killed")
BURST = 40_000  # records into b (over its partitions) just before its broker is killed


class StatePoller(threading.Thread):
    """Asks the run's /mirrors every POLL_S; per poll, when it was asked and the states of a's mirrors."""

    def __init__(self, port: int, prefix: str) -> None:
        super().__init__(name="bench-state-poller", daemon=True)
        self._url, self._prefix = f"http://127.0.0.1:{port}/mirrors", prefix
        self.polls: list[tuple[float, list[str]]] = []
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(POLL_S):
            asked = time.time()
            try:
                with urllib.request.urlopen(self._url, timeout=5) as response:
                    mirrors = json.loads(response.read())["mirrors"]
            except OSError:
                continue
            self.polls.append((asked, [m["state"] for m in mirrors if m["name"].startswith(self._prefix)]))

    def stop(self) -> None:
        self._done.set()
        self.join(10)

    def held(self, start: float, end: float) -> tuple[int, int]:
        """(polls in [start, end) that found one of a's mirrors held-by-job, polls in it)."""
        inside = [states for at, states in self.polls if start <= at < end]
        return sum(1 for states in inside if "held-by-job" in states), len(inside)


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    a_topic, b_topic = f"{ctx.name}-a", f"{ctx.name}-b"
    partitions = range(s.partitions)
    with (
        KafkaBroker(advertised_port=free_port()) as b_broker,
        TcpProxy(b_broker.external_port or 0, port=b_broker.advertised_port) as proxy,
    ):
        through_proxy = b_broker.advertised_bootstrap
        assert through_proxy is not None
        create_topic(ctx.bootstrap, a_topic, s.partitions)
        create_topic(b_broker.bootstrap, b_topic, s.partitions)
        target = FilesystemTarget(ctx.scratch / "filesystem")
        document = {
            "destination": target.config({"max-time-ms": s.max_time_ms}),
            "clusters": {"a": {"bootstrap-servers": ctx.bootstrap}, "b": {"bootstrap-servers": through_proxy}},
            "mirrors": [
                {"name": "a", "cluster": "a", "topics": [a_topic]},
                {"name": "b", "cluster": "b", "topics": [b_topic]},
            ],
            "spark": dict(ctx.spark),
        }
        config = ctx.logs / "outage.yaml"
        config.write_text(yaml.safe_dump(document, sort_keys=False))
        port = free_port()
        run = MirrorRun(config, ctx.logs / "outage.log", env={**LOG_ENV, **target.env()}, metrics_port=port)
        with run:
            wait_for(run, "spark session ready", ctx.timeout)
            wait_for(run, "mirror starting", ctx.timeout, count=2 * s.partitions)
            produce_now(ctx.bootstrap, a_topic, {0: PRIME}, s.value_size)
            produce_now(b_broker.bootstrap, b_topic, {0: PRIME}, s.value_size)
            _wait_landed(run, target, {a_topic: {0: PRIME}, b_topic: {0: PRIME}}, ctx.timeout)
            seconds = s.warmup + 3 * s.seconds + SETTLE_S + GAP_MAX_TIMES * s.max_time_ms / 1000
            producers = [
                SteadyProducer(ctx.bootstrap, a_topic, s.partitions, s.rate, s.value_size, seconds),
                SteadyProducer(
                    b_broker.bootstrap, b_topic, s.partitions, s.rate, s.value_size, seconds - s.seconds - 1.0
                ),
            ]
            poller = StatePoller(port, "a.")
            for producer in producers:
                producer.start()
                producer.started.wait()
            poller.start()
            began = producers[0].began + s.warmup
            # A gap after the both-up window, so that its last records are durable before b fails.
            gap = GAP_MAX_TIMES * s.max_time_ms / 1000
            blackholed = began + s.seconds + gap
            killed = blackholed + s.seconds + SETTLE_S
            windows = {
                "both up": (began, began + s.seconds),
                "b blackholed": (blackholed, blackholed + s.seconds),
                "b killed": (killed, killed + s.seconds),
            }
            _sleep_until(windows["b blackholed"][0])
            proxy.blackhole(True)
            _sleep_until(windows["b blackholed"][1])
            proxy.blackhole(False)
            producers[1].join_checked(ctx.timeout)
            burst = {p: BURST // s.partitions for p in partitions}
            _sleep_until(windows["b killed"][0])
            produce_now(b_broker.bootstrap, b_topic, burst, s.value_size)
            b_broker.kill()
            _sleep_until(windows["b killed"][1])
            b_broker.start()
            for producer in producers:
                producer.join_checked(ctx.timeout)
            poller.stop()
            ends = {
                topic: {p: producer.sent[p] + (PRIME if p == 0 else 0) + extra.get(p, 0) for p in partitions}
                for topic, producer, extra in zip((a_topic, b_topic), producers, ({}, burst), strict=True)
            }
            _wait_landed(run, target, ends, ctx.timeout)
            flushed = [f for f in run.events("flushed") if f["mirror"].startswith("a.")]
            retries = run.events("source unavailable, retrying")
            result = finish(run, target, ends)
        landings = filesystem_landings(target, a_topic, partitions)
        if len(landings) != sum(ends[a_topic].values()):
            raise VerificationError(f"durable times of {len(landings)} of a's records")
    row = {
        "partitions": s.partitions,
        "rate": s.rate,
        "value_size": s.value_size,
        "max_time_ms": s.max_time_ms,
        "warmup_seconds": s.warmup,
        "window_seconds": s.seconds,
        "retries": {
            operation: sum(1 for r in retries if r["operation"] == operation)
            for operation in ("read", "offset query", "metadata query")
        },
        **result,
    }
    for phase in PHASES:
        start, end = windows[phase]
        held, polls = poller.held(start, end)
        slow = [f for f in flushed if start <= log_time(f) < end and int(f["elapsed_ms"]) > 1000]
        yield {
            **row,
            "phase": phase,
            **landings.summary(start, end),
            "slow_flushes": len(slow),
            "slowest_flush_ms": max((int(f["elapsed_ms"]) for f in slow), default=0),
            "held_polls": held,
            "polls": polls,
        }


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def _wait_landed(run: MirrorRun, target: FilesystemTarget, ends: dict[str, dict[int, int]], timeout: float) -> None:
    def landed() -> bool:
        return all(target.next_offset(name, p) == end for name, found in ends.items() for p, end in found.items())

    run.wait_until(landed, timeout, f"the destination to hold offsets up to {ends}", interval=1.0)
