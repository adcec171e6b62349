"""Restart cost with a long chain: how fast the real CLI finds its position, and what it asks S3 for.

For each destination (S3 on a moto server of its own, and the filesystem) the partition's chain is filled with
`objects` blobs of one record each (offsets 0..objects-1, named and encoded as the mirror writes them, from the
source's real records), then `python -m supervisor run` is started on it and timed from process start to its
`mirror starting` line, which is logged once the chain's tail is found. For S3 every request moto received in that
window is counted by kind (its access log). The mirror then copies the `extra` records behind the chain, is
SIGTERMed (exit 0 expected) and the chain is verified. Between runs the blobs a run wrote are deleted, so every run
restarts on exactly `objects` blobs.

    python -m bench.restart                 # 10,000 objects, two runs per destination
    python -m bench.restart --objects 500   # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.data import produce_backlog
from bench.mirror_run import (
    MirrorRunError,
    MirrorSettings,
    _events,
    _log_time,
    spark_jobs,
    start_mirror,
    write_config,
)
from bench.targets import FilesystemTarget, InMemoryMotoServer, S3Target, VerificationError
from config.loader import load_config
from config.model import FilesystemDestination
from sinks.blob_chain import PAGE, BlobChain, BlobStore, blob_name, parse_blob_name
from sinks.blob_sink import BlobSink
from sinks.factory import SinkFactory
from sinks.records import KAFKA_SCHEMA, encode_parquet
from sinks.s3 import SHA256_METADATA, WRITER_METADATA
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import ConsumedRecord, KafkaDataError, consume_all, create_topic

DEFAULT_OBJECTS = 10_000
DEFAULT_EXTRA = 1_000
DEFAULT_RUNS = 2
DEFAULT_VALUE_SIZE = 100
DESTINATIONS = ("s3", "filesystem")
S3_PREFIX = "bench"
PARTITION = 0
# Flush the copied records after a second, not the default ten: the copy only proves the mirror continues.
SETTINGS = MirrorSettings(flush_max_time_ms=1_000)
UPLOAD_THREADS = 8
STARTING = "mirror starting"
# Time left after the `mirror starting` line for moto to write its last access-log lines. Nothing else reaches S3 that
# soon: the next request is the first commit, which needs a Spark read and then flush.max-time-ms of buffering.
ACCESS_LOG_SETTLE_SECONDS = 0.2
TITLES = {"s3": "S3 (moto)", "filesystem": "filesystem"}


@dataclass(frozen=True)
class RestartResult:
    destination: str  # "s3" or "filesystem"
    run: int  # 1-based
    objects: int  # blobs in the chain when the process started
    extra: int  # records the run then copied behind them
    next_offset: int  # `destination_next` of the `mirror starting` line (== objects)
    restart_seconds: float  # process start -> `mirror starting` (position known)
    first_log_seconds: float  # process start -> the process's first log line (interpreter, imports, config)
    spark_ready_seconds: float | None  # process start -> first Spark job submitted (the JVM is up)
    continued_seconds: float  # `mirror starting` -> the chain ends at objects + extra
    drain_seconds: float  # SIGTERM -> exit
    exit_code: int
    verified_blobs: int  # blobs of the verified chain after the run
    requests: dict[str, int] = field(default_factory=dict)  # S3 requests, process start -> `mirror starting`
    directory_entries: int | None = None  # filesystem: entries of the partition directory at restart
    open_seconds: float = 0.0  # the product's chain open() alone, in this process, with a warm client (before the runs)
    open_cold_seconds: float = 0.0  # the same, first call: includes creating the S3 client
    open_listings: int = 0  # list_page calls of one open(): LIST requests on S3, full directory reads on a filesystem
    open_listing_seconds: float = 0.0  # mean time of one of those listings (a LIST request, a directory read)
    load_average: float = 0.0  # 1-minute load average when the process was started

    @property
    def after_first_log_seconds(self) -> float:
        """First log line -> position known: source check, chain open, source offsets (while the JVM starts)."""
        return self.restart_seconds - self.first_log_seconds

    @property
    def lists(self) -> int:
        return self.requests.get("LIST", 0)

    @property
    def other_requests(self) -> dict[str, int]:
        return {kind: count for kind, count in sorted(self.requests.items()) if kind != "LIST"}

    @property
    def full_listing_pages(self) -> int:
        """LIST pages (1,000 keys each) a full listing of the chain would take."""
        return full_listing_pages(self.objects)


class RestartError(RuntimeError):
    pass


def full_listing_pages(objects: int) -> int:
    return max(1, math.ceil(objects / PAGE))


def measure_restart(
    bootstrap: str,
    workdir: Path,
    objects: int = DEFAULT_OBJECTS,
    *,
    extra: int = DEFAULT_EXTRA,
    runs: int = DEFAULT_RUNS,
    value_size: int = DEFAULT_VALUE_SIZE,
    destinations: Sequence[str] = DESTINATIONS,
    timeout: float = 600.0,
) -> list[RestartResult]:
    """Restart the CLI `runs` times on a chain of `objects` one-record blobs in each destination; see the module doc.

    `bootstrap` is a running source broker; a fresh topic with one partition of `objects + extra` records is made on
    it. Configs, logs, Spark event logs, the files and moto's access log go under `workdir`.
    """
    if objects < 1 or extra < 1 or runs < 1:
        raise ValueError("objects, extra and runs must be >= 1")
    topic = f"restart-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    end = objects + extra
    _say(f"producing {end:,} records of {value_size} B to {topic}[{PARTITION}]")
    produce_backlog(bootstrap, topic, 1, end, value_size)
    records = consume_all(bootstrap, topic, PARTITION, "read_committed", timeout=300)[:objects]
    if [r.offset for r in records] != list(range(objects)):
        raise RestartError(f"{topic}[{PARTITION}] did not give back offsets 0..{objects - 1}")
    defaults = FilesystemDestination(root="x")
    started = time.monotonic()
    blobs = encode_blobs(records, topic, defaults.compression, defaults.compression_level)
    _say(f"encoded {objects:,} one-record blobs in {time.monotonic() - started:.1f} s")

    results: list[RestartResult] = []
    for destination in destinations:
        dest_dir = workdir / destination
        dest_dir.mkdir(parents=True, exist_ok=False)
        if destination == "filesystem":
            results.extend(_filesystem_runs(bootstrap, dest_dir, topic, blobs, end, runs, timeout))
        elif destination == "s3":
            results.extend(_s3_runs(bootstrap, dest_dir, topic, blobs, end, runs, timeout))
        else:
            raise ValueError(f"unknown destination {destination!r}; expected one of {', '.join(DESTINATIONS)}")
    return results


def encode_blobs(
    records: Sequence[ConsumedRecord], topic: str, compression: str, compression_level: int | None
) -> list[tuple[str, bytes]]:
    """(name, Parquet bytes) of one blob per record, as the mirror writes them (KAFKA_SCHEMA, the destination's
    compression). Spark's timestampType is 0 for CreateTime, 1 for LogAppendTime; confluent-kafka's is 1 and 2."""
    table = pa.table(
        {
            "key": pa.array([r.key for r in records], pa.binary()),
            "value": pa.array([r.value for r in records], pa.binary()),
            "topic": pa.array([topic] * len(records), pa.string()),
            "partition": pa.array([PARTITION] * len(records), pa.int32()),
            "offset": pa.array([r.offset for r in records], pa.int64()),
            "timestamp": pa.array([r.timestamp_ms * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([max(0, r.timestamp_type - 1) for r in records], pa.int32()),
            "headers": pa.array(
                [[{"key": k, "value": v} for k, v in r.headers] for r in records], KAFKA_SCHEMA.field("headers").type
            ),
        },
        schema=KAFKA_SCHEMA,
    )
    return [
        (blob_name(r.offset, r.offset), bytes(encode_parquet(table.slice(i, 1), compression, compression_level)))
        for i, r in enumerate(records)
    ]


# -- destinations ----------------------------------------------------------------------------------------------------


def _filesystem_runs(
    bootstrap: str, dest_dir: Path, topic: str, blobs: list[tuple[str, bytes]], end: int, runs: int, timeout: float
) -> list[RestartResult]:
    target = FilesystemTarget(dest_dir / "destination", topic)
    directory = target.directory(PARTITION)
    directory.mkdir(parents=True)
    began = time.monotonic()
    for name, data in blobs:
        (directory / name).write_bytes(data)
    _say(f"filesystem: wrote {len(blobs):,} blobs into {directory} in {time.monotonic() - began:.1f} s")
    config = _config(dest_dir / "in-process", bootstrap, target, topic)
    opened = find_position_in_process(config, {}, len(blobs))
    _say(
        f"filesystem: open() in this process: {_ms(opened.warm_seconds)}, {opened.listings} directory reads "
        f"of {_ms(opened.listing_seconds)} each"
    )
    results = []
    for run in range(1, runs + 1):
        if run > 1:
            _delete_files_from(directory, len(blobs))
        entries = len(os.listdir(directory))
        result = _run_once(
            kind="filesystem",
            run=run,
            run_dir=dest_dir / f"run{run}",
            bootstrap=bootstrap,
            topic=topic,
            target_factory=lambda: target,
            env={},
            objects=len(blobs),
            end=end,
            timeout=timeout,
        )
        results.append(replace(result, directory_entries=entries, **_opened(opened)))
    return results


def _s3_runs(
    bootstrap: str, dest_dir: Path, topic: str, blobs: list[tuple[str, bytes]], end: int, runs: int, timeout: float
) -> list[RestartResult]:
    reason = InMemoryMotoServer.skip_reason()
    if reason is not None:
        raise RestartError(reason)
    with InMemoryMotoServer(dest_dir / "moto") as server:
        bucket = f"mirror-v3-restart-{uuid.uuid4().hex[:12]}"
        server.create_bucket(bucket)

        def new_target() -> S3Target:
            return S3Target(server, bucket, S3_PREFIX, topic)

        setup = new_target()
        try:
            prefix, env = setup.key_prefix(PARTITION), setup.env()
            config = _config(dest_dir / "in-process", bootstrap, setup, topic)
        finally:
            setup.close()
        began = time.monotonic()
        upload_blobs(server, bucket, prefix, blobs)
        _say(f"s3: uploaded {len(blobs):,} objects to s3://{bucket}/{prefix} in {time.monotonic() - began:.1f} s")
        opened = find_position_in_process(config, env, len(blobs))
        _say(
            f"s3: open() in this process: {_ms(opened.warm_seconds)} ({_ms(opened.cold_seconds)} with creating the "
            f"client), {opened.listings} listings of {_ms(opened.listing_seconds)} each (LIST uploads not included)"
        )
        results = []
        for run in range(1, runs + 1):
            if run > 1:
                _delete_objects_from(server, bucket, prefix, len(blobs))
            result = _run_once(
                kind="s3",
                run=run,
                run_dir=dest_dir / f"run{run}",
                bootstrap=bootstrap,
                topic=topic,
                target_factory=new_target,
                env=env,
                objects=len(blobs),
                end=end,
                timeout=timeout,
            )
            results.append(replace(result, **_opened(opened)))
        return results


def _opened(opened: InProcessOpen) -> dict[str, Any]:
    return {
        "open_seconds": opened.warm_seconds,
        "open_cold_seconds": opened.cold_seconds,
        "open_listings": opened.listings,
        "open_listing_seconds": opened.listing_seconds,
    }


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def upload_blobs(server: InMemoryMotoServer, bucket: str, prefix: str, blobs: list[tuple[str, bytes]]) -> None:
    """PUT every blob under `prefix` (a botocore client per thread), with the metadata the mirror gives its objects."""
    local = threading.local()
    clients: list[Any] = []
    lock = threading.Lock()
    writer = uuid.uuid4().hex

    def put(blob: tuple[str, bytes]) -> None:
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = server.client()
            with lock:
                clients.append(client)
        name, data = blob
        client.put_object(
            Bucket=bucket,
            Key=prefix + name,
            Body=data,
            Metadata={SHA256_METADATA: hashlib.sha256(data).hexdigest(), WRITER_METADATA: writer},
            ContentType="application/vnd.apache.parquet",
        )

    try:
        with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
            list(pool.map(put, blobs))
    finally:
        for client in clients:
            client.close()


def _delete_objects_from(server: InMemoryMotoServer, bucket: str, prefix: str, first: int) -> None:
    """Delete the partition's objects that start at or after offset `first` (what the previous run wrote)."""
    client = server.client()
    try:
        # Sorts after every blob that starts below `first`, before every blob starting at or above it.
        after = f"{prefix}{first - 1:020d}-{'9' * 20}"
        request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "StartAfter": after}
        keys: list[str] = []
        while True:
            page = client.list_objects_v2(**request)
            for entry in page.get("Contents", []):
                blob = parse_blob_name(entry["Key"][len(prefix) :])
                if blob is None or blob.first < first:
                    raise RestartError(f"unexpected key {entry['Key']} after {after}")
                keys.append(entry["Key"])
            if not page.get("IsTruncated"):
                break
            request["ContinuationToken"] = page["NextContinuationToken"]
        for batch in range(0, len(keys), 1000):
            client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": key} for key in keys[batch : batch + 1000]], "Quiet": True}
            )
    finally:
        client.close()


