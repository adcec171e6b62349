"""What an operator's tooling reads from a running process: JSON logs end to end (the JVM's lines included,
through a failing Spark start too), and a /readyz that waits for Spark and names an unusable master."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from e2e.harness import assert_exactly_once, backlog, mirror_config, one_mirror, readyz, start
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import generate_records, produce
from testkit.mirror_run import MirrorRun, log_time
from testkit.ports import free_port
from testkit.targets import FilesystemTarget


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
    assert json.loads(line)["msg"] == "cannot start Spark"
    events = json_lines(log)
    (trace,) = [e for e in events if "UnsupportedClassVersionError" in e["msg"]]
    assert trace["msg"].count("\tat java.base/") == 2 and trace["jvm_logger"] == "jvm", trace


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


def test_a_source_broker_down_for_20_seconds_mid_stream_is_ridden_out_by_the_same_process(
    fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """Ridden out, and seen: a WARN when the cluster stops answering, its gauge at 0 and /readyz degraded while it is
    down, the mirror `source-unreachable` in the process's state, and an INFO with how long it was down."""
    with KafkaBroker() as broker:  # its own: this one is stopped
        backlog(broker.bootstrap, topic_name, [30_000])
        config = mirror_config(
            tmp_path / "mirror.yaml",
            broker.bootstrap,
            fs,
            [{"topic": topic_name, "partition": 0, "source": {"request-timeout-ms": 3000}}],
            flush={"max-offsets": 2_000, "max-time-ms": 500},
            spark={"max-offsets-per-job": 2_000},
        )
        port = free_port()
        with MirrorRun(config, tmp_path / "run.log", metrics_port=port, env=fs.env()) as run:
            run.wait_until(lambda: (fs.next_offset(topic_name, 0) or 0) >= 4_000, 120, "the first flushes")
            assert (fs.next_offset(topic_name, 0) or 0) < 30_000, "the backlog was done before the outage"
            assert run.metric("mirror_v3_source_cluster_up", source_cluster=broker.bootstrap) == 1
            broker.kill()
            run.wait_for_log(r'msg="source cluster unreachable"', timeout=15)
            assert run.metric("mirror_v3_source_cluster_up", source_cluster=broker.bootstrap) == 0
            code, body = readyz(port)
            assert code == 503 and f"source cluster {broker.bootstrap} unreachable" in body, body
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/mirrors", timeout=5) as response:
                (state,) = json.loads(response.read())["mirrors"]
            assert state["state"] == "source-unreachable" and state["error"], state
            time.sleep(18)  # 20 s in all: a read in flight waits; offset queries in between are asked again
            assert run.running, run.tail()
            broker.start()
            produce(broker.bootstrap, topic_name, 0, generate_records(1_000, seed=8))
            run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 31_000}, timeout=180)
            (back,) = run.events("source cluster reachable again")
            assert 18 <= float(back["down_s"]) <= 40, back
            assert run.metric("mirror_v3_source_cluster_up", source_cluster=broker.bootstrap) == 1
            assert readyz(port)[0] == 200
            run.drain()
        # Riding it out is no error; librdkafka's refused connections stay out of the log (only the mirror's WARNs).
        assert run.errors() == [], run.errors()
        assert "%3|" not in run.log_text()
        assert_exactly_once(broker.bootstrap, fs, topic_name)


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
