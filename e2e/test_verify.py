"""`verify` through the CLI: a mirrored archive compared with its source record by record, on the filesystem and S3;
deliberate corruption is found and named by offset; what the source deleted is reported as unverifiable."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from e2e.harness import backlog, mirror_config, partitions_of, run_until
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import delete_records
from testkit.mirror_run import run_cli
from testkit.targets import FilesystemTarget, S3Target, Target, chain

FLUSH = {"max-time-ms": 1_000, "max-offsets": 700}


def verify(config: Path, target: Target, *extra: str) -> tuple[int, dict[str, Any], str]:
    result = run_cli("verify", "--config", str(config), "--format", "json", *extra, env=target.env(), timeout=300)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout), result.stderr


# A soak case (CI time): tests/test_verify_task.py finds each kind of difference by offset in real Parquet files and
# tests/test_verify_output.py renders them; the CLI's exit codes and JSON over a filesystem archive are taken by the
# compaction and prune case, over S3 by the case below, over Kafka by test_kafka_destination's round trip.
@pytest.mark.soak
def test_an_exact_archive_passes_and_tampering_is_named_by_offset(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [3_000, 2_500, 0], seed=61)
    config = mirror_config(tmp_path / "mirror.yaml", kafka.bootstrap, fs, partitions_of(topic_name, 3), flush=FLUSH)
    run_until(config, tmp_path / "run.log", fs, topic_name, {0: 3_000, 1: 2_500})

    code, document, stderr = verify(config, fs, "--max-differences", "5")
    assert code == 0 and document["ok"], stderr
    rows = {row["partition"]: row for row in document["mirrors"]}
    assert (rows[0]["equal"], rows[0]["checked-from"], rows[0]["checked-end"]) == (3_000, 0, 3_000)
    assert rows[1]["equal"] == 2_500 and rows[1]["differences"] == [] and rows[1]["problems"] == []
    assert (rows[2]["equal"], rows[2]["checked-from"]) == (0, None)  # nothing mirrored yet, nothing to compare

    # Partition 0's second blob is rewritten under its name: one value changed, one record dropped, one doubled.
    second = chain(fs, topic_name, 0)[1]
    rows_of_blob = pq.read_table(io.BytesIO(fs.read(topic_name, 0, second.name))).to_pylist()
    changed, dropped, doubled = rows_of_blob[3]["offset"], rows_of_blob[10]["offset"], rows_of_blob[20]["offset"]
    rows_of_blob[3]["value"] = b"tampered"
    rows_of_blob.insert(21, dict(rows_of_blob[20]))
    del rows_of_blob[10]
    schema = pq.read_schema(io.BytesIO(fs.read(topic_name, 0, second.name)))
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows_of_blob, schema=schema), sink)
    fs.write_raw(topic_name, 0, second.name, sink.getvalue().to_pybytes())

    code, document, stderr = verify(config, fs)
    assert code == 1 and not document["ok"], stderr
    row = next(r for r in document["mirrors"] if r["partition"] == 0)
    assert [(d["offset"], d["kind"], d["fields"]) for d in row["differences"]] == [
        (changed, "different", ["value"]),
        (dropped, "missing", []),
        (doubled, "duplicate", []),
    ]
    assert (row["equal"], row["different"], row["missing"], row["extra"]) == (2_998, 1, 1, 1)
    assert any(fs.blob_location(topic_name, 0, second.name) in p for p in row["problems"]), row["problems"]
    table = run_cli("verify", "--config", str(config), env=fs.env(), timeout=300)
    assert table.returncode == 1 and f"offset {changed}: different (value)" in table.stdout, table.stdout


def test_on_s3_records_the_source_deleted_are_unverifiable_and_the_rest_passes(
    kafka: KafkaBroker, s3: S3Target, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [4_000], seed=62)
    config = mirror_config(tmp_path / "mirror.yaml", kafka.bootstrap, s3, partitions_of(topic_name, 1), flush=FLUSH)
    run_until(config, tmp_path / "run.log", s3, topic_name, {0: 4_000})
    delete_records(kafka.bootstrap, topic_name, 0, 1_500)

    code, document, stderr = verify(config, s3)
    assert code == 0 and document["ok"], stderr
    (row,) = document["mirrors"]
    assert (row["unverifiable-from"], row["unverifiable-end"]) == (0, 1_500)
    assert (row["checked-from"], row["checked-end"], row["equal"]) == (1_500, 4_000, 2_500)
    assert row["problems"] == [] and row["error"] is None