def _delete_files_from(directory: Path, first: int) -> None:
    for name in os.listdir(directory):
        blob = parse_blob_name(name)
        if blob is not None and blob.first >= first:
            (directory / name).unlink()


def _config(directory: Path, bootstrap: str, target: S3Target | FilesystemTarget, topic: str) -> Path:
    """The one-mirror config in `directory`; Spark's event log goes to `directory/spark-events`."""
    directory.mkdir(parents=True, exist_ok=True)
    return write_config(
        directory / "mirror.yaml",
        bootstrap=bootstrap,
        target=target,
        topic=topic,
        partitions=1,
        settings=SETTINGS,
        event_log_dir=directory / "spark-events",
    )


# -- finding the position ------------------------------------------------------------------------------------------


class CountingStore:
    """A BlobStore that counts the listings it is asked for and passes everything on."""

    def __init__(self, store: BlobStore) -> None:
        self._store = store
        self.checks_for_foreign_blobs = store.checks_for_foreign_blobs
        self.listings = 0
        self.listing_seconds: list[float] = []

    def location(self, name: str) -> str:
        return self._store.location(name)

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        self.listings += 1
        began = time.perf_counter()
        try:
            return await self._store.list_page(start_after, max_keys)
        finally:
            self.listing_seconds.append(time.perf_counter() - began)

    async def modified_at(self, name: str) -> float | None:
        return await self._store.modified_at(name)

    async def put_if_absent(self, name: str, data: memoryview) -> int:
        return await self._store.put_if_absent(name, data)

    async def clean_leftovers(self) -> list[str]:
        return await self._store.clean_leftovers()

    async def close(self) -> None:
        await self._store.close()


