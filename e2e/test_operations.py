"""What an operator's tooling reads from a running process: JSON logs end to end (the JVM's lines included,
through a failing Spark start too), a /readyz that waits for Spark and names an unusable master, and a source
cluster down at the start, then blackholed, then killed: named (log, gauge, /readyz, /mirrors, `status`) while the
other cluster's mirrors go on."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e.harness import (
    SOURCE_DEFAULTS,
    assert_exactly_once,
    backlog,
    mirror_config,
    one_mirror,
    readyz,
    start,
    status_json,
    write_yaml,
)
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce
from testkit.mirror_run import MirrorRun, log_time, run_cli
from testkit.ports import free_port
from testkit.targets import FilesystemTarget
from testkit.tcp_proxy import TcpProxy


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a log, each of which must be one JSON object."""
    lines = path.read_text().splitlines()
    assert lines, "empty log"
    parsed = []
    for number, line in enumerate(lines, 1):
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"line {number} of {path} is not JSON: {line[:300]}") from None
    return parsed


def mirror_states(port: int) -> dict[str, str]:
    """Each mirror's state, as the process's /mirrors says."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/mirrors", timeout=5) as response:
        return {m["name"]: m["state"] for m in json.loads(response.read())["mirrors"]}


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_json_logs_end_to_end_and_readiness_waits_for_the_spark_session(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [2_000])
    # Spark at INFO: plenty of the JVM's own lines go through the relay.
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, spark={"log-level": "INFO"})
    log = tmp_path / "run.log"
    port = free_port()
    with MirrorRun(config, log, metrics_port=port, env={**fs.env(), "LOG_FORMAT": "json"}) as run:
        ready_before_spark = False
        while not ready(port):
            assert run.running, run.tail()
            time.sleep(0.05)
        # The session's line is logged before readiness turns: it must be there by now.
        ready_before_spark = "spark session ready" not in run.log_text()
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 2_000})
        run.drain()
    assert not ready_before_spark
    events = json_lines(log)
    jvm = [e for e in events if "jvm_logger" in e]
    assert len(jvm) > 5 and all(e["level"] in ("DEBUG", "INFO", "WARNING") for e in jvm), jvm[:5]
    assert not [e for e in events if e["level"] in ("ERROR", "CRITICAL")]  # a clean run and a clean shutdown
    assert_exactly_once(kafka.bootstrap, fs, topic_name)


def test_a_failing_spark_start_logs_json_with_the_jvms_stack_trace_in_one_event(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [10])
    # A Java that cannot start the launcher: its multi-line stack trace is the JVM's output here.
    java_home = tmp_path / "broken-java"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        "echo 'Exception in thread \"main\" java.lang.UnsupportedClassVersionError: launcher/Main' >&2\n"
        "printf '\\tat java.base/java.lang.ClassLoader.defineClass1(Native Method)\\n' >&2\n"
        "printf '\\tat java.base/java.lang.ClassLoader.defineClass(ClassLoader.java:1027)\\n' >&2\n"
        "exit 1\n"
    )
    java.chmod(0o755)
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name)
    log = tmp_path / "run.log"
    with start(config, log, fs, LOG_FORMAT="json", JAVA_HOME=str(java_home)) as run:
        line = run.expect_failure(code=3)
    failure = json.loads(line)
    assert failure["msg"] == "cannot start Spark" and failure["logger"] == "mirror_v3.supervisor", failure
    assert failure["exc_info"].startswith("Traceback (most recent call last):"), failure  # the cause's, in its line
    events = json_lines(log)
    # One event holds the whole trace (a CI run once found two events naming the exception, without saying which:
    # the failure message shows them now).
    traces = [e for e in events if "UnsupportedClassVersionError" in e["msg"]]
    assert len(traces) == 1, traces
    assert traces[0]["msg"].count("\tat java.base/") == 2 and traces[0]["jvm_logger"] == "jvm", traces


def test_an_unreachable_spark_master_fails_at_once_naming_it_and_the_process_is_never_ready(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [10])
    master = f"spark://127.0.0.1:{free_port()}"
    config = mirror_config(
        tmp_path / "mirror.yaml", kafka.bootstrap, fs, [{"topic": topic_name, "partition": 0}], spark={"master": master}
    )
    port = free_port()
    began = time.monotonic()
    with MirrorRun(config, tmp_path / "run.log", metrics_port=port, env=fs.env()) as run:
        while run.running:
            assert not ready(port), "ready without a Spark session"
            time.sleep(0.1)
        line = run.expect_failure(code=3)
    elapsed = time.monotonic() - began
    assert 'msg="cannot start Spark"' in line and f"spark.master {master}: no master accepts connections" in line
    assert elapsed < 30, f"took {elapsed:.0f}s"  # Spark's own registration retries would take over a minute


DISCOVERY_MS = 2_000  # how soon b's mirror starts once b answers
BURST = 20_000  # records b gets just before its broker is killed: its mirror reads them when it dies


class SteadyProducer:
    """Produces `per_tick` records to partition 0 of a topic every `tick_s` in a thread, noting when each offset was
    acknowledged; `durable_at` notes when each offset was first seen durable at the destination, so each record's
    produce -> durable latency is known to about the watch interval."""

    def __init__(self, bootstrap: str, topic: str, per_tick: int = 5, tick_s: float = 0.1) -> None:
        self.topic, self._bootstrap, self._per_tick, self._tick_s = topic, bootstrap, per_tick, tick_s
        self.acked_at: dict[int, float] = {}
        self.durable_at: dict[int, float] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self, destination_next: Callable[[], int | None]) -> SteadyProducer:
        self._threads = [threading.Thread(target=self._produce, daemon=True)]
        self._threads.append(threading.Thread(target=self._watch, args=(destination_next,), daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> int:
        """Stop producing; returns how many records were acknowledged."""
        self._stop.set()
        self._threads[0].join(60)
        return len(self.acked_at)

    def _produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer(
            {"bootstrap.servers": self._bootstrap, "linger.ms": 5, "enable.idempotence": True, "log_level": 0}
        )

        def acked(error: Any, message: Any) -> None:
            if error is None:
                self.acked_at[message.offset()] = time.monotonic()

        n = 0
        while not self._stop.is_set():
            for _ in range(self._per_tick):
                producer.produce(self.topic, f"v{n}".encode() * 20, key=f"k{n}".encode(), partition=0, callback=acked)
                n += 1
            producer.poll(0)
            time.sleep(self._tick_s)
        producer.flush(120)

    def _watch(self, destination_next: Callable[[], int | None]) -> None:
        seen = 0
        while not self._stop.is_set() or seen < len(self.acked_at):
            now, reached = time.monotonic(), destination_next() or 0
            for offset in range(seen, reached):
                self.durable_at[offset] = now
            seen = max(seen, reached)
            time.sleep(0.05)

    def latencies(self, since: float) -> list[float]:
        """Of the records acknowledged from `since` (monotonic) on."""
        acked = [(o, at) for o, at in self.acked_at.items() if at >= since]
        return sorted(self.durable_at[o] - at for o, at in acked if o in self.durable_at)


def test_a_cluster_down_at_start_then_blackholed_then_killed_mid_read_delays_no_other_clusters_flushes(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """One process mirrors cluster a and cluster b (b behind a TCP proxy) to a filesystem, both written steadily,
    flushes at max-time 1 s sharing Spark jobs. b is down when the process starts (nothing listens at its address):
    a's mirror runs, b is named (WARN, gauge, /readyz, /mirrors lists only a's mirror; `status` lists a's row, names
    b unreadable and exits 1), and once b answers discovery starts b's mirror. Then b's route is blackholed
    (requests get no answer) until the outage is seen and 2 s more, then its broker is killed (SIGKILL) for 3 s
    while b's mirror reads a backlog. From when both flush, a's records land within max-time plus b's read-stall
    timeout (2 s) and a margin throughout; b's outage is seen (WARN, gauge, /readyz, its mirror `source-unreachable`,
    a's `running`), ridden out by the same process, and both copies are exact."""
    create_topic(kafka.bootstrap, topic_name, partitions=1)
    with KafkaBroker(advertised_port=free_port()) as broker, contextlib.ExitStack() as stack:
        # Not started yet: b's address refuses connections, as a cluster that is down when the process starts.
        proxy = TcpProxy(broker.external_port or 0, port=broker.advertised_port)
        stack.callback(proxy.stop)
        b_topic = f"{topic_name}.b"
        create_topic(broker.bootstrap, b_topic, partitions=1)
        through_proxy = broker.advertised_bootstrap
        assert through_proxy is not None
        b_source = {"bootstrap-servers": through_proxy, **SOURCE_DEFAULTS, "request-timeout-ms": 3000}
        document: dict[str, Any] = {
            "destination": fs.config({"max-time-ms": 1000}),
            "discovery": {"interval-ms": DISCOVERY_MS},
            "clusters": {
                "a": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS},
                "b": {**b_source, "read-stall-timeout-ms": 2000},
            },
            "mirrors": [
                {"name": "a", "cluster": "a", "topics": [topic_name]},
                {"name": "b", "cluster": "b", "topics": [b_topic]},
            ],
        }
        config = write_yaml(tmp_path / "two-clusters.yaml", document)
        a = SteadyProducer(kafka.bootstrap, topic_name)
        b = SteadyProducer(broker.bootstrap, b_topic)  # to b's broker directly: b's records wait while it is down
        port = free_port()
        process = f"http://127.0.0.1:{port}"
        with MirrorRun(config, tmp_path / "run.log", metrics_port=port, env=fs.env()) as run:
            a.start(lambda: fs.next_offset(topic_name, 0))
            b.start(lambda: fs.next_offset(b_topic, 0))
            run.wait_until(lambda: len(a.durable_at) > 50, 120, "cluster a flushing while b is down")
            (warned, *_) = run.events("discovery failed, retrying")
            assert warned["source_cluster"] == "b", warned
            (unreachable,) = run.events("source cluster unreachable")
            assert unreachable["source_cluster"] == "b", unreachable  # as the config names it
            assert run.metric("mirror_v3_source_cluster_up", source_cluster="b") == 0
            assert run.metric("mirror_v3_source_cluster_up", source_cluster="a") == 1
            code, body = readyz(port)
            assert code == 503 and "source cluster b unreachable" in body and "cluster a" not in body, body
            assert mirror_states(port) == {f"a.{topic_name}-0": "running"}
            before = fs.next_offset(topic_name, 0) or 0
            code, status = status_json(config, "--process", process)
            assert code == 1 and not status["ok"], status
            ((cluster, written),) = [(m["cluster"], m["destination-next"]) for m in status["mirrors"]]
            assert cluster == "a" and before <= written <= (fs.next_offset(topic_name, 0) or 0), status
            assert list(status["unreadable-clusters"]) == ["b"], status
            table = run_cli("status", "--config", str(config), "--process", "none")
            assert table.returncode == 1 and "cluster b: unreadable" in table.stdout, table.stdout

            proxy.start()  # b answers: discovery starts its mirror, which reads what b was sent meanwhile
            run.wait_until(lambda: len(b.durable_at) > 50, 120, "b's mirror discovered and flushing")
            (discovered,) = run.events("discovered")
            assert discovered["mirror"] == f"b.{b_topic}-0", discovered
            assert run.metric("mirror_v3_source_cluster_up", source_cluster="b") == 1
            code, status = status_json(config, "--process", process)
            assert code == 0 and not status["unreadable-clusters"], status
            assert sorted(m["cluster"] for m in status["mirrors"]) == ["a", "b"], status

            steady_at = time.monotonic()
            proxy.blackhole(True)
            run.wait_for_log(r'msg="source cluster unreachable" source_cluster=b', timeout=20, count=2)
            assert run.metric("mirror_v3_source_cluster_up", source_cluster="b") == 0
            assert run.metric("mirror_v3_source_cluster_up", source_cluster="a") == 1
            code, body = readyz(port)
            assert code == 503 and "source cluster b unreachable" in body and "cluster a" not in body, body
            states = mirror_states(port)
            assert states == {f"a.{topic_name}-0": "running", f"b.{b_topic}-0": "source-unreachable"}, states
            time.sleep(2)
            proxy.blackhole(False)
            run.wait_for_log(r'msg="source cluster reachable again" source_cluster=b', timeout=30, count=2)
            # Killed while its mirror reads a backlog: b's producer stops first, so that nothing b acknowledges is in
            # flight when it dies (a single broker killed under a steady produce came back without records it had
            # acknowledged and served, which the mirror rightly refuses).
            b_end = b.stop() + BURST
            produce(broker.bootstrap, b_topic, 0, generate_records(BURST, seed=3))
            broker.kill()
            time.sleep(3)
            broker.start()
            run.wait_for_log(r'msg="source cluster reachable again" source_cluster=b', timeout=60, count=3)
            a_end = a.stop()
            run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: a_end}, timeout=60)
            run.wait_for_offsets(lambda p: fs.next_offset(b_topic, p), {0: b_end}, timeout=120)
            run.drain()
        assert run.errors() == [], run.errors()
        assert "%3|" not in run.log_text()
        retried = {event["operation"] for event in run.events("source unavailable, retrying")}
        assert retried, "no retry of b's queries or reads was logged"
        latencies = a.latencies(steady_at)
        assert len(latencies) == len([at for at in a.acked_at.values() if at >= steady_at]) > 500, len(latencies)
        p99 = latencies[int(len(latencies) * 0.99)]
        # max-time 1 s, b's read-stall timeout 2 s, the gather window 0.2 s, a job, the poll and the watch.
        assert p99 <= 1.0 + 2.0 + 1.5 and latencies[-1] <= 1.0 + 2.0 + 2.5, (p99, latencies[-1])
        assert_exactly_once(kafka.bootstrap, fs, topic_name)
        assert_exactly_once(broker.bootstrap, fs, b_topic)


