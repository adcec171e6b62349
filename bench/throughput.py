"""Backlog throughput of one cell (record size x partitions): the raw baselines and the mirror into each path.

A topic of its own gets the backlog; the raw confluent-kafka consume loop, kcat (when installed) and, when a Kafka
path runs, a raw consume -> produce copy to a destination broker drain it first. Then the real CLI copies it into
each destination in turn (a directory; a fresh bucket on a moto server started for the cell; a fresh topic per
offsets mode on the destination broker), one mirror per partition in one process, timed from the moment it can read
(its `spark session ready` line, or the last `mirror starting` line if later) to its last `flushed` line, and the
destination is verified after the drain. psutil samples the CPU of every process meanwhile. Beside a Kafka path,
MirrorMaker 2 copies the same backlog to the destination broker in both its modes (bench.mirror_maker). With
`table=iceberg`, the filesystem path runs twice: as it is, and with the archive an Iceberg table (issue 48: what the
table adds).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

from bench import raw
from bench.durable import table_holds
from bench.mirror import Context, finish, flushes, start, wait_for, wait_landed
from bench.mirror_maker import MODES, mm2_backlog
from bench.procs import Sampler
from bench.profilers import PySpy, jfr_options, jfr_summary, py_spy
from bench.scenarios import TABLE, Scenario
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, delete_topic
from testkit.mirror_run import log_time
from testkit.ports import free_port
from testkit.s3_servers import MotoServer
from testkit.targets import FilesystemTarget, KafkaTarget, S3Target, Target

MOTO_KEY_BUFFER = "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"
TABLE_PATH = "filesystem-table"  # `table=iceberg`: the filesystem path again, the archive an Iceberg table
_ROUNDS: collections.defaultdict[tuple[int, int], Iterator[int]] = collections.defaultdict(itertools.count)


class RamMoto(MotoServer):
    """moto with every object in RAM: by default it spools objects above 5 MiB to temp files on disk."""

    def _command(self) -> tuple[list[str], dict[str, str]]:
        command, env = super()._command()
        return command, {**(env or {}), MOTO_KEY_BUFFER: str(1 << 40)}


def path_target(
    path: str,
    ctx: Context,
    topic: str,
    partitions: int,
    moto: RamMoto | None,
    destination: KafkaBroker | None,
    topic_timeout: float = 30.0,
) -> tuple[Target, str, int | None]:
    """Where a mirror of `topic` writes for a destination path (PATHS), the name it writes there (the topic, or
    `<topic>.<mode>` on the destination broker, created here) and the pid of the server behind it (None: none)."""
    if path == "filesystem":
        return FilesystemTarget(ctx.scratch / path), topic, None
    if path == "s3" and moto is not None:
        return S3Target(moto.endpoint, moto.access_key, moto.secret_key, moto.region), topic, moto.pid
    if path.startswith("kafka-") and destination is not None:
        mode = path.removeprefix("kafka-")
        name = f"{topic}.{mode}"
        create_topic(destination.bootstrap, name, partitions, timeout=topic_timeout)
        return KafkaTarget(destination.bootstrap, mode), name, destination.pid
    raise ValueError(f"unknown path {path!r}")


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    topic = ctx.name
    create_topic(ctx.bootstrap, topic, s.partitions)
    ends = dict.fromkeys(range(s.partitions), -(-s.records // s.partitions))
    cell = {"records": sum(ends.values()), "value_size": s.value_size, "partitions": s.partitions}
    produced = raw.produce_backlog(ctx.bootstrap, topic, ends, s.value_size)
    yield {**cell, "path": "produce", "seconds": produced}
    yield {**cell, "path": "raw", **raw.consume(ctx.bootstrap, topic, ends, ctx.timeout)}
    parquet = raw.consume_to_parquet(ctx.bootstrap, topic, ends, ctx.timeout, ctx.scratch / "raw-parquet")
    yield {**cell, "path": "raw-parquet", **parquet}
    if (kcat := raw.kcat(ctx.bootstrap, topic, ends, ctx.timeout)) is not None:
        yield {**cell, "path": "kcat", **kcat}
    with contextlib.ExitStack() as servers:
        kafka = any(path.startswith("kafka-") for path in s.paths)
        destination = servers.enter_context(KafkaBroker()) if kafka else None
        moto = servers.enter_context(RamMoto()) if "s3" in s.paths else None
        if destination is not None:
            create_topic(destination.bootstrap, f"{topic}.copy", s.partitions)
            seconds = raw.copy(ctx.bootstrap, destination.bootstrap, topic, f"{topic}.copy", ends, ctx.timeout)
            yield {**cell, "path": "raw-copy", "seconds": seconds}
            for peer in MODES if s.mirror_maker else ():  # the Kafka -> Kafka peer, on the same backlog
                copied = mm2_backlog(
                    ctx.bootstrap, ctx.broker_pid, destination, topic, ends, peer, ctx.logs, free_port(), ctx.timeout
                )
                yield {**cell, "path": peer, **copied}
        # With a table, the filesystem path runs twice, which one first alternating from round to round: the second
        # run of a cell found the first's gigabyte in the page cache and ran up to 23 % slower, table or not.
        table_first = s.table == "iceberg" and next(_ROUNDS[(s.value_size, s.partitions)]) % 2 == 1
        for path in s.paths:
            target, name, server = path_target(path, ctx, topic, s.partitions, moto, destination)
            if path == "filesystem" and table_first:
                yield {**cell, "path": TABLE_PATH, **table_backlog(s, ctx, ends)}
            yield {**cell, "path": path, **mirror_backlog(s, ctx, path, target, name, ends, server)}
            if path == "filesystem" and s.table == "iceberg" and not table_first:
                yield {**cell, "path": TABLE_PATH, **table_backlog(s, ctx, ends)}
    delete_topic(ctx.bootstrap, topic)  # a gigabyte the broker need not keep for the rest of the run


def table_backlog(s: Scenario, ctx: Context, ends: dict[int, int]) -> dict[str, Any]:
    """The filesystem path with the archive an Iceberg table in the embedded catalog, committed every
    `table_commit_ms`: besides the time to land the backlog in the archive, the time until the table's last commit
    holds all of it (`visible_seconds`, from the same start), read from the table's snapshots."""
    target = FilesystemTarget(ctx.scratch / TABLE_PATH)
    table = {"table": {"format": "iceberg", "name": TABLE, "commit-interval-ms": s.table_commit_ms}}
    row = mirror_backlog(s, ctx, TABLE_PATH, target, ctx.name, ends, None, destination=table)
    visible = table_holds(target, ctx.name, ends, TABLE.format(topic=ctx.name))
    return {**row, "visible_seconds": round(visible - row["began_at"], 3)}


