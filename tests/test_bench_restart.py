"""The restart benchmark's pure helpers: blob encoding, the in-process open() and the report."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bench.restart import (
    CountingStore,
    RestartResult,
    console_restart,
    encode_blobs,
    full_listing_pages,
    markdown_restart,
)
from sinks.blob_chain import BlobChain, parse_blob_name
from sinks.filesystem import FilesystemStore
from sinks.records import KAFKA_SCHEMA
from testkit.kafka_data import ConsumedRecord


def _records(count: int) -> list[ConsumedRecord]:
    return [
        ConsumedRecord(
            offset=i,
            key=b"%08x" % i,
            value=bytes([i % 256]) * 10,
            headers=[("h", b"v")] if i % 2 else [],
            timestamp_ms=1_700_000_000_000 + i,
            timestamp_type=1,
        )
        for i in range(count)
    ]


def _result(destination: str, **changes: object) -> RestartResult:
    fields: dict[str, object] = {
        "destination": destination,
        "run": 1,
        "objects": 10_000,
        "extra": 1_000,
        "next_offset": 10_000,
        "restart_seconds": 3.5,
        "first_log_seconds": 2.0,
        "spark_ready_seconds": 9.0,
        "continued_seconds": 12.0,
        "drain_seconds": 0.5,
        "exit_code": 0,
        "verified_blobs": 10_001,
        **changes,
    }
    return RestartResult(**fields)  # type: ignore[arg-type]


def test_full_listing_pages() -> None:
    assert [full_listing_pages(n) for n in (1, 1_000, 1_001, 10_000)] == [1, 1, 2, 10]


def test_blobs_hold_one_record_each_under_the_mirrors_names(tmp_path: Path) -> None:
    blobs = encode_blobs(_records(3), "t", "zstd", None)
    assert [name for name, _ in blobs] == [f"{i:020d}-{i:020d}.parquet" for i in range(3)]
    path = tmp_path / blobs[1][0]
    path.write_bytes(blobs[1][1])
    table = pq.read_table(path)
    assert table.schema.equals(KAFKA_SCHEMA, check_metadata=False)
    row = table.to_pylist()[0]
    assert (row["offset"], row["key"], row["topic"], row["partition"], row["timestampType"]) == (
        1,
        b"00000001",
        "t",
        0,
        0,
    )
    assert row["headers"] == [{"key": "h", "value": b"v"}]


def test_counting_store_counts_the_listings_of_an_open(tmp_path: Path) -> None:
    for name, data in encode_blobs(_records(5), "t", "none", None):
        (tmp_path / name).write_bytes(data)
    store = CountingStore(FilesystemStore(tmp_path))
    assert asyncio.run(BlobChain(store).open()) == 5
    assert store.listings == 1
    assert all(parse_blob_name(name) for name in (p.name for p in tmp_path.iterdir()))


def test_report_has_the_section_and_one_row_per_run() -> None:
    results = [
        _result(
            "s3",
            requests={"LIST": 8, "LIST uploads": 1},
            open_seconds=0.05,
            open_listings=8,
            open_listing_seconds=0.005,
        ),
        _result("filesystem", directory_entries=10_000, open_seconds=0.02, open_listings=9),
    ]
    lines = markdown_restart(results)
    assert lines[0] == "### Restart with 10,000 objects in the chain"
    rows = [line for line in lines if line.startswith("| S3") or line.startswith("| filesystem")]
    assert rows == [
        "| S3 (moto), run 1 | 10,000 | 3.50 | 1.50 | 8 | 1 LIST uploads | 10 LIST pages | 50 ms: 8 LISTs of 5 ms |",
        "| filesystem, run 1 | 10,000 | 3.50 | 1.50 | n/a | n/a | 1 directory read "
        "| 20 ms: 9 directory reads of 10,000 entries |",
    ]
    console = console_restart(results)
    assert len(console) == 2 and "8 LIST" in console[0] and "10,000 directory entries" in console[1]


@pytest.mark.parametrize("objects", [0, -1])
def test_full_listing_needs_at_least_one_page(objects: int) -> None:
    assert full_listing_pages(objects) == 1