@dataclass(frozen=True)
class InProcessOpen:
    cold_seconds: float  # first open(): includes creating the S3 client
    warm_seconds: float  # second open() on the same client: the listings alone
    listings: int  # list_page calls of one open()
    listing_seconds: float  # mean time of one list_page call of the warm open()


def find_position_in_process(config_path: Path, env: dict[str, str], expected: int) -> InProcessOpen:
    """Time the product's chain `open()` (leftover clean-up + find_tail), twice, in this process, on the sink the CLI
    would build from `config_path`. Changes nothing on a clean chain."""
    with _environment(env):
        config = load_config(config_path)
        sink = SinkFactory(config.destination).build(config.mirrors[0], retries=False)
    if not isinstance(sink, BlobSink):
        raise RestartError(f"expected a blob sink, got {type(sink).__name__}")
    store = CountingStore(sink.chain.store)

    async def open_twice() -> InProcessOpen:
        try:
            seconds, listings = [], []
            for _ in range(2):
                store.listing_seconds.clear()
                before, began = store.listings, time.perf_counter()
                found = await BlobChain(store).open()
                seconds.append(time.perf_counter() - began)
                listings.append(store.listings - before)
                if found != expected:
                    raise RestartError(f"open() in this process found next offset {found}, expected {expected}")
        finally:
            await store.close()
        if listings[0] != listings[1]:
            raise RestartError(f"two open() calls on the same chain listed {listings[0]} and {listings[1]} times")
        return InProcessOpen(
            cold_seconds=seconds[0],
            warm_seconds=seconds[1],
            listings=listings[0],
            listing_seconds=sum(store.listing_seconds) / max(1, len(store.listing_seconds)),
        )

    return asyncio.run(open_twice())


@contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# -- one run of the CLI ----------------------------------------------------------------------------------------------


def _run_once(
    *,
    kind: str,
    run: int,
    run_dir: Path,
    bootstrap: str,
    topic: str,
    target_factory: Callable[[], S3Target | FilesystemTarget],
    env: dict[str, str],
    objects: int,
    end: int,
    timeout: float,
) -> RestartResult:
    """Start the CLI on the chain, time it to `mirror starting`, let it continue to `end`, SIGTERM, verify."""
    target = target_factory()
    try:
        if target.chain_next(PARTITION) != objects:  # also primes S3Target's done-detection behind the last key
            raise RestartError(f"{target.location(PARTITION)} does not end at {objects} before run {run}")
        run_config = _config(run_dir, bootstrap, target, topic)
        event_dir = run_dir / "spark-events"
        log_path = run_dir / "mirror.log"
        with log_path.open("wb") as log_file:
            load = os.getloadavg()[0]
            target.begin_usage()
            process_start = time.time()
            proc = start_mirror(run_config, log_file, env)
            try:
                deadline = time.monotonic() + timeout
                starting = _wait_for_starting(proc, log_path, deadline)
                time.sleep(ACCESS_LOG_SETTLE_SECONDS)
                usage = target.end_usage()
                starting_at = _log_time(starting)
                next_offset = int(starting.get("destination_next", "-1").replace("empty", "-1"))
                start_offset = int(starting.get("start_offset", "-1"))
                if next_offset != objects or start_offset != objects:
                    raise RestartError(
                        f"{kind} run {run}: mirror starting at start_offset={start_offset} "
                        f"destination_next={next_offset}, expected {objects}:\n{_tail(log_path)}"
                    )
                while target.chain_next(PARTITION) != end:
                    if proc.poll() is not None:
                        raise RestartError(f"{kind} run {run}: mirror exited {proc.returncode}:\n{_tail(log_path)}")
                    if time.monotonic() > deadline:
                        raise RestartError(f"{kind} run {run}: chain did not reach {end} in time:\n{_tail(log_path)}")
                    time.sleep(0.2)
                continued_at = time.time()
                stop_at = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                exit_code = proc.wait(120)
                drain_seconds = time.monotonic() - stop_at
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(30)
        if exit_code != 0:
            raise RestartError(f"{kind} run {run}: exit {exit_code} after SIGTERM (expected 0):\n{_tail(log_path)}")
        try:
            blobs, _ = target.verify({PARTITION: end})
        except VerificationError as exc:
            raise RestartError(f"{kind} run {run}: {exc}") from None
        try:
            jobs = spark_jobs(event_dir)
        except (MirrorRunError, OSError):
            jobs = []
        return RestartResult(
            destination=kind,
            run=run,
            objects=objects,
            extra=end - objects,
            next_offset=next_offset,
            restart_seconds=starting_at - process_start,
            first_log_seconds=_first_log_time(log_path) - process_start,
            spark_ready_seconds=jobs[0].submitted - process_start if jobs else None,
            continued_seconds=continued_at - starting_at,
            drain_seconds=drain_seconds,
            exit_code=exit_code,
            verified_blobs=blobs,
            requests=dict(usage.requests) if usage is not None else {},
            load_average=load,
        )
    finally:
        if isinstance(target, S3Target):
            target.close()


