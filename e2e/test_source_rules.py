"""SPEC §3 against a real broker: compaction holes, transactions, DeleteRecords, data loss.

How a source is read does not depend on the destination, so these run on the filesystem only; one mirror process
serves several independent topics, each checked through its own metric series and chain.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from e2e.harness import backlog, mirror_config, refused, run_until, status_json
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    Record,
    commit_offset,
    compacted_topic_config,
    create_topic,
    delete_records,
    first_readable_offset,
    generate_records,
    open_transaction,
    produce,
    produce_transactional,
    wait_for_compaction,
    watermarks,
)
from testkit.mirror_run import MirrorRun
from testkit.ports import free_port
from testkit.targets import FilesystemTarget, SourceRecord, assert_same_records, chain, source_records


def test_holes_transactions_and_deleted_records_in_one_process(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    kinds = ("compacted", "txn", "trimmed", "held")
    compacted, transactional, trimmed, held = (f"{topic_name}-{kind}" for kind in kinds)

    # A compacted topic: few keys, no null keys (rejected there), no tombstones: plenty to compact away.
    create_topic(kafka.bootstrap, compacted, config=compacted_topic_config())
    records = generate_records(20_000, seed=5, key_space=200, null_key_ratio=0.0, null_value_ratio=0.0)
    produce(kafka.bootstrap, compacted, 0, records)
    compacted_low = wait_for_compaction(kafka.bootstrap, compacted, 0, timeout=60)
    low, compacted_end = watermarks(kafka.bootstrap, compacted, 0)
    assert compacted_low > low, "compaction did not happen"
    before_mirroring = {r.offset: r for r in source_records(kafka.bootstrap, compacted, 0)}
    assert len(before_mirroring) < compacted_end - low, "compaction left no holes"

    # Transactions, committed and aborted, one aborted at the very end: the chain must still reach the end.
    create_topic(kafka.bootstrap, transactional)
    batches = [(generate_records(300 + 50 * i, seed=100 + i), commit) for i, commit in enumerate([1, 0, 1, 1, 0, 1, 0])]
    produce_transactional(kafka.bootstrap, transactional, 0, [(r, bool(c)) for r, c in batches])
    txn_low, txn_end = watermarks(kafka.bootstrap, transactional, 0)
    committed = source_records(kafka.bootstrap, transactional, 0)
    assert len(committed) == sum(len(r) for r, c in batches if c)

    # Records deleted before the first run: the chain starts at the log start offset.
    backlog(kafka.bootstrap, trimmed, [3_000], seed=21)
    assert delete_records(kafka.bootstrap, trimmed, 0, 1_200) == 1_200

    # A transaction left open (a hung producer) once the mirror has caught up: held, not caught up.
    backlog(kafka.bootstrap, held, [100], seed=22)

    config = mirror_config(
        tmp_path / "mirror.yaml",
        kafka.bootstrap,
        fs,
        [{"topic": topic, "partition": 0} for topic in (compacted, transactional, trimmed)]
        + [{"topic": held, "partition": 0, "source": {"transaction-hold-alert-ms": 1000}}],
        spark={"max-offsets-per-job": 700},
    )
    ends = {compacted: compacted_end, transactional: txn_end, trimmed: 3_000, held: 100}
    # The archive keeps the positions of group "billing" (selected; "billing-test" is excluded) every second.
    document = yaml.safe_load(config.read_text())
    document["destination"]["archive-groups"] = {
        "groups": ["billing.*"],
        "groups-exclude": ["billing-test"],
        "interval-ms": 1000,
    }
    config.write_text(yaml.safe_dump(document))
    commit_offset(kafka.bootstrap, "billing", trimmed, 0, 1_500)
    commit_offset(kafka.bootstrap, "billing-test", trimmed, 0, 1_300)
    port = free_port()
    first: dict[str, str | int] = {"partition": 0}
    with MirrorRun(config, tmp_path / "run.log", metrics_port=port) as run:
        run.wait_until(lambda: all(fs.next_offset(t, 0) == end for t, end in ends.items()), 180, f"chains at {ends}")
        for topic, end in ends.items():
            run.wait_for_metric("mirror_v3_destination_offset_verified", end, topic=topic, partition=0)
        # The gap count is per topic (one partition each here), the others per partition.
        metrics = {
            (topic, name): run.metric(f"mirror_v3_{name}", topic=topic, **({} if name.endswith("_total") else first))
            for topic in ends
            for name in ("source_offset_gap_records_total", "source_lag_offsets", "destination_offset_verified")
        }
        with open_transaction(kafka.bootstrap, held, 0, generate_records(150, seed=23)):
            run.wait_for_log(r"msg=\"held by an open transaction at the source\"")
            assert run.metric("mirror_v3_source_lag_offsets", topic=held, partition=0) == 0
            assert (run.metric("mirror_v3_source_high_watermark_lag_offsets", topic=held, partition=0) or 0) >= 150
            assert (run.metric("mirror_v3_source_transaction_held_seconds", topic=held, partition=0) or 0) >= 1
            _, document = status_json(config, "--process", f"http://127.0.0.1:{port}")
            (row,) = [r for r in document["mirrors"] if r["topic"] == held]
            assert row["lag"] == 0 and row["high-watermark-lag"] >= 150 and row["held-since"] is not None, row
        commit_offset(kafka.bootstrap, "billing", trimmed, 0, 2_500)  # a consumer moved on: archived within a second
        run.wait_until(lambda: len(run.events("group positions archived")) >= 2, 30, "the new billing position")
        # Aborted: the records are holes, the markers are read past, and the hold is over.
        aborted_end = watermarks(kafka.bootstrap, held, 0)[1]
        run.wait_until(lambda: fs.next_offset(held, 0) == aborted_end, 60, f"{held} at {aborted_end}")
        run.wait_until(
            lambda: run.metric("mirror_v3_source_transaction_held_seconds", topic=held, partition=0) == 0,
            30,
            "the hold to end",
        )
        run.drain()
    # A clean shutdown logs no ERROR line (Spark's shutdown noise included): alerting on ERROR stays meaningful.
    assert run.errors() == [], run.errors()
    # Beside its chains, the archive keeps what each topic is (issue 34): one document per topic, as it was seen.
    (document,) = [json.loads(p.read_text()) for p in sorted((fs.root / compacted / "_topic").glob("*.json"))]
    assert (document["source-topic"], document["partitions"], document["replication-factor"]) == (compacted, 1, 1)
    assert document["cleanup-policy"] == "compact" and document["configs"] == compacted_topic_config()
    assert document["topic-id"] and document["seen-at-ms"] > 0
    assert len(run.events("topic metadata archived")) == len(ends)  # one per topic, and nothing changed after
    # And the group's positions on the archived partitions, as they moved: 1 500, then 2 500.
    positions = [json.loads(p.read_text()) for p in sorted((fs.root / "_groups").glob("*/*.json"))]
    assert [d["groups"] for d in positions] == [
        {"billing": {trimmed: {"0": 1_500}}},
        {"billing": {trimmed: {"0": 2_500}}},
    ], positions
    assert positions[-1]["archived"][trimmed]["0"] == 3_000  # how far the archive was when it was read

    # Compaction: every archived record is the source's at that offset, every record still there is archived (the
    # cleaner may go on compacting while we mirror), and the holes are counted.
    archive = fs.records(compacted, 0)
    after = {r.offset: r for r in source_records(kafka.bootstrap, compacted, 0)}
    assert all(record == before_mirroring.get(record.offset) for record in archive)
    assert not sorted(set(after) - {r.offset for r in archive})
    assert len({r.offset for r in archive}) == len(archive)
    assert chain(fs, compacted, 0)[0].first == low
    assert metrics[compacted, "source_offset_gap_records_total"] == (compacted_end - low) - len(archive) > 0

    # Transactions: only committed records land; lag reaches 0 at the end, markers included.
    assert_same_records(fs.records(transactional, 0), committed)
    assert metrics[transactional, "source_lag_offsets"] == 0
    assert metrics[transactional, "destination_offset_verified"] == txn_end
    assert metrics[transactional, "source_offset_gap_records_total"] == (txn_end - txn_low) - len(committed)

    # Deleted before the first run.
    (starting,) = [e for e in run.events("mirror starting") if e["mirror"] == f"{trimmed}-0"]
    assert (starting["start_offset"], starting["source_low_watermark"]) == ("1200", "1200")
    assert chain(fs, trimmed, 0)[0].first == 1_200
    assert_same_records(fs.records(trimmed, 0), source_records(kafka.bootstrap, trimmed, 0))


def test_records_deleted_before_they_were_mirrored_fail_or_are_skipped(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [1_000], seed=31)
    before_loss = source_records(kafka.bootstrap, topic_name, 0)
    mirrors = [{"topic": topic_name, "partition": 0}]
    config = mirror_config(tmp_path / "mirror.yaml", kafka.bootstrap, fs, mirrors)
    run_until(config, tmp_path / "run1.log", fs, topic_name, {0: 1_000})

    produce(kafka.bootstrap, topic_name, 0, [Record(b"k%d" % i, b"v%d" % i) for i in range(1_000)])
    assert delete_records(kafka.bootstrap, topic_name, 0, 1_500) == 1_500
    line = refused(config, tmp_path / "run2.log", fs)
    assert "log start offset 1500" in line and "next offset to mirror 1000" in line, line
    assert fs.next_offset(topic_name, 0) == 1_000  # nothing written
    # What an operator sees next: not an ordinary backlog, but the loss that blocks every restart.
    code, document = status_json(config, "--process", "none")
    (row,) = document["mirrors"]
    assert (code, document["ok"], row["state"], row["lost"]) == (1, False, "data-lost", "1000..1499"), document

    skip = mirror_config(
        tmp_path / "skip.yaml", kafka.bootstrap, fs, [{**mirrors[0], "source": {"on-data-loss": "skip"}}]
    )
    port = free_port()
    with MirrorRun(skip, tmp_path / "run3.log", metrics_port=port) as skipping:
        skipping.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 2_000})
        lost = skipping.metric("mirror_v3_source_lost_records_total", topic=topic_name)  # per topic
        skipping.drain()
    assert lost == 500
    (warning,) = skipping.events("source records lost, skipping")
    assert (warning["level"], warning["lost_from"], warning["lost_to"]) == ("WARNING", "1000", "1499")
    expected: list[SourceRecord] = before_loss + source_records(kafka.bootstrap, topic_name, 0)
    assert_same_records(fs.records(topic_name, 0), expected)
    assert first_readable_offset(kafka.bootstrap, topic_name, 0) == 1_500
