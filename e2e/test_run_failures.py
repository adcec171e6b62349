"""How `run` and `status` refuse to start or stop: one CLI case per failure class (the variants of each class are
tested below the CLI), each ending in one clear line, no traceback, and the documented exit code."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import backlog, mirror_config, one_mirror, refused, start, status_json
from sinks.blob.chain import blob_name
from testkit.kafka_broker import KafkaBroker
from testkit.mirror_run import run_cli
from testkit.ports import free_port
from testkit.targets import FilesystemTarget
from testkit.tcp_proxy import TcpProxy


def test_a_corrupt_chain_stops_run_and_status_naming_the_files(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """Overlaps, holes, foreign and unparseable names: tests/test_blob_chain.py. Here: a hole, end to end."""
    backlog(kafka.bootstrap, topic_name, [300])
    offending = [blob_name(0, 99), blob_name(150, 199)]
    for name in offending:
        fs.write_raw(topic_name, 0, name, b"not really parquet")
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name)
    line = refused(config, tmp_path / "run.log", fs)
    assert "corrupt chain: missing offsets 100-149" in line, line
    for name in offending:
        assert fs.blob_location(topic_name, 0, name) in line, line
    assert fs.names(topic_name, 0) == offending  # nothing touched

    code, document = status_json(config)
    assert code == 1 and not document["ok"]
    (row,) = document["mirrors"]
    assert "corrupt chain" in row["error"] and fs.blob_location(topic_name, 0, offending[1]) in row["error"]
    table = run_cli("status", "--config", str(config))
    assert table.returncode == 1 and "corrupt chain" in table.stdout


def test_an_unreachable_broker_is_named_by_run_and_by_status_within_its_timeout(
    kafka: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    fs = FilesystemTarget(tmp_path / "archive")
    config = mirror_config(
        tmp_path / "mirror.yaml",
        dead,
        fs,
        # No outage to ride out: a broker that never was is named at once.
        [{"topic": "orders", "partition": 0, "source": {"request-timeout-ms": 3000, "outage-deadline-ms": 0}}],
    )
    line = refused(config, tmp_path / "run.log", fs)
    assert dead in line and "unreachable" in line, line

    began = time.monotonic()
    code, document = status_json(config, "--timeout", "5")
    elapsed = time.monotonic() - began
    assert code == 1 and not document["ok"]
    (row,) = document["mirrors"]
    assert dead in row["error"], row
    assert row["source-end"] is None and row["lag"] is None
    assert elapsed < 5 + 15, f"status took {elapsed:.1f}s"  # the timeout, plus interpreter start-up

    # One estate over three clusters: one answers, one is down (a killed broker: connections refused), one is
    # blackholed (connections accepted, nothing answered). --timeout bounds the whole command: the answering
    # cluster's rows are complete, the others are named as such, and it ends within the timeout of a status that
    # finds every cluster up (the interpreter's start-up and the answers).
    backlog(kafka.bootstrap, topic_name, [7])
    with TcpProxy(kafka.port) as proxy:
        proxy.blackhole(True)
        hole = f"127.0.0.1:{proxy.port}"
        clusters = {"up": kafka.bootstrap, "down": dead, "hole": hole}
        estate: dict[str, Any] = {
            "destination": fs.config(),
            "clusters": {name: {"bootstrap-servers": address} for name, address in clusters.items()},
            "mirrors": [
                *(
                    {"name": name, "cluster": name, "topics": [topic_name], "destination-name": {"suffix": f".{name}"}}
                    for name in clusters
                ),
                *(
                    {
                        "name": f"{name}-1",
                        "cluster": name,
                        "topic": topic_name,
                        "partition": 1,
                        "destination-name-override": f"{topic_name}.{name}-1",
                    }
                    for name in ("down", "hole")
                ),
            ],
        }
        healthy = tmp_path / "healthy.yaml"
        healthy.write_text(
            yaml.safe_dump({**estate, "clusters": {"up": estate["clusters"]["up"]}, "mirrors": [estate["mirrors"][0]]})
        )
        began = time.monotonic()
        assert status_json(healthy, "--timeout", "5", "--process", "none")[0] == 0
        start_up = time.monotonic() - began
        three = tmp_path / "three.yaml"
        three.write_text(yaml.safe_dump(estate))
        began = time.monotonic()
        code, document = status_json(three, "--timeout", "5", "--process", "none")
        elapsed = time.monotonic() - began
    assert code == 1 and not document["ok"]
    assert elapsed < start_up + 5 + 2, f"status took {elapsed:.1f}s, {start_up:.1f}s with every cluster up"
    rows = {row["name"]: row for row in document["mirrors"]}
    assert (rows[f"up.{topic_name}-0"]["source-end"], rows[f"up.{topic_name}-0"]["lag"]) == (7, 7)
    assert rows[f"up.{topic_name}-0"]["error"] is None
    assert rows["down-1"]["error"].startswith(f"source cluster down unreachable: {dead}"), rows["down-1"]
    assert rows["hole-1"]["error"] == f"source hole ({hole}): no answer within the 5s timeout", rows["hole-1"]
    assert set(rows) == {f"up.{topic_name}-0", "down-1", "hole-1"}
    unreadable = document["unreadable-clusters"]
    assert set(unreadable) == {"down", "hole"} and dead in unreadable["down"], unreadable
    assert unreadable["hole"] == f"source cluster hole ({hole}): no answer within the 5s timeout", unreadable


def test_status_names_a_missing_topic_and_partition_at_once_and_watch_refreshes_until_interrupted(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [20])
    config = mirror_config(
        tmp_path / "mirror.yaml",
        kafka.bootstrap,
        fs,
        [{"topic": f"{topic_name}-nope", "partition": 0}, {"topic": topic_name, "partition": 5}],
    )
    began = time.monotonic()
    result = run_cli("status", "--config", str(config), "--format", "json", "--timeout", "15")
    elapsed = time.monotonic() - began
    rows = {row["topic"]: row for row in json.loads(result.stdout)["mirrors"]}
    missing_topic, missing_partition = rows[f"{topic_name}-nope"], rows[topic_name]
    assert result.returncode == 1
    assert missing_topic["error"] == f"source topic '{topic_name}-nope' does not exist on {kafka.bootstrap}"
    assert missing_partition["error"] == f"source topic '{topic_name}' has no partition 5 (partitions: 0)"
    assert missing_topic["lag"] is None and missing_partition["source-end"] is None
    # An offset query would have retried until the 15 s timeout; metadata answers at once (the rest is start-up).
    assert elapsed < 10, f"status took {elapsed:.1f}s"
    assert "ERROR" not in result.stderr and "never retrieved" not in result.stderr, result.stderr

    good = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name, name="good.yaml")
    watch = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "status", "--config", str(good), "--watch", "0.5", "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert watch.stdout is not None
    documents = [json.loads(watch.stdout.readline()) for _ in range(3)]  # three refreshes, one line each
    watch.send_signal(signal.SIGINT)
    _, err = watch.communicate(timeout=30)
    assert watch.returncode == 0 and "Traceback" not in err, err
    first, *later = (document["mirrors"][0] for document in documents)
    assert (first["lag"], first["rate"], first["eta-seconds"]) == (20, None, None)  # nothing to compare with yet
    assert all((row["lag"], row["rate"], row["eta-seconds"]) == (20, 0.0, None) for row in later), later


def test_a_runtime_without_java_exits_3_saying_spark_cannot_start(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [10])
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name)
    line = refused(config, tmp_path / "run.log", fs, code=3, JAVA_HOME=str(tmp_path / "no-java-here"))
    assert 'msg="cannot start Spark"' in line and "gateway" in line.lower(), line


def test_a_sigterm_during_start_up_drains_and_exits_0(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """An orchestrator that stops the pod at once: the signal lands while the process is still importing."""
    backlog(kafka.bootstrap, topic_name, [0])
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name)
    with start(config, tmp_path / "run.log", fs) as run:
        time.sleep(0.3)
        run.proc.send_signal(signal.SIGTERM)
        code = run.wait(60)
    assert code == 0, run.tail()
    assert "draining" in run.log_text() and "all mirrors stopped" in run.log_text(), run.tail()


def test_a_second_signal_exits_at_once(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [0])
    config = one_mirror(tmp_path, kafka.bootstrap, fs, topic_name)
    with start(config, tmp_path / "run.log", fs) as run:
        # During Spark's start-up the drain has to wait for it, which leaves time for a second signal.
        run.wait_for_log(r'msg="mirror starting"|msg="metrics endpoint', timeout=60)
        run.proc.send_signal(signal.SIGTERM)
        run.wait_for_log(r"msg=\"draining", timeout=30)
        run.proc.send_signal(signal.SIGTERM)
        began = time.monotonic()
        code = run.wait(30)
    if "all mirrors stopped" in run.log_text():
        pytest.skip("the drain finished before the second signal arrived")
    assert code == 130, run.tail()
    assert time.monotonic() - began < 5
    assert "second signal during drain" in run.log_text()
