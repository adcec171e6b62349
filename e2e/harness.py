"""What the end-to-end tests share on top of testkit's launcher and targets: a source backlog, a config with the
suite's defaults, a run to a given destination offset, the exactly-once comparison and `status` as JSON."""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from testkit.kafka_data import create_topic, generate_records, produce, watermarks
from testkit.mirror_run import MirrorRun, log_time, run_cli, write_config
from testkit.targets import (
    BlobTarget,
    FilesystemTarget,
    S3Target,
    Target,
    assert_same_records,
    chain,
    source_records,
    table_records,
)
from tools.generated import STATUS_SCHEMA

# Offset queries every 200 ms instead of 500: the tests wait less for a mirror to notice new records.
SOURCE_DEFAULTS = {"poll-interval-ms": 200}
STATUS_SCHEMA = json.loads(STATUS_SCHEMA.path.read_text())


def write_yaml(path: Path, document: Mapping[str, Any]) -> Path:
    """A config document written as YAML (estate configs the tests build as dicts)."""
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False))
    return path


def backlog(bootstrap: str, topic: str, counts: Sequence[int], *, seed: int = 0, config: Any = None) -> None:
    """A topic with one partition per entry of `counts`, each holding that many generated records."""
    create_topic(bootstrap, topic, partitions=len(counts), config=config)
    for partition, count in enumerate(counts):
        if count:
            produce(bootstrap, topic, partition, generate_records(count, seed=seed + partition))


def mirror_config(
    path: Path,
    bootstrap: str,
    target: Target,
    mirrors: Sequence[Mapping[str, Any]],
    *,
    flush: Mapping[str, int] | None = None,
    spark: Mapping[str, Any] | None = None,
) -> Path:
    """The config of `mirrors` (each {topic, partition, ...}, see testkit.mirror_run) into `target`."""
    return write_config(
        path,
        bootstrap=bootstrap,
        destination=target.config(flush),
        mirrors=mirrors,
        spark=spark,
        source=SOURCE_DEFAULTS,
    )


def one_mirror(
    tmp_path: Path,
    bootstrap: str,
    target: Target,
    topic: str,
    *,
    flush: Mapping[str, int] | None = None,
    spark: Mapping[str, Any] | None = None,
    name: str = "mirror.yaml",
) -> Path:
    """`tmp_path/<name>`: one mirror, of partition 0 of `topic`, into `target`."""
    return mirror_config(tmp_path / name, bootstrap, target, partitions_of(topic, 1), flush=flush, spark=spark)


def partitions_of(topic: str, count: int, **extra: Any) -> list[dict[str, Any]]:
    """One mirror per partition of `topic`."""
    return [{"topic": topic, "partition": p, **extra} for p in range(count)]


def start(config: Path, log: Path, target: Target, **env: str) -> MirrorRun:
    return MirrorRun(config, log, env={**target.env(), **env})


def refused(config: Path, log: Path, target: Target, code: int = 1, **env: str) -> str:
    """Run the mirror, which must stop by itself with `code`, no traceback and one ERROR line; returns that line."""
    with start(config, log, target, **env) as run:
        return run.expect_failure(code)


def refused_beside(holder: MirrorRun, config: Path, log: Path, target: Target) -> str:
    """Start a second process on `holder`'s chains: it must exit 1 within 10 s, before Spark starts, with one ERROR
    line naming the holder and what to do; returns that line."""
    began = time.monotonic()
    with start(config, log, target) as second:
        line = second.expect_failure(1, timeout=60)
    assert time.monotonic() - began < 10, "the refusal came late"
    assert "another writer holds this chain's lease" in line, line
    assert f"pid {holder.pid} since " in line and "--standby" in line, line
    assert "spark session ready" not in second.log_text(), "the refused process started Spark first"
    return line


def standby_takes_over_a_killed_writer(
    active: MirrorRun, config: Path, log: Path, target: Target, bootstrap: str, topic: str, seed: int
) -> None:
    """Beside `active` (flushing `topic`'s partition 0 of 20 000 records), a `--standby` process waits; 20 000 more
    records keep the active one flushing, it is killed somewhere in a flush, and the standby must take over within
    15 s of the kill and bring the destination to 40 000."""
    with MirrorRun(config, log, env=target.env(), args=["--standby"]) as standby:
        standby.wait_for_log(r"msg=\"standby: waiting for the live writer\"")
        assert active.running, active.tail()  # no newcomer harmed it
        produce(bootstrap, topic, 0, generate_records(20_000, seed=seed))  # keep it flushing
        active.wait_for_log(r"msg=flushed", count=len(active.events("flushed")) + 3)
        time.sleep(random.Random(seed).uniform(0.0, 0.3))  # somewhere in a flush
        active.kill9()
        killed_at = time.time()
        standby.wait_for_log(r"msg=\"standby: took over\"", timeout=60)
        taken_after = log_time(standby.events("standby: took over")[0]) - killed_at
        assert taken_after <= 15, f"took over {taken_after:.1f}s after the kill"
        standby.wait_for_offsets(lambda p: target.next_offset(topic, p), {0: 40_000})
        standby.drain()


