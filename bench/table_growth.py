"""What an archive's Iceberg table commit costs as the table grows over a day (issue 48): `python -m
bench.table_growth`.

The mirror's own commit path (`sinks.tables.iceberg.IcebergTable.commit`, the embedded SQLite catalog, PyIceberg) is
driven with the commits a day of mirroring makes: `--partitions` chains, each adding `--blobs` blobs per commit (a
flush every max-time: the commit interval ÷ max-time), `--commits` times. Per sampled commit: its CPU and wall time,
the table's metadata file, its manifest list and its live manifests; at the end, what a reader's scan planning costs.

The day is simulated (each commit stamped `--interval-s` after the last), so a day of commits takes minutes.
The blobs are not written: a commit reads no file when each blob comes with its writer's statistics (as the
mirror's do), so each blob is a name under the table's own directory with the statistics of a real blob of 8 records
of 1 KiB. The table is made in a fresh directory and left there (`--workdir`). One JSON line per sample on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyiceberg.table.snapshots as pyiceberg_snapshots

from core.file_statistics import FileStatistics, file_statistics
from core.records import KAFKA_SCHEMA, encode_parquet
from sinks.blob.chain import blob_name
from sinks.tables.iceberg import IcebergCatalog, IcebergTable
from sinks.tables.positions import TableFile

RECORDS_PER_BLOB = 8


def _sample_statistics(partition: int) -> FileStatistics:
    n = RECORDS_PER_BLOB
    columns = {
        "key": [b"k%d" % offset for offset in range(n)],
        "value": [os.urandom(1024) for _ in range(n)],
        "topic": ["orders"] * n,
        "partition": [partition] * n,
        "offset": list(range(n)),
        "timestamp": [1_800_000_000_000_000 + offset for offset in range(n)],
        "timestampType": [0] * n,
        "headers": [None] * n,
    }
    data = encode_parquet(pa.table(columns, schema=KAFKA_SCHEMA), "zstd", None)
    return file_statistics(pq.read_metadata(pa.BufferReader(data)), len(data))


def _bounded(statistics: FileStatistics, first: int) -> FileStatistics:
    """The sample's statistics for a blob starting at `first`."""
    bounds = tuple(
        dataclasses.replace(b, low=first, high=first + RECORDS_PER_BLOB - 1) if b.column == "offset" else b
        for b in statistics.bounds
    )
    return dataclasses.replace(statistics, bounds=bounds)


def _metadata_sizes(table: Any) -> dict[str, int]:
    metadata = table.metadata
    snapshot = table.current_snapshot()
    manifests = snapshot.manifests(table.io) if snapshot else []
    manifest_list = snapshot.manifest_list if snapshot else None
    return {
        "metadata_bytes": os.path.getsize(table.metadata_location.removeprefix("file://")),
        "snapshots": len(metadata.snapshots),
        "manifests": len(manifests),
        "manifest_list_bytes": os.path.getsize(manifest_list.removeprefix("file://")) if manifest_list else 0,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.table_growth", description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=256)
    p.add_argument("--blobs", type=int, default=60, help="blobs per chain per commit (commit interval / max-time)")
    p.add_argument("--commits", type=int, default=1440, help="commits (a day at a 60 s interval: 1 440)")
    p.add_argument("--every", type=int, default=60, help="sample every N-th commit")
    p.add_argument("--interval-s", type=float, default=60.0, help="the commit interval the day is simulated with")
    p.add_argument("--keep-snapshots-ms", type=int, default=0, help="the table's keep-snapshots-ms (0: all kept)")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="table-growth-"))
    catalog = IcebergCatalog(
        "bench",
        {
            "type": "sql",
            "uri": f"sqlite:///{root / '_catalog' / 'iceberg.db'}",
            "warehouse": f"file://{root / '_iceberg'}",
            "init_catalog_tables": "true",
        },
        directory=str(root / "_catalog"),
    )
    # A simulated day: each commit's snapshot is stamped `interval` after the last (PyIceberg stamps a snapshot with
    # its module's `time.time()`), and the table's expiry reads the same clock.
    day = [time.time()]
    pyiceberg_snapshots.time = types.SimpleNamespace(time=lambda: day[0])  # type: ignore[assignment,attr-defined]
    table = IcebergTable(catalog, "archive.orders", False, args.keep_snapshots_ms, wall=lambda: day[0])
    chains = {f"orders/{p}": p for p in range(args.partitions)}
    positions = dict(table.positions(list(chains)).next_offsets)
    samples = {p: _sample_statistics(p) for p in range(args.partitions)}
    for commit in range(1, args.commits + 1):
        files = []
        for chain, partition in chains.items():
            for blob in range(args.blobs):
                first = positions[chain] + blob * RECORDS_PER_BLOB
                name = blob_name(first, first + RECORDS_PER_BLOB - 1)
                uri = str(root / "orders" / str(partition) / name)
                files.append(TableFile(uri, partition, name, _bounded(samples[partition], first)))
        new = {chain: at + args.blobs * RECORDS_PER_BLOB for chain, at in positions.items()}
        day[0] += args.interval_s
        cpu, wall = time.process_time(), time.perf_counter()
        table.commit(files, new, dict(positions))
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        positions = new
        if commit == 1 or commit % args.every == 0 or commit == args.commits:
            row = {"commit": commit, "blobs": len(files), "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}
            print(json.dumps(row | _metadata_sizes(table._loaded())), flush=True)
    loaded = table._loaded()
    cpu, wall = time.process_time(), time.perf_counter()
    planned = sum(1 for _ in loaded.scan(row_filter="partition = 3").plan_files())
    print(
        json.dumps(
            {
                "scan_planning": "partition = 3",
                "files": planned,
                "cpu_s": round(time.process_time() - cpu, 3),
                "wall_s": round(time.perf_counter() - wall, 3),
                "workdir": str(root),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
