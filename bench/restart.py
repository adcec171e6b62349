"""Restart with a long chain: how soon the real CLI knows its position, and how many LISTs it sends S3 for it.

Each destination's partition is filled with one-record blobs (named and encoded as the mirror writes them, from the
source's real records), then the CLI starts on it and is timed from process start to its `mirror starting` line,
which it logs once the chain's tail is found. For S3 the requests moto logged in that window are counted (the bench
sends none then). The mirror then copies `extra` records behind the chain, is drained and the chain verified.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from bench import raw
from bench.mirror import Context, finish, start, wait_for, wait_landed
from bench.scenarios import Scenario
from bench.throughput import RamMoto
from config.model import FilesystemDestination
from core.records import KAFKA_SCHEMA, encode_parquet
from sinks.blob.chain import blob_name
from testkit.kafka_data import ConsumedRecord, consume_all, create_topic
from testkit.mirror_run import log_time
from testkit.s3_servers import MotoServer
from testkit.targets import FilesystemTarget, S3Target

# werkzeug's access log line: 127.0.0.1 - - [date] "GET /bucket?list-type=2&prefix=... HTTP/1.1" 200 -
_REQUEST = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) /[^/?\s]+(/\S*)?(\?\S*)? HTTP')
LOG_SETTLE = 0.2  # seconds for moto to write its last access-log lines after answering


def encode_blobs(records: list[ConsumedRecord], topic: str) -> list[tuple[str, bytes]]:
    """(name, Parquet bytes) of one blob per record, as the mirror writes them with the destination's defaults.
    Spark's timestampType is 0 for CreateTime; confluent-kafka's is 1."""
    table = pa.table(
        {
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "topic": [topic] * len(records),
            "partition": [0] * len(records),
            "offset": [r.offset for r in records],
            "timestamp": pa.array([r.timestamp_ms * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            "timestampType": [max(0, r.timestamp_type - 1) for r in records],
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
        },
        schema=KAFKA_SCHEMA,
    )
    defaults = FilesystemDestination(root="-")
    return [
        (blob_name(r.offset, r.offset), bytes(encode_parquet(table.slice(i, 1), defaults.compression, None)))
        for i, r in enumerate(records)
    ]


def _requests(moto: MotoServer, since: int) -> dict[str, int]:
    """Requests in moto's access log after byte `since`, by kind (a LIST is a GET of the bucket with list-type)."""
    with moto.stdout_path.open("rb") as log:
        log.seek(since)
        lines = log.read().decode(errors="replace")
    kinds: Counter[str] = Counter()
    for method, key, query in _REQUEST.findall(lines):
        if method == "GET" and not key and ("list-type" in query or "uploads" in query):
            kinds["LIST" if "list-type" in query else "LIST uploads"] += 1
        else:
            kinds[f"{method} {'object' if key else 'bucket'}"] += 1
    return dict(kinds)


def measure(s: Scenario, ctx: Context) -> Iterator[dict[str, Any]]:
    topic = ctx.name
    create_topic(ctx.bootstrap, topic, 1)
    raw.produce_backlog(ctx.bootstrap, topic, {0: s.records + s.extra}, s.value_size)
    blobs = encode_blobs(consume_all(ctx.bootstrap, topic, 0, timeout=300)[: s.records], topic)
    for destination in s.paths:
        with contextlib.ExitStack() as stack:
            moto = stack.enter_context(RamMoto()) if destination == "s3" else None
            yield {"destination": destination, "objects": s.records, "extra": s.extra, **_restart(s, ctx, blobs, moto)}


def _restart(s: Scenario, ctx: Context, blobs: list[tuple[str, bytes]], moto: MotoServer | None) -> dict[str, Any]:
    """Fill the chain, start the CLI on it, time it to `mirror starting`, let it copy the rest, drain, verify."""
    topic, end = ctx.name, s.records + s.extra
    target: S3Target | FilesystemTarget = (
        S3Target(moto.endpoint, moto.access_key, moto.secret_key, moto.region)
        if moto is not None
        else FilesystemTarget(ctx.scratch / "restart")
    )
    with ThreadPoolExecutor(8) as pool:  # boto3 clients are thread-safe; moto answers PUTs in parallel
        list(pool.map(lambda blob: target.write_raw(topic, 0, *blob), blobs))
    if target.next_offset(topic, 0) != s.records:
        raise AssertionError(f"{target.location(topic, 0)} does not end at {s.records} before the restart")
    mark = moto.stdout_path.stat().st_size if moto is not None else 0
    with start(ctx, f"restart-{target.kind}", target, [{"topic": topic, "partition": 0}], s.max_time_ms) as run:
        starting = wait_for(run, "mirror starting", ctx.timeout)[0]
        time.sleep(LOG_SETTLE)
        requests = _requests(moto, mark) if moto is not None else {}
        if starting["destination_next"] != str(s.records):
            raise AssertionError(f"restart found {starting['destination_next']}, expected {s.records}")
        wait_landed(run, target, topic, {0: end}, ctx.timeout)
        result = finish(run, target, {topic: {0: end}})
    return {
        "restart_seconds": round(log_time(starting) - run.started_at, 3),
        "lists": requests.get("LIST", 0) if moto is not None else None,
        "requests": requests,
        **result,
    }
