"""The archive as a table (`destination.table`), through the real CLI and real catalogs (PyIceberg's SQL catalog on
SQLite, the embedded default; a real Iceberg REST catalog server), read back by PyIceberg, deltalake and Spark SQL:
exactly the source's records, record by record, across a kill -9 around the table's commits, and for an archive
that joins its table later (`table-sync`); no file referenced twice; positions never backwards."""

from __future__ import annotations

import os
import random
import time
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.table.snapshots import ancestors_of

from config.estate import shard_of
from e2e.harness import backlog, mirror_config, partitions_of, run_until, start, status_json
from sinks.tables.positions import positions_of
from testkit.iceberg_rest import IcebergRestCatalog
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import generate_records, produce, watermarks
from testkit.mirror_run import MirrorRun, run_cli
from testkit.spark_sql_tables import IcebergCatalogSpec, read_with_spark_sql
from testkit.targets import FilesystemTarget, S3Target, assert_same_records, source_records, table_records

TABLE = "archive.{topic}"


def _config(
    tmp_path: Path,
    bootstrap: str,
    target: FilesystemTarget | S3Target,
    topic: str,
    partitions: int,
    catalog: dict[str, Any] | None = None,
    table_format: str | None = "iceberg",
    name: str = "mirror.yaml",
    keep_snapshots_ms: int | None = None,
) -> Path:
    path = mirror_config(
        tmp_path / name,
        bootstrap,
        target,
        partitions_of(topic, partitions),
        flush={"max-time-ms": 400, "max-offsets": 2_000},
        spark={"max-offsets-per-job": 4_000},
    )
    if table_format is None:
        return path
    # The destination block as the target writes it, with the table: one commit a second.
    document = yaml.safe_load(path.read_text())
    document["destination"]["table"] = {"format": table_format, "name": TABLE, "commit-interval-ms": 1000}
    if catalog is not None:
        document["destination"]["table"]["catalog"] = catalog
    if keep_snapshots_ms is not None:
        document["destination"]["table"]["keep-snapshots-ms"] = keep_snapshots_ms
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


def _table_positions(fs: FilesystemTarget, topic: str, table_format: str, partitions: int) -> dict[int, int]:
    """Where the table is per partition, as its newest commit naming each chain says (read beside the writer)."""
    found: dict[int, int] = {}
    if table_format == "delta":
        location = str(fs.root / topic)
        if not (fs.root / topic / "_delta_log").is_dir():
            return found
        delta = DeltaTable(location)
        for partition in range(partitions):
            found[partition] = delta.transaction_version(f"mirror-v3:{topic}/{partition}") or 0
        return found
    try:
        table = _table(fs, topic)
    except NoSuchTableError:
        return found
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):  # newest first
        for chain, at in positions_of(dict(snapshot.summary.ser_model()) if snapshot.summary else {}).items():
            found.setdefault(int(chain.rsplit("/", 1)[1]), at)
    return found


def _table_reached(fs: FilesystemTarget, topic: str, table_format: str, ends: dict[int, int]) -> bool:
    return _table_positions(fs, topic, table_format, len(ends)) == ends


def _check(table: Any, bootstrap: str, topic: str, chain_files: set[str], ends: dict[int, int]) -> None:
    """The table holds exactly the chains' files, each once, and so exactly the source's records; its commits'
    positions only grew, and end at the chains' ends."""
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert len(files) == len(set(files)), "a file is referenced twice"
    assert set(files) == chain_files  # every blob of the chains, in place, and nothing else
    rows = table.scan().to_arrow()
    for partition in ends:
        assert_same_records(table_records(rows, partition), source_records(bootstrap, topic, partition))
    commits = _positions(table)
    for partition, end in ends.items():
        chain = f"{topic}/{partition}"
        seen = [found[chain] for found in commits if chain in found]
        assert seen == sorted(seen), f"{chain}: positions went back: {seen}"
        assert seen[-1] == end