def _wait_for_starting(proc: subprocess.Popen[bytes], log_path: Path, deadline: float) -> dict[str, str]:
    while True:
        found = _events(log_path, STARTING)
        if found:
            return found[0]
        if proc.poll() is not None:
            raise RestartError(f"mirror exited {proc.returncode} before `{STARTING}`:\n{_tail(log_path)}")
        if time.monotonic() > deadline:
            raise RestartError(f"no `{STARTING}` line in time:\n{_tail(log_path)}")
        time.sleep(0.02)


def _first_log_time(log_path: Path) -> float:
    for line in log_path.read_text(errors="replace").splitlines():
        if line.startswith("ts="):
            return _log_time({"ts": line.split(" ", 1)[0].removeprefix("ts=")})
    raise RestartError(f"no log line in {log_path}")


def _tail(path: Path, lines: int = 30) -> str:
    kept = [line for line in path.read_text(errors="replace").splitlines() if not line.startswith(("\tat ", "\t... "))]
    return "\n".join(kept[-lines:])


# -- report ----------------------------------------------------------------------------------------------------------


def _kinds(requests: dict[str, int]) -> str:
    return ", ".join(f"{count} {kind}" for kind, count in requests.items()) or "none"


def markdown_restart(results: Sequence[RestartResult]) -> list[str]:
    """The restart section of the benchmark document."""
    objects = results[0].objects if results else DEFAULT_OBJECTS
    extra = results[0].extra if results else DEFAULT_EXTRA
    lines = [
        f"### Restart with {objects:,} objects in the chain",
        "",
        f"Each destination's partition chain was filled with {objects:,} one-record blobs (offsets 0..{objects - 1:,}, "
        "named and encoded as the mirror writes them) and `python -m supervisor run` was started on it, timed from "
        "process start to its `mirror starting` line (logged once the chain's tail is found; the Spark JVM starts "
        "meanwhile) with every request moto received until then counted; each run then copied "
        f"{extra:,} more records, was stopped with SIGTERM (exit 0) and its chain verified, and what it wrote was "
        "deleted before the next run; the last column is the product's chain `open()` alone (leftover clean-up and "
        "tail search), timed in the benchmark's own process with the client already created.",
        "",
        "| destination | objects | restart s (process start -> position known) | of which after the first log line s "
        "| LIST requests | other requests | full listing would need | position lookup alone |",
        "|---|---:|---:|---:|---:|---|---|---:|",
    ]
    for r in results:
        title = f"{TITLES.get(r.destination, r.destination)}, run {r.run}"
        if r.destination == "s3":
            lists, others = f"{r.lists}", _kinds(r.other_requests)
            full = f"{r.full_listing_pages} LIST pages"
            alone = f"{_ms(r.open_seconds)}: {r.open_listings} LISTs of {_ms(r.open_listing_seconds)}"
        else:
            lists = "n/a"
            others = "n/a"
            full = "1 directory read"
            entries = f" of {r.directory_entries:,} entries" if r.directory_entries is not None else ""
            alone = f"{_ms(r.open_seconds)}: {r.open_listings} directory reads{entries}"
        lines.append(
            f"| {title} | {r.objects:,} | {r.restart_seconds:.2f} | {r.after_first_log_seconds:.2f} | {lists} "
            f"| {others} | {full} | {alone} |"
        )
    loads = ", ".join(f"{r.load_average:.1f}" for r in results)
    lines += ["", f"1-minute load average at each process start: {loads}.", ""]
    return lines


