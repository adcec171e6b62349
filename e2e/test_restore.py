"""`restore` through the CLI: archives written by real mirrors (filesystem and S3) produced back into fresh topics
in both offset modes and compared with the original record by record; a source with holes refused by preserve
before anything is written and restored by renumber; kill -9 at random moments, then a rerun, exactly once."""

from __future__ import annotations

import os
import random
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from core.kafka_records import parse_source_offset
from e2e.harness import assert_exactly_once, backlog, mirror_config, partitions_of, run_until
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    BASE_TIMESTAMP_MS,
    commit_offset,
    committed_offset,
    compacted_topic_config,
    consume_all,
    create_topic,
    generate_records,
    offset_for_time,
    partition_count,
    produce,
    produce_transactional,
    topic_configs,
    wait_for_compaction,
    watermarks,
)
from testkit.mirror_run import MirrorRun, run_cli
from testkit.ports import free_port
from testkit.targets import (
    FilesystemTarget,
    KafkaTarget,
    S3Target,
    Target,
    assert_same_records,
    source_records,
)

FLUSH = {"max-time-ms": 1_000, "max-offsets": 1_500}


def archive(
    kafka: KafkaBroker,
    target: Target,
    topic: str,
    counts: list[int],
    tmp_path: Path,
    flush: dict[str, int] = FLUSH,
    topic_config: dict[str, str] | None = None,
    groups: dict[str, dict[int, int]] | None = None,
) -> None:
    """A backlog archived by a mirror; `groups`: consumer groups committed on the source first (partition →
    offset), whose positions the archive keeps (`archive-groups`)."""
    backlog(kafka.bootstrap, topic, counts, seed=71, config=topic_config)
    for group, offsets in (groups or {}).items():
        for partition, offset in offsets.items():
            commit_offset(kafka.bootstrap, group, topic, partition, offset)
    config = mirror_config(
        tmp_path / "mirror.yaml", kafka.bootstrap, target, partitions_of(topic, len(counts)), flush=flush
    )
    if groups:
        document = yaml.safe_load(config.read_text())
        document["destination"]["archive-groups"] = {"groups": sorted(groups)}
        config.write_text(yaml.safe_dump(document))
    run_until(config, tmp_path / "mirror.log", target, topic, dict(enumerate(counts)))


def restore_config(
    path: Path, kafka: KafkaBroker, target: Target, entries: list[dict[str, Any]], offsets: str, **spark: Any
) -> Path:
    archive_block = {k: v for k, v in target.config().items() if k != "flush"}
    document = {
        "archive": archive_block,
        "restore": entries,
        "destination": {"type": "kafka", "bootstrap-servers": kafka.bootstrap, "offsets": offsets},
        "spark": {"master": "local[2]", **spark},
    }
    path.write_text(yaml.safe_dump(document))
    return path