def _positions(table: Any) -> list[dict[str, int]]:
    """Each mirror-v3 commit's positions, oldest first."""
    history = [positions_of(dict(s.summary.ser_model())) for s in table.snapshots() if s.summary is not None]
    return [found for found in history if found]


# The default run kills an Iceberg archive once (tests/test_iceberg_table.py holds both formats' commits to the same
# rules with the real libraries); the soak run kills each format MIRROR_V3_SOAK_TABLE_KILLS times (default 20).
@pytest.mark.parametrize("table_format", ["iceberg", pytest.param("delta", marks=pytest.mark.soak)])
def test_the_archive_is_a_table_exactly_once_across_a_kill_around_its_commits(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path, table_format: str
) -> None:
    table_kill_cycles(kafka, fs, topic_name, tmp_path, table_format, kills=1, seed=20261127)


@pytest.mark.soak
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_soak_table_kill_cycles(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path, table_format: str
) -> None:
    kills = int(os.environ.get("MIRROR_V3_SOAK_TABLE_KILLS", "20"))
    table_kill_cycles(kafka, fs, topic_name, tmp_path, table_format, kills=kills, seed=20261128)


def table_kill_cycles(
    kafka: KafkaBroker,
    fs: FilesystemTarget,
    topic_name: str,
    tmp_path: Path,
    table_format: str,
    *,
    kills: int,
    seed: int,
) -> None:
    """`kills` times: run the mirror until its table committed, give it more to commit, kill -9 it around its next
    commit (one a second). Then one run catches up and drains: the table holds exactly the chains' files, once,
    and so the source's records; its positions only grew."""
    partitions, rng = 2, random.Random(seed)
    backlog(kafka.bootstrap, topic_name, [6_000, 4_000], seed=48)
    # Iceberg snapshots kept 3 s: the mirror's own expiry runs in the same commits the kills land around.
    keep_ms = 3_000 if table_format == "iceberg" else None
    config = _config(
        tmp_path, kafka.bootstrap, fs, topic_name, partitions, table_format=table_format, keep_snapshots_ms=keep_ms
    )
    for cycle in range(kills):
        log = tmp_path / f"run{cycle % 2}.log"
        log.unlink(missing_ok=True)
        if cycle:  # the earlier cycles' records may all be in the table: give this one something to commit
            for partition in range(partitions):
                produce(kafka.bootstrap, topic_name, partition, generate_records(2_000, seed=seed - cycle - partition))
        with start(config, log, fs) as run:
            run.wait_for_log(r'msg="table committed"')
            for partition in range(partitions):  # work for the commits to come
                produce(kafka.bootstrap, topic_name, partition, generate_records(3_000, seed=seed + cycle + partition))
            time.sleep(rng.uniform(0.3, 1.2))  # around the next commit
            run.kill9()
    # The last run has blobs to add however far the killed ones got: two rounds, the second once the table holds the
    # first, so that a commit of this run comes after this run's commits named every chain (the killed runs'
    # snapshots, older than the 3 s kept, are then expired whenever the kills landed).
    with start(config, tmp_path / "final.log", fs) as second:
        for round_seed in (seed + 1000, seed + 2000):
            for partition in range(partitions):
                produce(kafka.bootstrap, topic_name, partition, generate_records(1_000, seed=round_seed + partition))
            ends = {p: watermarks(kafka.bootstrap, topic_name, p)[1] for p in range(partitions)}
            second.wait_until(partial(_table_reached, fs, topic_name, table_format, ends), 120, f"the table at {ends}")
        second.drain()
    assert second.events("table committed"), "the drain's last blobs go into the table too"
    assert not second.events("table not updated, retrying")
    chain_files = {
        str(fs.directory(topic_name, p) / name) for p in range(partitions) for name in fs.names(topic_name, p)
    }
    code, report = status_json(config)  # status reads where the table is, from the table
    assert code == 0 and not report["unreadable-tables"], report
    assert {row["partition"]: row["table-next"] for row in report["mirrors"]} == ends
    if table_format == "iceberg":
        table = _table(fs, topic_name)
        assert table.properties["gc.enabled"] == "false"
        assert "mirror-v3.history-floor" in table.properties  # snapshots were expired meanwhile
        _check(table, kafka.bootstrap, topic_name, chain_files, ends)
        return
    _check_delta(str(fs.root / topic_name), None, kafka.bootstrap, topic_name, chain_files, ends)


