"""A whole estate through the real CLI: topics selected by regex, `plan`, live discovery of new topics and
partitions, a deleted topic, and two clusters holding the same topic name."""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

from e2e.harness import SOURCE_DEFAULTS, assert_exactly_once, backlog, write_yaml
from sinks.blob.chain import BlobRange
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    Record,
    add_partitions,
    create_topic,
    delete_topic,
    generate_records,
    produce,
    watermarks,
)
from testkit.mirror_run import MirrorRun, run_cli
from testkit.ports import free_port
from testkit.targets import FilesystemTarget, assert_same_records, chain, source_records

DISCOVERY_MS = 4_000


def plan_keys(config: Path) -> list[tuple[str, str, int]]:
    result = run_cli("plan", "--config", str(config), "--format", "json")
    assert result.returncode == 0, result.stderr
    return [(row["cluster"], row["topic"], row["partition"]) for row in json.loads(result.stdout)["mirrors"]]


def next_offset(target: FilesystemTarget, topic: str, partition: int) -> int | None:
    return target.next_offset(topic, partition)


def test_a_regex_estate_is_planned_mirrored_and_followed_while_it_changes(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    base = topic_name
    layout = {f"{base}-a": [300, 200, 100, 50], f"{base}-b": [400], f"{base}-c": [120, 80], f"{base}-skip": [10]}
    for topic, counts in layout.items():
        backlog(kafka.bootstrap, topic, counts, seed=len(topic))
    config = write_yaml(
        tmp_path / "estate.yaml",
        {
            "destination": fs.config({"max-time-ms": 300}),
            "clusters": {"prod": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS}},
            "mirrors": [{"name": "estate", "cluster": "prod", "topic-regex": f"{base}-.*", "exclude-regex": ".*-skip"}],
            "discovery": {"interval-ms": DISCOVERY_MS},
        },
    )
    selected = [(f"{base}-{t}", p) for t, n in (("a", 4), ("b", 1), ("c", 2)) for p in range(n)]
    assert plan_keys(config) == [("prod", topic, p) for topic, p in selected]

    port = free_port()
    with MirrorRun(config, tmp_path / "run.log", metrics_port=port) as run:
        for topic in (f"{base}-a", f"{base}-b", f"{base}-c"):
            run.wait_for_offsets(partial(next_offset, fs, topic), dict(enumerate(layout[topic])))
        assert run.metric("mirror_v3_mirrors", source_cluster="prod") == 7
        run.wait_for_metric("mirror_v3_destination_offset_verified", 50, topic=f"{base}-a", partition=3)
        pid = run.pid

        # A new matching topic and two new partitions of a mirrored one: mirrored without a restart.
        changed_at = time.monotonic()
        backlog(kafka.bootstrap, f"{base}-d", [70, 30], seed=7)
        add_partitions(kafka.bootstrap, f"{base}-b", 3)
        for partition in (1, 2):
            produce(kafka.bootstrap, f"{base}-b", partition, generate_records(25 * partition, seed=partition))
        run.wait_for_offsets(lambda p: fs.next_offset(f"{base}-d", p), {0: 70, 1: 30}, timeout=2 * DISCOVERY_MS / 1000)
        run.wait_for_offsets(
            lambda p: fs.next_offset(f"{base}-b", p),
            {0: 400, 1: 25, 2: 50},
            timeout=max(1.0, 2 * DISCOVERY_MS / 1000 - (time.monotonic() - changed_at)),
        )
        assert run.running and run.pid == pid
        assert run.metric("mirror_v3_mirrors", source_cluster="prod") == 11

        # A deleted topic stops its mirrors with a WARN each; the others go on.
        delete_topic(kafka.bootstrap, f"{base}-c")
        run.wait_for_log(r'level=WARNING msg="mirror stopped: source topic was deleted"', count=2, timeout=60)
        produce(kafka.bootstrap, f"{base}-a", 0, generate_records(40, seed=40))
        run.wait_for_offsets(lambda p: fs.next_offset(f"{base}-a", p), {0: 340})
        run.wait_until(lambda: run.metric("mirror_v3_mirrors", source_cluster="prod") == 9, 30, "9 running mirrors")
        assert run.metric("mirror_v3_discovery_removed_partitions_total", source_cluster="prod") == 2
        assert run.metric("mirror_v3_destination_offset_verified", topic=f"{base}-c", partition=0) is None
        run.drain()
    assert not run.errors(), run.tail()
    for topic, partitions in ((f"{base}-a", 4), (f"{base}-b", 3), (f"{base}-d", 2)):
        assert_exactly_once(kafka.bootstrap, fs, topic, partitions=partitions)
    assert not (fs.root / f"{base}-skip").exists()
    assert not any(path.name.startswith("__") for path in fs.root.iterdir())


