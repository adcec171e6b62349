"""SPEC §3 against a real broker: compaction holes, transactions, DeleteRecords, data loss."""

from __future__ import annotations

import re
from pathlib import Path

from e2e.destinations import DestinationUnderTest, chain, next_offset
from e2e.harness import (
    ArchivedRecord,
    MirrorProcess,
    assert_same_records,
    cli_env,
    read_archive,
    run_cli,
    scrape_metric,
    source_records,
    wait_until,
    write_config,
)
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    Record,
    compacted_topic_config,
    create_topic,
    delete_records,
    first_readable_offset,
    generate_records,
    produce,
    produce_transactional,
    wait_for_compaction,
    watermarks,
)
from testkit.ports import free_port


def _run_to(
    config: Path,
    log: Path,
    destination: DestinationUnderTest,
    topic: str,
    until: int,
    port: int | None = None,
) -> tuple[MirrorProcess, dict[str, float | None]]:
    """Run the mirror until the chain reaches next_offset; return it drained plus a metrics snapshot."""
    env = cli_env(MIRROR_V3_METRICS_PORT=str(port)) if port else cli_env()
    mirror = MirrorProcess(config, log, env=env)
    metrics: dict[str, float | None] = {}
    try:
        wait_until(lambda: next_offset(destination, topic, 0) == until, 180, f"chain did not reach {until}")
        if port:
            partition = 0
            for name in (
                "mirror_v3_source_offset_gap_records_total",
                "mirror_v3_source_lost_records_total",
                "mirror_v3_source_lag_offsets",
                "mirror_v3_destination_offset_verified",
            ):
                metrics[name] = scrape_metric(port, name, topic, partition)
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    return mirror, metrics


def test_compacted_topic_holes_are_counted(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name, config=compacted_topic_config())
    # Few keys, no null keys (a compacted topic rejects them), no tombstones: plenty to compact away.
    produce(
        kafka.bootstrap,
        topic_name,
        0,
        generate_records(20_000, seed=5, key_space=200, null_key_ratio=0.0, null_value_ratio=0.0),
    )
    first_readable = wait_for_compaction(kafka.bootstrap, topic_name, 0, timeout=60)
    low, high = watermarks(kafka.bootstrap, topic_name, 0)
    assert first_readable > low, "compaction did not happen"
    before = {r.offset: r for r in source_records(kafka.bootstrap, topic_name, 0)}
    assert len(before) < high - low, "compaction left no holes"

    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
        spark={"max-offsets-per-read": 5_000},
    )
    _, metrics = _run_to(config, tmp_path / "run.log", destination, topic_name, high, port=free_port())

    archive = read_archive(destination, topic_name, 0)
    after = {r.offset: r for r in source_records(kafka.bootstrap, topic_name, 0)}
    # The cleaner may keep compacting while we mirror: every archived record must be exactly the
    # source's record at that offset, and every record still in the source must be archived.
    for record in archive:
        assert record == before.get(record.offset), f"offset {record.offset} differs from the source"
    missing = sorted(set(after) - {r.offset for r in archive})
    assert not missing, f"records still in the source are missing from the archive: {missing[:10]}"
    assert len({r.offset for r in archive}) == len(archive)
    assert chain(destination, topic_name, 0)[0].first == low
    holes = (high - low) - len(archive)
    assert holes > 0
    assert metrics["mirror_v3_source_offset_gap_records_total"] == holes


def test_transactions_only_committed_land_and_lag_reaches_zero(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    batches: list[tuple[list[Record], bool]] = []
    for index, commit in enumerate([True, False, True, True, False, True, False]):
        batches.append((generate_records(300 + 50 * index, seed=100 + index), commit))
    produce_transactional(kafka.bootstrap, topic_name, 0, batches)
    low, high = watermarks(kafka.bootstrap, topic_name, 0)
    committed = source_records(kafka.bootstrap, topic_name, 0)
    assert len(committed) == sum(len(records) for records, commit in batches if commit)

    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
        spark={"max-offsets-per-read": 700},
    )
    # The chain must reach the high watermark: the ranges cover commit and abort markers, and the
    # aborted transaction at the very end.
    _, metrics = _run_to(config, tmp_path / "run.log", destination, topic_name, high, port=free_port())
    assert_same_records(read_archive(destination, topic_name, 0), committed)
    assert metrics["mirror_v3_source_lag_offsets"] == 0
    assert metrics["mirror_v3_destination_offset_verified"] == high
    assert metrics["mirror_v3_source_offset_gap_records_total"] == (high - low) - len(committed)

    status = run_cli("status", "--config", str(config), "--format", "json")
    assert status.returncode == 0, status.stderr
    assert '"lag":0' in status.stdout


def test_delete_records_before_first_run_starts_at_log_start(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(3_000, seed=21))
    assert delete_records(kafka.bootstrap, topic_name, 0, 1_200) == 1_200
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0}],
    )
    mirror, _ = _run_to(config, tmp_path / "run.log", destination, topic_name, 3_000)
    assert re.search(r'msg="mirror starting" .*start_offset=1200 .*source_low_watermark=1200', mirror.log_text())
    assert chain(destination, topic_name, 0)[0].first == 1_200
    assert_same_records(read_archive(destination, topic_name, 0), source_records(kafka.bootstrap, topic_name, 0))


def test_destination_behind_log_start_fails_or_skips(
    kafka: KafkaBroker, destination: DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(1_000, seed=31))
    before_loss = source_records(kafka.bootstrap, topic_name, 0)
    mirrors = [{"topic": topic_name, "partition": 0}]
    config = write_config(tmp_path / "mirror.yaml", bootstrap=kafka.bootstrap, destination=destination, mirrors=mirrors)
    _run_to(config, tmp_path / "run1.log", destination, topic_name, 1_000)

    produce(kafka.bootstrap, topic_name, 0, generate_records(1_000, seed=32))
    assert delete_records(kafka.bootstrap, topic_name, 0, 1_500) == 1_500
    mirror = MirrorProcess(config, tmp_path / "run2.log")
    try:
        assert mirror.wait(120) == 1
    finally:
        mirror.stop()
    errors = [line for line in mirror.log_text().splitlines() if "level=ERROR" in line]
    assert len(errors) == 1, mirror.tail()
    assert "log start offset 1500" in errors[0] and "next offset to mirror 1000" in errors[0], errors[0]
    assert "Traceback" not in mirror.log_text()
    assert next_offset(destination, topic_name, 0) == 1_000  # nothing written

    skip = write_config(
        tmp_path / "skip.yaml",
        bootstrap=kafka.bootstrap,
        destination=destination,
        mirrors=[{**mirrors[0], "source": {"on-data-loss": "skip"}}],
    )
    mirror, metrics = _run_to(skip, tmp_path / "run3.log", destination, topic_name, 2_000, port=free_port())
    assert metrics["mirror_v3_source_lost_records_total"] == 500
    assert re.search(
        r"level=WARNING msg=\"source records lost, skipping\" .*lost_from=1000 lost_to=1499", mirror.log_text()
    )
    expected: list[ArchivedRecord] = before_loss + source_records(kafka.bootstrap, topic_name, 0)
    assert_same_records(read_archive(destination, topic_name, 0), expected)
    assert first_readable_offset(kafka.bootstrap, topic_name, 0) == 1_500