def _check_delta(
    location: str,
    storage: dict[str, str] | None,
    bootstrap: str,
    topic: str,
    chain_files: set[str],
    ends: dict[int, int],
) -> None:
    """`_check` of a Delta table (per chain name, at its directory): its files, its records, and each chain's
    transaction version in every version of its log."""
    delta = DeltaTable(location, storage_options=storage)
    files = delta.file_uris()
    assert len(files) == len(set(files)), "a file is referenced twice"
    assert set(files) == chain_files
    rows = pa.table(delta.to_pyarrow_table())
    for partition, end in ends.items():
        assert_same_records(table_records(rows, partition), source_records(bootstrap, topic, partition))
        app = f"mirror-v3:{topic}/{partition}"
        versions = range(delta.version() + 1)
        seen = [
            DeltaTable(location, version=v, storage_options=storage).transaction_version(app) or 0 for v in versions
        ]
        assert seen == sorted(seen) and seen[-1] == end, seen


def test_an_archive_written_without_a_table_joins_tables_that_spark_sql_opens_by_name(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """An archive written before it had a table joins one with `table-sync`: an Iceberg table in the embedded SQLite
    catalog, one in a real Iceberg REST catalog server, and a Delta table; a second sync adds nothing. Spark SQL
    (Iceberg's Spark runtime and Delta's jars) opens each by name and reads exactly the source's records."""
    partitions = 2
    backlog(kafka.bootstrap, topic_name, [3_000, 2_000], seed=248)
    plain = _config(tmp_path, kafka.bootstrap, fs, topic_name, partitions, table_format=None, name="plain.yaml")
    ends = {p: watermarks(kafka.bootstrap, topic_name, p)[1] for p in range(partitions)}
    run_until(plain, tmp_path / "plain.log", fs, topic_name, ends)
    blobs = sum(len(fs.names(topic_name, p)) for p in range(partitions))
    with IcebergRestCatalog(warehouse=tmp_path / "rest-warehouse") as rest:
        rest_catalog = {"type": "rest", "properties": {"uri": rest.uri}}
        configs = [
            _config(tmp_path, kafka.bootstrap, fs, topic_name, partitions, name="sqlite.yaml"),
            _config(tmp_path, kafka.bootstrap, fs, topic_name, partitions, rest_catalog, name="rest.yaml"),
            _config(tmp_path, kafka.bootstrap, fs, topic_name, partitions, table_format="delta", name="delta.yaml"),
        ]
        for config in configs:
            synced = run_cli("table-sync", "--config", str(config), env=fs.env(), timeout=180)
            assert synced.returncode == 0, synced.stderr
            assert f": {blobs} blobs added in 1 commit; 2 chains in step" in synced.stdout, synced.stdout
            assert f"{blobs} blobs added in 1 commit, 0 to go" in synced.stderr  # the progress line
        # A second sync adds nothing (once here; tests/test_table_sync.py holds it for every case).
        again = run_cli("table-sync", "--config", str(configs[0]), env=fs.env(), timeout=180)
        assert again.returncode == 0 and "nothing to add; 2 chains in step" in again.stdout, again.stdout
        catalogs = [
            IcebergCatalogSpec(
                "mirror_v3", "jdbc", f"jdbc:sqlite:{fs.root / '_catalog' / 'iceberg.db'}", f"file://{fs.root}/_iceberg"
            ),
            IcebergCatalogSpec("rest", "rest", rest.uri),
        ]
        table = f"archive.`{topic_name}`"  # a topic's `-` needs quoting in SQL
        queries = {
            "sqlite": f"SELECT * FROM mirror_v3.{table}",
            "rest": f"SELECT * FROM rest.{table}",
            "delta": f"SELECT * FROM delta.`{fs.root / topic_name}`",
        }
        read = read_with_spark_sql(queries, tmp_path / "spark-sql", catalogs)
    for partition in range(partitions):
        source = source_records(kafka.bootstrap, topic_name, partition)
        for name, rows in read.items():
            assert len(source) == ends[partition], name
            assert_same_records(table_records(rows, partition), source)


# In the soak run: the default run's Iceberg case proves the commit over a filesystem archive; this one adds the
# commit races of two writers and S3's file IO, Delta's conditional puts included (tests/test_iceberg_table.py races
# two writers on every run).
@pytest.mark.soak
@pytest.mark.parametrize("table_format", ["iceberg", "delta"])
def test_two_shards_keep_one_table_of_an_s3_archive(
    kafka: KafkaBroker, s3: S3Target, topic_name: str, tmp_path: Path, table_format: str
) -> None:
    """Two processes (shards 0/2 and 1/2) write different partitions of one topic into an S3 archive (moto) and
    commit to its one table concurrently: Iceberg through a SQL catalog both reach (the table's metadata in the
    bucket), Delta at the chains' prefix, its log versions written with conditional puts."""
    # The fewest partitions both shards own some of. A shard is a hash of the cluster (here the broker's random
    # port), topic and partition: with up to 8 partitions, about one broker port in 128 put them all in one shard
    # and no count was found (a StopIteration, twice in 36 runs of this case); up to 32, one in two thousand million.
    partitions = next(
        n for n in range(2, 33) if {shard_of(kafka.bootstrap, topic_name, p, 2) for p in range(n)} == {0, 1}
    )
    backlog(kafka.bootstrap, topic_name, [3_000] * partitions, seed=148)
    catalog = {
        "type": "sql",
        "properties": {
            "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
            "warehouse": f"s3://{s3.bucket}/{s3.prefix}/_iceberg",
            "init_catalog_tables": "true",
        },
    }
    iceberg = table_format == "iceberg"
    config = _config(tmp_path, kafka.bootstrap, s3, topic_name, partitions, catalog if iceberg else None, table_format)
    env = {**s3.env()}
    shards = [MirrorRun(config, tmp_path / f"shard{i}.log", env={**env, "MIRROR_V3_SHARD": f"{i}/2"}) for i in range(2)]
    try:
        for partition in range(partitions):  # more while both run: commits of both shards, interleaved
            produce(kafka.bootstrap, topic_name, partition, generate_records(2_000, seed=1480 + partition))
        ends = {p: watermarks(kafka.bootstrap, topic_name, p)[1] for p in range(partitions)}
        for shard in shards:
            shard.wait_for_offsets(lambda p: s3.next_offset(topic_name, p), ends)
        for shard in shards:
            shard.drain()
    finally:
        for shard in shards:
            shard.stop()
    for shard in shards:
        assert shard.events("table committed")
    chain_files = {
        f"s3://{s3.bucket}/{s3.key_prefix(topic_name, p)}{name}"
        for p in range(partitions)
        for name in s3.names(topic_name, p)
    }
    if not iceberg:
        storage = {
            "AWS_ENDPOINT_URL": s3.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": s3.access_key,
            "AWS_SECRET_ACCESS_KEY": s3.secret_key,
            "AWS_REGION": s3.region,
        }
        location = f"s3://{s3.bucket}/{s3.prefix}/{topic_name}"
        _check_delta(location, storage, kafka.bootstrap, topic_name, chain_files, ends)
        return
    reader = load_catalog(
        "mirror_v3",
        type="sql",
        uri=f"sqlite:///{tmp_path / 'catalog.db'}",
        **{
            "s3.endpoint": s3.endpoint,
            "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key,
            "s3.region": s3.region,
        },
    )
    table = reader.load_table(TABLE.format(topic=topic_name))
    _check(table, kafka.bootstrap, topic_name, chain_files, ends)