# The S3 case is a soak case: reading an archive from S3 is proven in CI by test_disaster_recovery (a preserve
# restore from S3, group positions and --as-of included) and by the S3 case below (renumber, holes); the records'
# variety decodes the same from either store (the same Parquet files).
# Soak cases (CI time, 2026-11-28: a clean-clone run reached 16 min on a slow hour). In the default run,
# test_disaster_recovery restores an estate (null keys and values, duplicate and null headers, committed and aborted
# transactions) in both modes, with topics created from the archived metadata and group positions, record by record;
# tests/test_restore_topics.py compares an existing topic with the archive, tests/test_archive_records.py and
# tests/test_restore_config.py hold the time bounds. This case adds them end to end over 115 000 records.
@pytest.mark.soak
@pytest.mark.parametrize("where", ["filesystem", "s3"])
def test_an_archive_round_trips_into_fresh_topics_in_both_modes(
    kafka: KafkaBroker, where: str, request: pytest.FixtureRequest, topic_name: str, tmp_path: Path
) -> None:
    """115 000 records over 3 partitions (null keys and values, duplicate and null headers, out-of-order
    timestamps), archived by a mirror, restored whole in each mode and restored again by a time window. Renumber
    restores into a topic it creates from the archived topic metadata (partitions, configs); preserve into an
    existing topic, which it checks against the archive. Both commit the archived position of group "billing"."""
    target: Target = request.getfixturevalue("fs" if where == "filesystem" else "s3")
    counts = [40_000, 40_000, 35_000]  # about 25 ms apart: the time window below falls inside partitions 0 and 2
    configs = {"retention.ms": "-1", "max.message.bytes": "2000000"}  # (the records are stamped years ago)
    flush = {"max-time-ms": 1_000, "max-offsets": 20_000}
    billing = {0: 20_000, 2: 35_000}  # partway, and at the end
    archive(kafka, target, topic_name, counts, tmp_path, flush=flush, topic_config=configs, groups={"billing": billing})
    source = {partition: source_records(kafka.bootstrap, topic_name, partition) for partition in range(3)}
    for offsets in ("preserve", "renumber"):
        restored = f"{topic_name}-{offsets}"
        create = offsets == "renumber"
        if not create:
            create_topic(kafka.bootstrap, restored, partitions=3)
        entries = [{"topic": topic_name, "rename": restored}]
        config = restore_config(tmp_path / f"{offsets}.yaml", kafka, target, entries, offsets)
        document = yaml.safe_load(config.read_text())
        document["group-positions"] = {"groups": ["billing"]}
        config.write_text(yaml.safe_dump(document))
        command = ["restore", "--config", str(config), *(["--create-topics"] if create else [])]
        done = run_cli(*command, env=target.env(), timeout=600)
        assert done.returncode == 0, done.stderr
        assert f"restored {sum(counts)} records" in done.stdout, done.stdout
        for partition, expected in source.items():
            assert_same_records(KafkaTarget(kafka.bootstrap, offsets).records(restored, partition), expected)
        # The group continues where it was: at the record it would have read next at the source (renumber: the
        # restored record carrying that source offset; transaction markers shift the destination's offsets).
        for partition, offset in billing.items():
            position = committed_offset(kafka.bootstrap, "billing", restored, partition)
            assert position is not None, done.stdout
            if offsets == "preserve" or offset == counts[partition]:
                assert position == (
                    offset if offsets == "preserve" else watermarks(kafka.bootstrap, restored, partition)[1]
                )
            else:
                after = [r for r in consume_all(kafka.bootstrap, restored, partition) if r.offset >= position]
                assert parse_source_offset(after[0].headers) == offset, after[0]
        assert committed_offset(kafka.bootstrap, "billing", restored, 1) is None  # nothing archived for it
        if create:  # as the archive saw the source: 3 partitions, its configs
            assert partition_count(kafka.bootstrap, restored) == 3
            assert configs.items() <= topic_configs(kafka.bootstrap, restored).items()
            assert 'msg="destination topic created"' in done.stderr, done.stderr
        else:  # the existing topic lacks them: said, not changed
            assert "destination topic differs from the archive" in done.stderr and "retention.ms" in done.stderr

    # A time window: from the first record stamped at or after `since` up to the first stamped at or after
    # `until`, which is what the broker's offsets-for-times answers for the source.
    since, until = BASE_TIMESTAMP_MS + 500_000, BASE_TIMESTAMP_MS + 750_000
    window = f"{topic_name}-window"
    create_topic(kafka.bootstrap, window, partitions=3)
    window_entries: list[dict[str, Any]] = [
        {
            "topic": topic_name,
            "rename": window,
            "partitions": [0, 2],
            "from-timestamp": since,
            "to-timestamp": datetime.fromtimestamp(until / 1000, UTC).isoformat(),
        }
    ]
    config = restore_config(tmp_path / "window.yaml", kafka, target, window_entries, "renumber")
    done = run_cli("restore", "--config", str(config), env=target.env(), timeout=300)
    assert done.returncode == 0, done.stderr
    for partition in (0, 2):
        first = offset_for_time(kafka.bootstrap, topic_name, partition, since)
        end = offset_for_time(kafka.bootstrap, topic_name, partition, until)
        assert first is not None and end is not None and 0 < first < end < counts[partition]
        expected = [r for r in source[partition] if first <= r.offset < end]
        assert_same_records(KafkaTarget(kafka.bootstrap, "renumber").records(window, partition), expected)
    assert watermarks(kafka.bootstrap, window, 1)[1] == 0, "partition 1 was not selected"