def console_restart(results: Sequence[RestartResult]) -> list[str]:
    lines = []
    for r in results:
        spark = f"{r.spark_ready_seconds:.2f} s" if r.spark_ready_seconds is not None else "n/a"
        head = (
            f"{TITLES.get(r.destination, r.destination)} run {r.run}: {r.objects:,} objects, position known after "
            f"{r.restart_seconds:.2f} s ({r.first_log_seconds:.2f} s to the first log line, "
            f"{r.after_first_log_seconds:.2f} s after it; next offset {r.next_offset:,}; Spark ready after {spark}; "
            f"load {r.load_average:.1f})"
        )
        if r.destination == "s3":
            detail = (
                f"requests until then: {r.lists} LIST, others: {_kinds(r.other_requests)} "
                f"(a full listing: {r.full_listing_pages} LIST pages)"
            )
            alone = (
                f"open() alone {_ms(r.open_seconds)} ({_ms(r.open_cold_seconds)} creating the client) "
                f"with {r.open_listings} LISTs of {_ms(r.open_listing_seconds)} each"
            )
        else:
            detail = f"{r.directory_entries:,} directory entries" if r.directory_entries is not None else ""
            alone = (
                f"open() alone {_ms(r.open_seconds)} with {r.open_listings} directory reads "
                f"of {_ms(r.open_listing_seconds)} each"
            )
        tail = (
            f"then {r.extra:,} records copied in {r.continued_seconds:.2f} s, drain {r.drain_seconds:.2f} s, "
            f"exit {r.exit_code}, {r.verified_blobs:,} blobs verified"
        )
        lines.append(f"{head}; {detail}; {alone}; {tail}")
    return lines