def test_two_clusters_with_one_topic_name_write_two_chains_and_two_series(
    kafka: KafkaBroker, kafka_destination_broker: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [300], seed=1)
    backlog(kafka_destination_broker.bootstrap, topic_name, [500], seed=2)
    document: dict[str, Any] = {
        "destination": fs.config({"max-time-ms": 300}),
        "clusters": {
            "prod": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS},
            "dr": {"bootstrap-servers": kafka_destination_broker.bootstrap, **SOURCE_DEFAULTS},
        },
        "mirrors": [
            {"name": "prod", "cluster": "prod", "topics": [topic_name]},
            {"name": "dr", "cluster": "dr", "topics": [topic_name]},
        ],
    }
    colliding = run_cli("validate", "--config", str(write_yaml(tmp_path / "colliding.yaml", document)))
    assert colliding.returncode == 2
    assert colliding.stderr.strip().startswith(f"invalid config: mirrors[1]: destination {topic_name}/0: "), colliding
    assert f"(dr: {topic_name}-0)" in colliding.stderr and f"(prod: {topic_name}-0)" in colliding.stderr
    assert "Traceback" not in colliding.stderr

    document["mirrors"][1]["destination-name"] = {"suffix": ".dr"}
    config = write_yaml(tmp_path / "estate.yaml", document)
    port = free_port()
    with MirrorRun(config, tmp_path / "run.log", metrics_port=port) as run:
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 300})
        run.wait_for_offsets(lambda p: fs.next_offset(f"{topic_name}.dr", p), {0: 500})
        for cluster, verified in (("prod", 300), ("dr", 500)):
            run.wait_for_metric(
                "mirror_v3_destination_offset_verified", verified, source_cluster=cluster, topic=topic_name, partition=0
            )
        records = {
            cluster: run.metric("mirror_v3_destination_records_total", source_cluster=cluster, topic=topic_name)
            for cluster in ("prod", "dr")
        }
        assert records == {"prod": 300, "dr": 500}
        assert (
            run.metric("mirror_v3_destination_records_total", source_cluster="dr", destination=f"{topic_name}.dr")
            == 500
        )
        run.drain()
    assert "source_cluster=dr" in run.log_text() and "source_cluster=prod" in run.log_text()
    assert_exactly_once(kafka.bootstrap, fs, topic_name)
    assert_exactly_once(kafka_destination_broker.bootstrap, fs, topic_name, name=f"{topic_name}.dr")