# A soak case (CI time): test_disaster_recovery refuses a preserve restore of an S3 archive with holes in one line and
# restores an estate with transaction holes and a compaction-cleaned topic renumbered, record by record, and reruns
# it; tests/test_restore_refusals.py holds the refusal's facts. This case adds holes that log compaction made.
@pytest.mark.soak
def test_from_s3_preserve_refuses_an_archive_with_holes_and_renumber_restores_it(
    kafka: KafkaBroker, s3: S3Target, topic_name: str, tmp_path: Path
) -> None:
    """A compacted and a transactional source (every third transaction aborted) leave holes in their archives."""
    compacted, transactional = f"{topic_name}-compacted", f"{topic_name}-txn"
    create_topic(kafka.bootstrap, compacted, config=compacted_topic_config())
    produce(kafka.bootstrap, compacted, 0, generate_records(4_000, seed=72, key_space=100, null_key_ratio=0.0))
    assert wait_for_compaction(kafka.bootstrap, compacted, 0, timeout=60) > 0, "compaction did not happen"
    create_topic(kafka.bootstrap, transactional)
    produce_transactional(
        kafka.bootstrap, transactional, 0, [(generate_records(400, seed=80 + i), i % 3 != 1) for i in range(6)]
    )
    mirrors = [{"topic": compacted, "partition": 0}, {"topic": transactional, "partition": 0}]
    config = mirror_config(tmp_path / "mirror.yaml", kafka.bootstrap, s3, mirrors, flush=FLUSH)
    with MirrorRun(config, tmp_path / "mirror.log", env=s3.env()) as run:
        for topic in (compacted, transactional):
            end = watermarks(kafka.bootstrap, topic, 0)[1]
            run.wait_for_offsets(lambda p, t=topic: s3.next_offset(t, p), {0: end})  # type: ignore[misc]
        run.drain()
    entries = [{"topics": [compacted, transactional], "rename": "{topic}-back"}]
    for topic in (compacted, transactional):
        create_topic(kafka.bootstrap, f"{topic}-back")

    preserve = restore_config(tmp_path / "preserve.yaml", kafka, s3, entries, "preserve")
    refused = run_cli("restore", "--config", str(preserve), env=s3.env(), timeout=300)
    assert refused.returncode == 1 and refused.stderr.count("\n") >= 1, refused.stderr
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith("restore refused: ") and "holds no record at offset" in last, last
    assert "use offsets: renumber" in last and "Traceback" not in refused.stderr
    for topic in (compacted, transactional):
        assert watermarks(kafka.bootstrap, f"{topic}-back", 0)[1] == 0, "preserve wrote before refusing"

    renumber = restore_config(tmp_path / "renumber.yaml", kafka, s3, entries, "renumber")
    records = sum(len(s3.records(topic, 0)) for topic in (compacted, transactional))  # what the archive holds
    dry = run_cli("restore", "--config", str(renumber), "--dry-run", env=s3.env(), timeout=300)
    assert dry.returncode == 0, dry.stderr
    assert f"2 partitions, {records} records to restore with offsets: renumber" in dry.stdout, dry.stdout
    assert all(watermarks(kafka.bootstrap, f"{t}-back", 0)[1] == 0 for t in (compacted, transactional)), "dry run wrote"

    done = run_cli("restore", "--config", str(renumber), env=s3.env(), timeout=300)
    assert done.returncode == 0 and f"restored {records} records" in done.stdout, done.stdout + done.stderr
    for topic in (compacted, transactional):
        # Every record at the right header, none twice, none missing: compared with what the source holds now.
        assert_exactly_once(kafka.bootstrap, KafkaTarget(kafka.bootstrap, "renumber"), topic, name=f"{topic}-back")
    again = run_cli("restore", "--config", str(renumber), env=s3.env(), timeout=300)
    assert again.returncode == 0 and "restored 0 records" in again.stdout, again.stdout + again.stderr