# -- command line ----------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.restart",
        description="Restart time and S3 requests of the real CLI with a long chain already in the destination.",
    )
    parser.add_argument("--objects", type=int, default=DEFAULT_OBJECTS, help="blobs already in the chain (10000)")
    parser.add_argument("--extra", type=int, default=DEFAULT_EXTRA, help="records copied after the restart (1000)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="restarts per destination (2)")
    parser.add_argument("--value-size", type=int, default=DEFAULT_VALUE_SIZE, help="record value bytes (100)")
    parser.add_argument(
        "--destinations",
        type=lambda text: [part for part in text.split(",") if part],
        default=list(DESTINATIONS),
        help="comma-separated, of s3,filesystem (both)",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds allowed for each run (600)")
    parser.add_argument("--workdir", type=Path, help="keep configs, logs, files and moto's log here (an empty dir)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.objects < 1 or args.extra < 1 or args.runs < 1 or args.value_size < 0:
        parser.error("--objects, --extra and --runs must be >= 1, --value-size >= 0")
    unknown = [d for d in args.destinations if d not in DESTINATIONS]
    if unknown or not args.destinations:
        parser.error(f"--destinations: expected some of {','.join(DESTINATIONS)}, got {args.destinations}")
    began = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="mirror-v3-restart-")) if args.workdir is None else None
    workdir: Path = scratch if scratch is not None else args.workdir.resolve()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        if any(workdir.iterdir()):
            parser.error(f"--workdir {workdir} is not empty")
        _say("starting a broker")
        with KafkaBroker() as broker:
            results = measure_restart(
                broker.bootstrap,
                workdir,
                args.objects,
                extra=args.extra,
                runs=args.runs,
                value_size=args.value_size,
                destinations=args.destinations,
                timeout=args.timeout,
            )
    except (RestartError, MirrorRunError, KafkaDataError, TimeoutError) as exc:
        _say(f"FAILED: {exc}")
        return 1
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    for line in console_restart(results):
        print(line)
    print()
    for line in markdown_restart(results):
        print(line)
    _say(f"done in {time.monotonic() - began:.0f} s")
    return 0


def _say(message: str) -> None:
    print(f"bench.restart: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