def mirror_backlog(
    s: Scenario,
    ctx: Context,
    path: str,
    target: Target,
    name: str,
    ends: dict[int, int],
    server: int | None,
    entry: dict[str, Any] | None = None,
    destination: dict[str, Any] | None = None,
    label: str | None = None,
) -> dict[str, Any]:
    """One mirror process copying the backlog into `target` (topic or prefix `name`); `entry` and `destination`:
    keys added to each mirror entry and to the destination block; `label`: its config and log files' name."""
    topic, profile = ctx.name, ctx.profile
    os.sync()  # no earlier run's gigabyte still being written back: it would slow whichever run comes next
    jfr = ctx.logs / f"{path}.jfr"
    spark = {"conf": {"spark.driver.extraJavaOptions": jfr_options(jfr)}} if profile else None
    mirrors = [
        {"topic": topic, "partition": p, **({"override": name} if name != topic else {}), **(entry or {})} for p in ends
    ]
    run = start(ctx, label or path, target, mirrors, s.max_time_ms, spark, destination)
    named = {"source broker": ctx.broker_pid, "destination server": server}
    with run, Sampler(run.pid, named) as sampler:
        ready = log_time(wait_for(run, "spark session ready", ctx.timeout)[0])
        spy_binary = py_spy() if profile else None
        spy = PySpy(spy_binary, run.pid, ctx.logs / f"{path}.py-spy.txt") if spy_binary else None
        wait_landed(run, target, name, ends, ctx.timeout)
        sampler.sample()
        profiles = {"py_spy": spy.stop()} if spy is not None else {}
        began = max([ready, *(log_time(f) for f in run.events("mirror starting"))])
        written = flushes(run)
        done = written.pop("last_flush_at")
        result = finish(run, target, {name: ends})
    if profile:
        profiles["jfr"] = jfr_summary(jfr)
    return {
        "began_at": began,
        "seconds": round(done - began, 3),
        "startup_seconds": round(began - run.started_at, 3),
        "cpu": sampler.cpu_between(began, done),
        **written,
        **result,
        **profiles,
    }
