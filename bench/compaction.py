"""Compaction and prune of an S3 archive (moto): what each costs in S3 requests and CPU per GB of archive.

A backlog is archived by the real mirror CLI into S3 in small blobs (`blob_offsets` records each, as a mirror at
max-time 1 s writes them over a day), with the requests moto logged meanwhile (the write's own cost, for scale).
Then, one command at a time, with psutil sampling its process tree and moto:
- `compact` (everything merged: min-age 0, no window; blobs up to the target size), and the requests it sent;
- `prune --before <now>` (every chain down to its last blob; now is 2 s after the compaction: S3's times are whole
  seconds), and the requests it sent.
Every request is counted from moto's access log by kind (a LIST is a GET of the bucket with list-type; an upload's
parts are PUTs of the object, its creation and completion POSTs; a batch delete is a POST of the bucket). Each
command must exit 0, and the compacted archive must hold exactly the backlog (the chain's record count checked).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from bench import raw
from bench.mirror import Context, finish, start, wait_landed
from bench.procs import Sampler
from bench.restart import LOG_SETTLE, _requests
from bench.restore import Command
from bench.scenarios import Scenario
from bench.throughput import RamMoto
from testkit.kafka_data import create_topic
from testkit.mirror_run import MirrorRunError
from testkit.targets import S3Target, chain


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    topic = ctx.name
    create_topic(ctx.bootstrap, topic, s.partitions)
    ends = dict.fromkeys(range(s.partitions), -(-s.records // s.partitions))
    raw.produce_backlog(ctx.bootstrap, topic, ends, s.value_size)
    cell = {"records": sum(ends.values()), "value_size": s.value_size, "partitions": s.partitions}
    with RamMoto() as moto:
        target = S3Target(moto.endpoint, moto.access_key, moto.secret_key, moto.region)
        named = {"moto": moto.pid, "source broker": ctx.broker_pid}
        flush = {**target.config({"max-time-ms": s.max_time_ms})["flush"], "max-offsets": s.blob_offsets}
        settings = {"flush": flush, "compaction": {"min-age-ms": 0, "window-ms": 0}}
        mark = moto.stdout_path.stat().st_size
        mirrors = [{"topic": topic, "partition": p} for p in ends]
        run = start(ctx, "archive", target, mirrors, s.max_time_ms, destination=settings)
        with run, Sampler(run.pid, named) as sampler:
            began = time.time()
            wait_landed(run, target, topic, ends, ctx.timeout)
            result = finish(run, target, {topic: ends})
            ended = time.time()
        time.sleep(LOG_SETTLE)
        size = _archive_bytes(target, topic, ends)
        yield {
            **cell,
            "path": "archive",
            "bytes": size,
            "blobs": _blobs(target, topic, ends),
            "requests": _requests(moto, mark),
            "seconds": round(ended - began, 3),
            "cpu": sampler.cpu_between(began, ended),
            "verified": result.get("verified"),
        }
        config = ctx.logs / "archive.yaml"
        for path in ("compact", "prune"):
            args: tuple[str, ...] = ()
            if path == "prune":  # S3 times are whole seconds: the merged blobs, just written, must be before the cut
                time.sleep(2.0)
                args = ("--before", str(int(time.time() * 1000)))
            mark = moto.stdout_path.stat().st_size
            row = _command(ctx, path, config, named, target.env(), *args)
            time.sleep(LOG_SETTLE)
            blobs = [chain(target, topic, p) for p in ends]
            if path == "compact" and [b[0].first if b else None for b in blobs] != [0] * len(ends):
                raise MirrorRunError(f"compact: the chains no longer start at 0: {blobs}")
            if path == "compact" and [b[-1].last + 1 for b in blobs] != list(ends.values()):
                raise MirrorRunError(f"compact: the chains no longer end where they did: {blobs}")
            yield {
                **cell,
                "path": path,
                "bytes": size,
                "blobs": sum(len(b) for b in blobs),
                "requests": _requests(moto, mark),
                **row,
            }


def _command(
    ctx: Context, command: str, config: Any, named: Mapping[str, int | None], env: Mapping[str, str], *args: str
) -> dict[str, Any]:
    with Command(command, config, ctx.logs, command, *args, env=env) as run, Sampler(run.pid, named) as sampler:
        code = run.wait(ctx.timeout)
        ended = time.time()
    if code != 0:
        raise MirrorRunError(f"{command} exited {code}:\n{run.output()[-2000:]}\n{run.tail()}")
    return {
        "seconds": round(ended - run.started_at, 3),
        "cpu": sampler.cpu_between(run.started_at, ended),
        "stdout": run.output().strip().splitlines()[-1],
    }


def _blobs(target: S3Target, topic: str, ends: Mapping[int, int]) -> int:
    return sum(len(target.names(topic, partition)) for partition in ends)


def _archive_bytes(target: S3Target, topic: str, ends: Mapping[int, int]) -> int:
    total = 0
    for partition in ends:
        pages = target.client.get_paginator("list_objects_v2").paginate(
            Bucket=target.bucket, Prefix=target.key_prefix(topic, partition)
        )
        total += sum(entry["Size"] for page in pages for entry in page.get("Contents", []))
    return total