# Kills per run: each lands in a read, a send, a transaction or between jobs (small tasks); three, not five, since the
# CI time budget (each kill is a Spark start, about 8 s); MIRROR_V3_SOAK_RESTORE_KILLS asks for more.
KILLS = int(os.environ.get("MIRROR_V3_SOAK_RESTORE_KILLS", "3"))


# Soak cases (CI time, as above): test_disaster_recovery kills a renumber restore in the middle (its broker paused, so
# the kill cannot come late), checks its series on /metrics and the rerun record by record, group positions included;
# a preserve writer killed mid-flush continues from the destination in test_kafka_destination's lease case (the
# same produce target and sink a preserve restore runs). This case kills each mode three times at random moments.
@pytest.mark.soak
@pytest.mark.parametrize("offsets", ["preserve", "renumber"])
def test_kill_9_during_a_restore_then_rerun_is_exactly_once(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path, offsets: str
) -> None:
    counts = [30_000, 30_000]
    archive(kafka, fs, topic_name, counts, tmp_path)
    restored = f"{topic_name}-back"
    create_topic(kafka.bootstrap, restored, partitions=2)
    # Small jobs, so a kill lands in a read, a send, a transaction or between jobs.
    config = restore_config(
        tmp_path / "restore.yaml",
        kafka,
        fs,
        [{"topic": topic_name, "rename": restored}],
        offsets,
        **{"offsets-per-task": 2_000},
    )
    rng = random.Random(511 if offsets == "preserve" else 512)

    def landed() -> int:  # renumber: aborted transactions' markers count too, so this only ever grows
        return sum(watermarks(kafka.bootstrap, restored, p)[1] for p in range(2))

    kills = 0
    progress: list[int] = []  # what had landed at each kill, for the failure message
    for attempt in range(KILLS + 3):
        port = free_port()
        before = landed()
        with MirrorRun(
            config, tmp_path / f"restore{attempt}.log", env=fs.env(), command="restore", metrics_port=port
        ) as run:
            if attempt == 0:  # the restore serves run's series while it works, labelled by the archived chain
                series: dict[str, str | int] = {
                    "source_cluster": "archive",
                    "topic": topic_name,
                    "partition": 1,
                    "destination": restored,
                }

                def scraped(series: dict[str, str | int] = series, run: MirrorRun = run) -> bool:
                    try:
                        return run.metric("mirror_v3_source_log_start_offset", **series) is not None
                    except OSError:  # not listening yet
                        return False

                run.wait_until(scraped, 60, "the restore's series on /metrics")
                assert run.metric("mirror_v3_source_log_start_offset", **series) == 0
                verified = run.metric("mirror_v3_destination_offset_verified", **series)
                lag = run.metric("mirror_v3_source_lag_offsets", **series)
                assert verified is not None and lag is not None and verified + lag == counts[1]  # the archive's end

            # Kill soon after this run's first write landed, not after a fixed time: a fixed time either came
            # before Spark was up or after the whole restore on a fast machine (CI at 8ace0fd and 8241968).
            def wrote(before: int = before, run: MirrorRun = run) -> bool:
                return landed() > before or run.proc.poll() is not None

            run.wait_until(wrote, 120, "this run's first write", interval=0.05)
            time.sleep(rng.uniform(0.0, 0.2))
            # Freeze the broker before the kill, so nothing more lands between the decision and the kill: on a
            # fast machine five kills half a second after a first write came after the end (CI at 4219c23).
            kafka.pause()
            try:
                if run.proc.poll() is not None:
                    break
                run.kill9()
            finally:
                kafka.resume()
            kills += 1
            progress.append(landed())
        if kills >= KILLS:
            break
    assert kills >= KILLS, f"the restore finished before it was killed {KILLS} times: give it more to do ({progress})"
    final = run_cli("restore", "--config", str(config), env=fs.env(), timeout=300)
    assert final.returncode == 0, final.stderr
    rest = re.search(r"restored (\d+) records", final.stdout)
    assert rest and int(rest[1]) > 0, f"the kills came after the restore had finished ({progress}): {final.stdout}"
    assert_exactly_once(kafka.bootstrap, KafkaTarget(kafka.bootstrap, offsets), topic_name, 2, name=restored)