def test_with_restart_a_failing_mirror_is_restarted_while_the_others_flush(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    broken, healthy = f"{topic_name}-broken", f"{topic_name}-healthy"
    backlog(kafka.bootstrap, broken, [500], seed=1)
    backlog(kafka.bootstrap, healthy, [500], seed=2)
    destination = {**fs.config({"max-time-ms": 300}), "retry": {"deadline-ms": 1_000, "max-backoff-ms": 200}}
    config = write_yaml(
        tmp_path / "estate.yaml",
        {
            "destination": destination,
            "clusters": {"prod": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS}},
            "mirrors": [{"name": "e", "cluster": "prod", "topics": [broken, healthy]}],
            "on-mirror-failure": "restart",
        },
    )
    port = free_port()
    with MirrorRun(config, tmp_path / "run.log", metrics_port=port) as run:
        run.wait_for_offsets(partial(next_offset, fs, broken), {0: 500})
        run.wait_for_offsets(partial(next_offset, fs, healthy), {0: 500})
        # The chain directory becomes a file: every write and listing of this mirror fails (even as root).
        chain_dir = fs.root / broken / "0"
        saved = chain_dir.with_name("0.saved")
        chain_dir.rename(saved)
        chain_dir.write_text("not a directory")
        produce(kafka.bootstrap, broken, 0, generate_records(200, seed=3))
        produce(kafka.bootstrap, healthy, 0, generate_records(200, seed=4))
        run.wait_for_log(r'level=ERROR msg="mirror failed, restarting" mirror=e\.\S+-broken-0 ', count=2, timeout=90)
        run.wait_for_offsets(partial(next_offset, fs, healthy), {0: 700})
        assert run.metric("mirror_v3_mirror_failed", topic=broken) == 1
        assert (run.metric("mirror_v3_mirror_restarts_total", topic=broken) or 0) >= 1
        for _ in range(5):  # the broken mirror waits to restart, but may be caught in its brief next attempt
            status = run_cli(
                "status", "--config", str(config), "--format", "json", "--process", f"http://127.0.0.1:{port}"
            )
            states = {row["topic"]: row for row in json.loads(status.stdout)["mirrors"]}
            if states[broken]["state"] == "restarting":
                break
        assert states[broken]["state"] == "restarting" and str(chain_dir) in states[broken]["failure"], states
        assert states[healthy]["state"] == "running" and states[healthy]["failure"] is None
        assert status.returncode == 1 and json.loads(status.stdout)["process"] == f"http://127.0.0.1:{port}"
        chain_dir.unlink()
        saved.rename(chain_dir)
        run.wait_for_offsets(partial(next_offset, fs, broken), {0: 700}, timeout=120)
        run.wait_until(lambda: run.metric("mirror_v3_mirror_failed", topic=broken) == 0, 30, "the mirror to recover")
        produce(kafka.bootstrap, healthy, 0, generate_records(50, seed=5))
        run.wait_for_offsets(partial(next_offset, fs, healthy), {0: 750})
        run.drain()
    restarts = run.events("mirror failed, restarting")
    delays = [float(event["in_s"]) for event in restarts]
    assert all(event["mirror"].endswith("-broken-0") for event in restarts)
    assert delays[0] <= 1.0 <= delays[1] <= 2.0  # backoff: 1 s then 2 s, less at most half of jitter
    assert_exactly_once(kafka.bootstrap, fs, broken)
    assert_exactly_once(kafka.bootstrap, fs, healthy)


