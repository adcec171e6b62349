"""MirrorMaker 2, the peer a Kafka -> Kafka user would pick instead, measured on the same backlog in the same run.

Apache Kafka's own `connect-mirror` 3.9.1 (Maven Central, with its runtime jars, fetched once like the test broker's)
runs in dedicated mode (`org.apache.kafka.connect.mirror.MirrorMaker`) from the source broker to the destination
broker, in its exactly-once mode (KIP-618: the target's `exactly.once.source.support`, each batch of records and its
source offsets one transaction, the records read with read_committed) and in its default at-least-once mode. Its
default naming (DefaultReplicationPolicy: `<source alias>.<topic>`, the alias `eos` or `alo` by mode) keeps the two
runs apart on one destination broker, each into a fresh topic of the backlog's partitions; heartbeats, checkpoints
and the group, config and ACL syncs are off, so it copies records and nothing else; one task per partition.

When it is done: exactly-once, from its own bookkeeping, the source offsets it committed in the records'
transactions (`mm2-offsets.<alias>.internal` on the destination, read_committed); at-least-once, when the
destination's high watermarks reach the backlog's (no transaction markers there; its offset commits trail the
records by `offset.flush.interval.ms`). Both polled every POLL_S. The row's time runs from its first record on the
destination to that commit covering the backlog; the JVM's and Connect's start-up is reported apart, as a mirror's
Spark start-up is. The destination is then read back: every record of the backlog, once.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bench.procs import JVM, MIRROR, Sampler
from testkit.kafka_broker import KafkaBroker, java_executable
from testkit.kafka_data import create_topic, watermarks
from testkit.maven_jars import JarSet

MIRROR_MAKER = JarSet(
    "connect-mirror-3.9.1",
    ("org.apache.kafka:connect-mirror:3.9.1", "org.slf4j:slf4j-reload4j:1.7.36"),
    "connect-mirror-3.9.1.jar",
)
MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
MODES = {"mm2-eos": ("eos", True), "mm2": ("alo", False)}  # bench path -> (source alias, exactly-once)
LABEL = "MirrorMaker 2 (JVM)"
POLL_S = 0.5


def properties(
    alias: str, source: str, destination: str, topic: str, partitions: int, exactly_once: bool, port: int
) -> str:
    settings = {
        "clusters": f"{alias}, target",
        f"{alias}.bootstrap.servers": source,
        "target.bootstrap.servers": destination,
        f"{alias}->target.enabled": "true",
        f"{alias}->target.topics": topic,
        f"target->{alias}.enabled": "false",
        "tasks.max": str(partitions),
        "emit.heartbeats.enabled": "false",
        "emit.checkpoints.enabled": "false",
        "sync.group.offsets.enabled": "false",
        "sync.topic.configs.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "refresh.topics.interval.seconds": "1",
        # Connect's worker settings of a flow come from its target cluster's prefix in dedicated mode.
        "target.offset.flush.interval.ms": "1000",
        # Its clients tuned as the raw copy's are (bench.raw): large fetches, large batches soon sent. With Connect's
        # defaults (16 KiB batches, 500 records a poll) it copies several times slower.
        f"{alias}.consumer.fetch.max.bytes": str(64 * 1024 * 1024),
        f"{alias}.consumer.max.partition.fetch.bytes": str(32 * 1024 * 1024),
        f"{alias}.consumer.max.poll.records": "10000",
        "target.producer.batch.size": "1000000",
        "target.producer.linger.ms": "5",
        "target.producer.acks": "all",
        "target.producer.compression.type": "none",
        "replication.factor": "1",
        **{
            f"{internal}.replication.factor": "1"
            for internal in ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic")
        },
        **{f"{store}.storage.replication.factor": "1" for store in ("offset", "status", "config")},
    }
    if exactly_once:
        settings |= {
            "target.exactly.once.source.support": "enabled",
            "dedicated.mode.enable.internal.rest": "true",
            "listeners": f"http://127.0.0.1:{port}",
            f"{alias}.consumer.isolation.level": "read_committed",
        }
    return "".join(f"{key} = {value}\n" for key, value in settings.items())


def committed_offsets(consumer: Consumer, topic: str) -> dict[int, int]:
    """The source offsets MirrorMaker has committed so far, per partition of `topic`: the next offset to copy."""
    found: dict[int, int] = {}
    while (message := consumer.poll(0.2)) is not None:
        key, value = message.key(), message.value()
        if message.error() is not None or key is None or value is None:
            continue
        cluster_key = json.loads(key)
        partition = cluster_key[1] if isinstance(cluster_key, list) and len(cluster_key) == 2 else None
        if isinstance(partition, dict) and partition.get("topic") == topic:
            found[int(partition["partition"])] = int(json.loads(value)["offset"]) + 1
    return found


def mm2_backlog(
    source: str,
    source_pid: int | None,
    destination: KafkaBroker,
    topic: str,
    ends: Mapping[int, int],
    path: str,
    logs: Path,
    port: int,
    timeout: float,
) -> dict[str, Any]:
    """MirrorMaker 2 copying the backlog of `topic` (offsets up to `ends`) to `<alias>.<topic>` on `destination`."""
    alias, exactly_once = MODES[path]
    copy = f"{alias}.{topic}"
    create_topic(destination.bootstrap, copy, len(ends))
    config = logs / f"{path}.properties"
    config.write_text(properties(alias, source, destination.bootstrap, topic, len(ends), exactly_once, port))
    log4j = logs / f"{path}.log4j.properties"
    log4j.write_text(
        "log4j.rootLogger=INFO, file\nlog4j.appender.file=org.apache.log4j.FileAppender\n"
        f"log4j.appender.file.File={logs / (path + '.log')}\n"
        "log4j.appender.file.layout=org.apache.log4j.PatternLayout\n"
        "log4j.appender.file.layout.ConversionPattern=%d{ISO8601} %p %c{1}: %m%n\n"
    )
    classpath = f"{MIRROR_MAKER.jars()[0].parent}/*"
    command = [
        java_executable(),
        "-Xms512m",
        "-Xmx1g",
        f"-Dlog4j.configuration=file:{log4j}",
        "-cp",
        classpath,
        MAIN,
        str(config),
    ]
    offsets = Consumer(
        {
            "bootstrap.servers": destination.bootstrap,
            "group.id": f"bench-{path}-offsets",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    started = time.time()
    with open(logs / f"{path}.out", "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        named = {"source broker": source_pid, "destination server": destination.pid}
        with Sampler(process.pid, named) as sampler:
            first = _first_record(destination.bootstrap, copy, ends, process, timeout)
            offsets.subscribe([f"mm2-offsets.{alias}.internal"])
            copied: dict[int, int] = {}
            deadline = time.monotonic() + timeout
            while any(copied.get(p, 0) < end for p, end in ends.items()):
                if process.poll() is not None:
                    raise RuntimeError(f"MirrorMaker 2 exited {process.returncode}: see {logs / (path + '.log')}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"MirrorMaker 2 copied {copied} of {dict(ends)} within {timeout:g} s")
                if exactly_once:  # the records and their source offsets commit in one transaction
                    copied |= committed_offsets(offsets, topic)
                else:  # no transaction markers: the high watermark counts the records (its offsets trail them)
                    copied = {p: watermarks(destination.bootstrap, copy, p)[1] for p in ends}
                time.sleep(POLL_S)
            done = time.time()
            sampler.sample()
    finally:
        offsets.close()
        process.terminate()
        process.wait(60)
    cpu = sampler.cpu_between(first, done)
    mm2_cpu = cpu.pop(MIRROR, 0.0) + cpu.pop(JVM, 0.0)  # the JVM and anything below it
    return {
        "began_at": first,
        "seconds": round(done - first, 3),
        "startup_seconds": round(first - started, 3),
        "cpu_seconds": mm2_cpu,
        "cpu": {LABEL: mm2_cpu, **cpu},
        "verified": _verify(destination.bootstrap, copy, ends, exactly_once),
    }


def _first_record(
    bootstrap: str, topic: str, ends: Mapping[int, int], process: subprocess.Popen[bytes], timeout: float
) -> float:
    """When the destination first holds a record of the backlog (epoch seconds; polled, so up to POLL_S late)."""
    deadline = time.monotonic() + timeout
    while not any(watermarks(bootstrap, topic, p)[1] > 0 for p in ends):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"MirrorMaker 2 wrote nothing (exit code {process.poll()})")
        time.sleep(POLL_S)
    return time.time()


def _verify(bootstrap: str, topic: str, ends: Mapping[int, int], exactly_once: bool) -> str:
    """Every partition read back (read_committed): exactly its source's count of records, the offsets of the
    source carried in order (IdentityReplicationPolicy keeps no offsets, so the count and order of keys stand in)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-verify-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    counts = dict.fromkeys(ends, 0)
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        open_partitions = set(ends)
        while open_partitions:
            message = consumer.poll(5.0)
            if message is None:
                break
            if (error := message.error()) is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    open_partitions.discard(message.partition() or 0)
                continue
            counts[message.partition() or 0] += 1
    finally:
        consumer.close()
    if counts != dict(ends):
        return f"records per partition {counts}, expected {dict(ends)}" + ("" if exactly_once else " (at-least-once)")
    return "every record once"