def test_refusals_are_one_line_naming_what_is_wrong(kafka: KafkaBroker, fs: FilesystemTarget, tmp_path: Path) -> None:
    (fs.root / "kept" / "0").mkdir(parents=True)  # an archived chain with no blobs yet
    (fs.root / "kept" / "1").mkdir(parents=True)
    unknown = restore_config(tmp_path / "unknown.yaml", kafka, fs, [{"topics": ["kept", "gone"]}], "renumber")
    result = run_cli("restore", "--config", str(unknown), env=fs.env())
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"invalid config: restore[0].topics: the archive at {fs.root} holds no chain named 'gone' (it holds: kept)"
    )
    no_topic = restore_config(tmp_path / "no-topic.yaml", kafka, fs, [{"topic": "kept"}], "renumber")
    result = run_cli("restore", "--config", str(no_topic), env=fs.env())
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("restore failed: kept/") and "destination topic 'kept' does not exist" in last, last

    create_topic(kafka.bootstrap, "kept", partitions=2, config={"message.timestamp.type": "LogAppendTime"})
    result = run_cli("restore", "--config", str(no_topic), env=fs.env())
    assert result.returncode == 0, result.stderr
    assert "timestamps not restored: kept stamp LogAppendTime" in result.stdout, result.stdout
    assert "destination topic stamps LogAppendTime" in result.stderr and "topic=kept" in result.stderr


def test_a_dry_run_is_refused_exactly_where_the_real_run_is(
    kafka: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """`--dry-run` makes every check of the real run, read-only: the same last line and exit code, nothing written;
    the checks that need no Spark job come before the session starts."""
    archive(kafka, fs, topic_name, [3_000], tmp_path)
    empty, missing = f"{topic_name}-empty", f"{topic_name}-missing"
    create_topic(kafka.bootstrap, empty)
    cases: list[tuple[str, list[dict[str, Any]], str]] = [
        # preserve cannot put archived offset 1 000 at offset 0 of an empty topic
        ("preserve", [{"topic": topic_name, "rename": empty, "from-offset": 1_000}], "offsets: preserve cannot put"),
        ("renumber", [{"topic": topic_name, "rename": missing}], f"destination topic '{missing}' does not exist"),
        # the same into a topic the restore would create (--create-topics below): empty too
        ("preserve", [{"topic": topic_name, "rename": missing, "from-offset": 1_000}], "offsets: preserve cannot put"),
    ]
    for i, (offsets, entries, reason) in enumerate(cases):
        config = restore_config(tmp_path / f"case{i}.yaml", kafka, fs, entries, offsets)
        create = ["--create-topics"] if i == 2 else []
        dry = run_cli("restore", "--config", str(config), "--dry-run", *create, env=fs.env(), timeout=300)
        real = run_cli("restore", "--config", str(config), *create, env=fs.env(), timeout=300)
        assert dry.returncode == real.returncode == 1, dry.stderr + real.stderr
        dry_line, real_line = (r.stderr.strip().splitlines()[-1] for r in (dry, real))
        assert dry_line == real_line and reason in dry_line, (dry_line, real_line)
        assert "records to restore" not in dry.stdout and "Traceback" not in dry.stderr + real.stderr
        # Fail fast: these checks need no Spark job, so both refuse before a session starts (within seconds).
        assert "spark session ready" not in dry.stderr + real.stderr, real.stderr
    assert watermarks(kafka.bootstrap, empty, 0)[1] == 0, "something was written"