def test_start_at_latest_and_daily_blobs(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    late, daily = f"{topic_name}-late", f"{topic_name}-daily"
    backlog(kafka.bootstrap, late, [100], seed=1)
    create_topic(kafka.bootstrap, daily, 1)
    midnight = int(time.time() // 86_400 * 86_400_000)  # the last UTC midnight: recent enough for retention
    around = [Record(b"k", b"v%d" % i, timestamp_ms=midnight - 300 + 100 * i) for i in range(6)]
    produce(kafka.bootstrap, daily, 0, around)  # three records before midnight, three after
    config = write_yaml(
        tmp_path / "estate.yaml",
        {
            "destination": fs.config({"max-time-ms": 300}),
            "clusters": {"prod": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS}},
            "mirrors": [
                {"name": "late", "cluster": "prod", "topic": late, "partition": 0, "start-at": "latest"},
                {"name": "daily", "cluster": "prod", "topics": [daily], "flush": {"max-time-ms": 300, "daily": True}},
            ],
        },
    )
    with MirrorRun(config, tmp_path / "run.log") as run:
        run.wait_for_log(r'msg="mirror starting" mirror=late .*start_offset=100 ')
        produce(kafka.bootstrap, late, 0, generate_records(50, seed=2))
        run.wait_for_offsets(partial(next_offset, fs, late), {0: 150})
        run.wait_for_offsets(partial(next_offset, fs, daily), {0: 6})
        run.drain()
    assert chain(fs, late, 0)[0].first == 100
    assert_same_records(fs.records(late, 0), source_records(kafka.bootstrap, late, 0)[100:])
    assert chain(fs, daily, 0) == [BlobRange(0, 2), BlobRange(3, 5)]
    (cut,) = [event for event in run.events("flushed") if event.get("to") == "2"]
    assert cut["trigger"] == "daily"
    assert_exactly_once(kafka.bootstrap, fs, daily)


def test_shards_cover_each_partition_once_and_a_rescale_loses_and_repeats_nothing(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    partitions = 12
    backlog(kafka.bootstrap, topic_name, [200] * partitions, seed=3)
    config = write_yaml(
        tmp_path / "estate.yaml",
        {
            "destination": fs.config({"max-time-ms": 300}),
            "clusters": {"prod": {"bootstrap-servers": kafka.bootstrap, **SOURCE_DEFAULTS}},
            "mirrors": [{"name": "e", "cluster": "prod", "topics": [topic_name]}],
        },
    )
    plan = run_cli("plan", "--config", str(config), "--format", "json", "--shard", "0/3")
    owners = {row["partition"]: row["owner"] for row in json.loads(plan.stdout)["mirrors"]}
    assert sorted(owners) == list(range(partitions)) and set(owners.values()) <= {0, 1, 2}

    def shard_run(shard: str, name: str) -> MirrorRun:
        return MirrorRun(config, tmp_path / f"{name}.log", env={"MIRROR_V3_SHARD": shard})

    three = [shard_run(f"{i}/3", f"three-{i}") for i in range(3)]
    two: list[MirrorRun] = []
    try:
        for run in three:
            run.wait_for_log(r"msg=\"spark session ready\"")
        three[0].wait_for_offsets(partial(next_offset, fs, topic_name), dict.fromkeys(range(partitions), 200))
        started = [{int(e["mirror"].rsplit("-", 1)[1]) for e in run.events("mirror starting")} for run in three]
        assert [started[i] == {p for p, o in owners.items() if o == i} for i in range(3)] == [True] * 3

        # Rescale 3 -> 2 while records flow: the new processes start while the old ones drain, so for a
        # while two processes run some partitions; the destination lets only one of them append.
        flowing = Flow(kafka.bootstrap, topic_name, partitions)
        flowing.start()
        for run in three:
            run.terminate()
        two += [shard_run(f"{i}/2", f"two-{i}") for i in range(2)]  # while the old ones drain
        for run in three:
            run.wait(120)  # 0 (drained) or 1 (refused as the second writer): either leaves the chain whole
        flowing.stop()
        ends = {p: watermarks(kafka.bootstrap, topic_name, p)[1] for p in range(partitions)}
        # A new process that opened a partition while an old one still appended to it is refused at its
        # first commit and exits 1; the orchestrator's part, played here, is to start it again.
        deadline, restarts = time.monotonic() + 300, 0
        while any(fs.next_offset(topic_name, p) != end for p, end in ends.items()):
            for i in range(2):
                run = two[i]
                if not run.running:
                    assert run.wait() == 1 and "another writer" in run.log_text(), run.tail()
                    restarts += 1
                    two.append(run)  # stopped by the finally below
                    two[i] = shard_run(f"{i}/2", f"two-{i}-again-{restarts}")
            assert time.monotonic() < deadline, {p: fs.next_offset(topic_name, p) for p in ends}
            time.sleep(1)
        for run in two[:2]:
            run.drain()
    finally:
        for run in [*three, *two]:
            run.stop()
    assert_exactly_once(kafka.bootstrap, fs, topic_name, partitions=partitions)


class Flow:
    """Produces a few records to every partition every 100 ms, from a thread, until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        import threading

        self._bootstrap, self._topic, self._partitions = bootstrap, topic, partitions
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        seed = 100
        while not self._stop.is_set():
            for p in range(self._partitions):
                produce(self._bootstrap, self._topic, p, generate_records(5, seed=seed))
                seed += 1
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
