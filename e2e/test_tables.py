"""The archive as an Iceberg table (`destination.table`), through the real CLI and a real catalog (PyIceberg's SQL
catalog on SQLite, the embedded default), read back by PyIceberg: exactly the source's records, record by record,
across a kill -9 around the table's commits; no file referenced twice; positions never backwards."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml
from pyiceberg.catalog import load_catalog

from e2e.harness import backlog, mirror_config, partitions_of, run_until, start
from sinks.tables.positions import positions_of
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import generate_records, produce, watermarks
from testkit.targets import FilesystemTarget, SourceRecord, assert_same_records, source_records

TABLE = "archive.{topic}"


def _config(tmp_path: Path, bootstrap: str, fs: FilesystemTarget, topic: str, partitions: int) -> Path:
    path = mirror_config(
        tmp_path / "mirror.yaml",
        bootstrap,
        fs,
        partitions_of(topic, partitions),
        flush={"max-time-ms": 400, "max-offsets": 2_000},
        spark={"max-offsets-per-job": 4_000},
    )
    # The destination block as the target writes it, with the table: one commit a second.
    document = yaml.safe_load(path.read_text())
    document["destination"]["table"] = {"format": "iceberg", "name": TABLE, "commit-interval-ms": 1000}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _table(fs: FilesystemTarget, topic: str) -> Any:
    catalog = load_catalog(
        "mirror_v3",  # the SQL catalog keeps each catalog name's tables apart
        type="sql",
        uri=f"sqlite:///{fs.root / '_catalog' / 'iceberg.db'}",
        warehouse=f"file://{fs.root / '_iceberg'}",
    )
    return catalog.load_table(TABLE.format(topic=topic))


def _table_records(rows: pa.Table, partition: int) -> list[SourceRecord]:
    mine = rows.filter(pc.equal(rows["partition"], partition)).sort_by("offset")
    millis = pc.divide(pc.cast(mine["timestamp"], pa.int64()), 1000).to_pylist()
    return [
        SourceRecord(offset, key, value, [(h["key"], h["value"]) for h in headers or []], int(ms))
        for offset, key, value, headers, ms in zip(
            mine["offset"].to_pylist(),
            mine["key"].to_pylist(),
            mine["value"].to_pylist(),
            mine["headers"].to_pylist(),
            millis,
            strict=True,
        )
    ]


def _positions(table: Any) -> list[dict[str, int]]:
    """Each mirror-v3 commit's positions, oldest first."""
    history = [positions_of(dict(s.summary.ser_model())) for s in table.snapshots() if s.summary is not None]
    return [found for found in history if found]


def test_the_archive_is_a_table_exactly_once_across_a_kill_around_its_commits(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    partitions, rng = 2, random.Random(20261127)
    backlog(kafka.bootstrap, topic_name, [6_000, 4_000], seed=48)
    config = _config(tmp_path, kafka.bootstrap, fs, topic_name, partitions)
    with start(config, tmp_path / "run1.log", fs) as run:
        run.wait_for_log(r'msg="table committed"')
        for partition in range(partitions):  # work for the commits to come
            produce(kafka.bootstrap, topic_name, partition, generate_records(3_000, seed=480 + partition))
        time.sleep(rng.uniform(0.3, 1.2))  # around the next commit (one a second)
        run.kill9()
    ends = {p: watermarks(kafka.bootstrap, topic_name, p)[1] for p in range(partitions)}
    second = run_until(config, tmp_path / "run2.log", fs, topic_name, ends)
    assert second.events("table committed"), "the drain's last blobs go into the table too"
    assert not second.events("table not updated, retrying")

    table = _table(fs, topic_name)
    assert table.properties["gc.enabled"] == "false"
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert len(files) == len(set(files)), "a file is referenced twice"
    chain_files = {
        str(fs.directory(topic_name, p) / name) for p in range(partitions) for name in fs.names(topic_name, p)
    }
    assert set(files) == chain_files  # every blob of the chains, in place, and nothing else
    rows = table.scan().to_arrow()
    for partition in range(partitions):
        assert_same_records(_table_records(rows, partition), source_records(kafka.bootstrap, topic_name, partition))
    commits = _positions(table)
    for partition in range(partitions):
        chain = f"{topic_name}/{partition}"
        seen = [found[chain] for found in commits if chain in found]
        assert seen == sorted(seen), f"{chain}: positions went back: {seen}"
        assert seen[-1] == ends[partition]