def run_until(config: Path, log: Path, target: Target, name: str, ends: Mapping[int, int], **env: str) -> MirrorRun:
    """Run the mirror until `name`'s partitions reach `ends` at the destination, then drain it (exit 0)."""
    with start(config, log, target, **env) as run:
        run.wait_for_log(r'msg="mirror starting"')  # the destination may be complete before the process is up
        run.wait_for_offsets(lambda p: target.next_offset(name, p), ends)
        run.drain()
    return run


def sigterm_while_records_wait(config: Path, log: Path, target: Target, bootstrap: str, topic: str, more: int) -> int:
    """Start the mirror; once it has flushed, add `more` records (less than a blob, far from max-time) and SIGTERM
    it as soon as it has seen them waiting in the source. The drain must write them (exit 0, trigger=shutdown) and
    the destination must end where the mirror says it stopped: at the source's end. Returns that offset."""
    # DEBUG heartbeats show the source end the mirror has seen.
    with start(config, log, target, LOG_LEVEL="DEBUG", MIRROR_V3_HEARTBEAT_SECS="0.2") as run:
        run.wait_for_log(r"msg=flushed")
        produce(bootstrap, topic, 0, generate_records(more, seed=99))
        end = watermarks(bootstrap, topic, 0)[1]
        run.wait_for_log(rf"msg=heartbeat .*source_end={end}\b")
        run.drain()
    (stopped,) = run.events("mirror stopped")
    assert "trigger=shutdown" in run.log_text(), run.tail()
    stopped_at = int(stopped["next_offset"])
    assert stopped_at == end, run.tail()
    assert target.next_offset(topic, 0) == stopped_at
    return stopped_at


def assert_exactly_once(bootstrap: str, target: Target, topic: str, partitions: int = 1, name: str = "") -> None:
    """Every partition of the destination (`name`, default the source topic) holds exactly the source's records."""
    for partition in range(partitions):
        assert_same_records(target.records(name or topic, partition), source_records(bootstrap, topic, partition))


def status_json(config: Path, *extra: str, env: Mapping[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    """`status --format json`, validated against the committed schema."""
    result = run_cli("status", "--config", str(config), "--format", "json", *extra, env=env)
    document: dict[str, Any] = json.loads(result.stdout)
    jsonschema.validate(document, STATUS_SCHEMA)
    return result.returncode, document


def status_rows(config: Path, env: Mapping[str, str] | None = None) -> list[tuple[Any, ...]]:
    """(source-end, destination-next, lag, error) of each row of `status --format json`."""
    _, document = status_json(config, env=env)
    return [(r["source-end"], r["destination-next"], r["lag"], r["error"]) for r in document["mirrors"]]


def readyz(port: int) -> tuple[int, str]:
    """/readyz's status and body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def table_of(target: BlobTarget, topic: str, name: str) -> tuple[list[str], Any]:
    """The files an archive's table names now and its rows, read as engines read it: PyIceberg on the filesystem
    archive's embedded catalog (`name`, e.g. `archive.{topic}`), deltalake on an S3 archive's Delta table."""
    from deltalake import DeltaTable
    from pyiceberg.catalog import load_catalog

    if isinstance(target, FilesystemTarget):
        catalog = load_catalog(
            "mirror_v3",
            type="sql",
            uri=f"sqlite:///{target.root / '_catalog' / 'iceberg.db'}",
            warehouse=f"file://{target.root / '_iceberg'}",
        )
        table = catalog.load_table(name.format(topic=topic))
        return [task.file.file_path for task in table.scan().plan_files()], table.scan().to_arrow()
    assert isinstance(target, S3Target)
    storage = {
        "AWS_ENDPOINT_URL": target.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": target.access_key,
        "AWS_SECRET_ACCESS_KEY": target.secret_key,
        "AWS_REGION": target.region,
    }
    delta = DeltaTable(f"s3://{target.bucket}/{target.prefix}/{topic}", storage_options=storage)
    return delta.file_uris(), delta.to_pyarrow_table()


def _file_of(target: BlobTarget, topic: str, partition: int, blob: str) -> str:
    if isinstance(target, FilesystemTarget):
        return str(target.root / topic / str(partition) / blob)
    assert isinstance(target, S3Target)
    return f"s3://{target.bucket}/{target.key_prefix(topic, partition)}{blob}"


def check_archive_table(
    target: BlobTarget, bootstrap: str, topic: str, name: str, kept_from: Mapping[int, int], strict: bool = True
) -> None:
    """The archive's table names only files its chains hold, none twice, and holds exactly the source's records of
    each partition from `kept_from` on, record by record. `strict`: it names exactly the chains' blobs (nothing
    redundant left); otherwise (after kills) it may still name a run a merged blob made redundant, and a prune
    killed after the table's commit may have left it starting later than the chain."""
    files, rows = table_of(target, topic, name)
    present = {_file_of(target, topic, p, blob) for p in kept_from for blob in target.names(topic, p)}
    assert len(files) == len(set(files)), "a file is named twice"
    if strict:
        expected = {_file_of(target, topic, p, blob.name) for p in kept_from for blob in chain(target, topic, p)}
        assert set(files) == expected, sorted(set(files) ^ expected)
    else:
        assert set(files) <= present, sorted(set(files) - present)
    for partition, first in kept_from.items():
        landed = table_records(rows, partition)
        start = first if strict or not landed else max(first, landed[0].offset)
        source = [r for r in source_records(bootstrap, topic, partition) if r.offset >= start]
        assert_same_records(landed, source)