def test_an_outage_past_its_deadline_fails_the_mirror_on_time_naming_the_cluster(
    fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """source.outage-deadline-ms counts from the cluster's first unanswered request, with a Spark read in flight."""
    with KafkaBroker() as broker:
        backlog(broker.bootstrap, topic_name, [200_000])
        source = {"request-timeout-ms": 3000, "outage-deadline-ms": 10_000}
        config = mirror_config(
            tmp_path / "mirror.yaml",
            broker.bootstrap,
            fs,
            [{"topic": topic_name, "partition": 0, "source": source}],
            flush={"max-offsets": 100_000, "max-time-ms": 60_000},
            spark={"max-offsets-per-job": 100_000},
        )
        with start(config, tmp_path / "run.log", fs) as run:
            run.wait_for_log(r"msg=flushed")  # a read of the next 100 000 is under way now
            broker.kill()
            run.wait_for_log(r'msg="source cluster unreachable"', timeout=15)
            line = run.expect_failure(1, timeout=60)
        warned_at = log_time(run.events("source cluster unreachable")[0])
        failed_at = log_time(run.events("mirror failed")[0])
        assert 9.0 <= failed_at - warned_at <= 12.0, f"failed {failed_at - warned_at:.1f}s after the first failure"
        assert f"source cluster {broker.bootstrap} unreachable for 1" in line, line
        assert "past source.outage-deadline-ms (10000)" in line, line
