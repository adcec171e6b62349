"""`compact` and `prune` through the CLI on an archive a mirror wrote in small blobs, with a table that follows it
(Iceberg in the embedded SQLite catalog on a filesystem, Delta on S3): a dry run changes nothing; a
compaction killed with SIGKILL right after its first merged blob's commit, then run again, leaves one merged blob per
chain besides its last, holding exactly the source's records, and a `restore --as-of` a moment from before the
compaction restores exactly the records the archive held then, record by record. Then a prune of everything
committed so far leaves each chain's last blob, `status` names the cut and `restore --as-of` the earlier moment is
refused in one line naming it; a mirror compacting in the background writes a third spell, and `verify` checks
exactly what the prune kept and what followed. At each step the table, read by PyIceberg or deltalake, holds exactly
the chains' records (the same rows before and after a compaction, those the prune kept after it) and names no file
the chains no longer hold."""

from __future__ import annotations

import json
import math
import random
import re
import time
from pathlib import Path

import anyio
import msgspec
import pytest
import yaml

from commands.config_files import load_config, load_restore_config
from commands.restore import archive_of, select_partitions
from e2e.harness import (
    assert_exactly_once,
    backlog,
    check_archive_table,
    mirror_config,
    partitions_of,
    start,
    status_json,
)
from sinks.archive.documents import moment_text
from sinks.blob.chain import BlobRange, parse_blob_name, without_redundant
from sinks.destinations import open_destination
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import generate_records, produce
from testkit.mirror_run import MirrorRun, run_cli
from testkit.targets import (
    BlobTarget,
    KafkaTarget,
    assert_same_records,
    chain,
    source_records,
)

THEN = {0: 3_000, 1: 2_000}  # the first spell
TABLE = "archive.{topic}"
ENDS = {0: 6_000, 1: 4_000}


# The S3 case is a soak case: the compaction's S3 half (conditional completes, the written time as object metadata,
# the S3 listing's sizes) is the same protocol as the mirror's commits, which the default run proves on S3.
@pytest.mark.parametrize("where", ["filesystem", pytest.param("s3", marks=pytest.mark.soak)])
def test_a_compaction_killed_midway_then_rerun_keeps_every_reader_exact(
    kafka: KafkaBroker,
    where: str,
    request: pytest.FixtureRequest,
    topic_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fs: BlobTarget = request.getfixturevalue("fs" if where == "filesystem" else "s3")
    backlog(kafka.bootstrap, topic_name, list(THEN.values()), seed=49)
    config = mirror_config(
        tmp_path / "mirror.yaml",
        kafka.bootstrap,
        fs,
        partitions_of(topic_name, 2),
        flush={"max-time-ms": 300, "max-offsets": 250},  # a blob per 250 offsets at most: 40 and more
    )
    document = yaml.safe_load(config.read_text())
    document["destination"]["compaction"] = {"min-age-ms": 0, "window-ms": 0}  # everything old enough, in one run
    table_format = "iceberg" if where == "filesystem" else "delta"
    document["destination"]["table"] = {"format": table_format, "name": TABLE, "commit-interval-ms": 1000}
    config.write_text(yaml.safe_dump(document))
    # The archive written in two spells, and a moment between them: as of it, the archive held the first spell.
    with start(config, tmp_path / "mirror.log", fs) as run:
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), THEN)
        time.sleep(1.1)  # blob times have a second's resolution on some stores
        moment_ms = round(time.time() * 1000)
        time.sleep(1.1)
        for partition, count in ENDS.items():
            produce(kafka.bootstrap, topic_name, partition, generate_records(count - THEN[partition], seed=partition))
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), ENDS)
        run.drain()
    before = {p: chain(fs, topic_name, p) for p in ENDS}
    assert all(len(blobs) >= 16 for blobs in before.values()), before
    check_archive_table(
        fs, kafka.bootstrap, topic_name, TABLE, {p: 0 for p in ENDS}
    )  # the drain's last commit holds every blob

    restore = tmp_path / "restore.yaml"
    restore.write_text(
        yaml.safe_dump(
            {
                "archive": {k: v for k, v in fs.config().items() if k != "flush"},
                "restore": [{"topic": topic_name, "rename": f"{topic_name}-then"}],
                "destination": {"type": "kafka", "bootstrap-servers": kafka.bootstrap, "offsets": "renumber"},
                "spark": {"master": "local[2]"},
            }
        )
    )
    # Ten moments across the blobs' commits, and what a restore as of each would restore (the product's own selection,
    # in this process): the same offsets after the compaction (the CLI restores one of them below, record by record).
    for name, value in fs.env().items():
        monkeypatch.setenv(name, value)
    moments = _ten_moments(config, fs, topic_name)
    held_then = {moment: _as_of_ranges(restore, moment) for moment in moments}
    distinct = len({tuple(sorted(r.items())) for r in held_then.values()})
    assert distinct >= (5 if where == "filesystem" else 3), held_then  # moments that tell apart (S3: whole seconds)
    dry = run_cli("compact", "--config", str(config), "--dry-run", env=fs.env())
    assert dry.returncode == 0, dry.stderr
    count = len(before[0])
    assert f"{topic_name}/0: would merge {count - 1} blobs into 1: {count} blobs -> 2" in dry.stdout, dry.stdout
    assert {p: chain(fs, topic_name, p) for p in ENDS} == before

    with MirrorRun(config, tmp_path / "killed.log", env=fs.env(), command="compact") as killed:
        # Right after a merged blob's commit: its run is being deleted (the unit tests stop at each step).
        killed.wait_for_log('msg="merged blob committed"', timeout=120)
        time.sleep(random.Random().uniform(0.0, 0.05))
        killed.kill9()
    done = run_cli("compact", "--config", str(config), env=fs.env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("compacted "), done.stdout
    after = {p: chain(fs, topic_name, p) for p in ENDS}  # strict: no redundant run, no leftover, one chain
    assert after == {p: [BlobRange(0, blobs[-2].last), blobs[-1]] for p, blobs in before.items()}
    assert {moment: _as_of_ranges(restore, moment) for moment in moments} == held_then

    # Every record, read back from the compacted files, is the source's (`verify` checks the archive after the prune).
    assert_exactly_once(kafka.bootstrap, fs, topic_name, partitions=len(ENDS))
    check_archive_table(
        fs, kafka.bootstrap, topic_name, TABLE, {p: 0 for p in ENDS}
    )  # the same rows, in the merged blobs

    restored = run_cli("restore", "--config", str(restore), "--as-of", str(moment_ms), "--create-topics", env=fs.env())
    assert restored.returncode == 0, restored.stdout + restored.stderr
    restored_target = KafkaTarget(kafka.bootstrap, "renumber")
    for partition, end in THEN.items():
        expected = [r for r in source_records(kafka.bootstrap, topic_name, partition) if r.offset < end]
        assert_same_records(restored_target.records(f"{topic_name}-then", partition), expected)

    cut_ms = round(time.time() * 1000)
    pruned = run_cli("prune", "--config", str(config), "--before", str(cut_ms), env=fs.env())
    assert pruned.returncode == 0, pruned.stdout + pruned.stderr
    last = {p: blobs[-1] for p, blobs in after.items()}
    assert f"{topic_name}/0: removed 1 blobs" in pruned.stdout and "restore --as-of serves" in pruned.stdout
    assert {p: chain(fs, topic_name, p) for p in ENDS} == {p: [blob] for p, blob in last.items()}
    check_archive_table(
        fs, kafka.bootstrap, topic_name, TABLE, {p: blob.first for p, blob in last.items()}
    )  # what was kept
    code, report = status_json(config, env=fs.env())
    assert code == 0 and report["kept-since"] == moment_text(cut_ms), report
    refused = run_cli("restore", "--config", str(restore), "--as-of", str(moment_ms), env=fs.env())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip().splitlines()[-1]  # the command's last word, one line
    assert line.startswith("invalid config: --as-of: ") and line.endswith(
        f"the oldest moment it can serve is {moment_text(cut_ms)}"
    ), line

    # The running mirror keeps its archive in shape itself: a third spell in small blobs, merged in the background
    # (Spark tasks of the mirror's own session) while it writes; then `verify` checks what the prune kept and the rest.
    document["destination"]["compaction"] = {"min-age-ms": 0, "window-ms": 0, "interval-ms": 1_000}
    config.write_text(yaml.safe_dump(document))
    third = {p: end + 1_500 for p, end in ENDS.items()}
    for partition in ENDS:
        produce(kafka.bootstrap, topic_name, partition, generate_records(1_500, seed=30 + partition))
    with start(config, tmp_path / "upkeep.log", fs) as run:
        run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), third)
        for partition in ENDS:
            run.wait_for_log(rf'msg="merged blob committed" chain={re.escape(topic_name)}/{partition} ', timeout=60)
        # Only what the table holds is merged, and it holds the third spell a commit interval after its flushes:
        # the rounds go on until each chain is down to a few blobs.
        deadline = time.monotonic() + 60
        while any(len(_kept(fs, topic_name, p)) >= 1 + 1_500 // 250 for p in ENDS) and time.monotonic() < deadline:
            time.sleep(0.5)
        run.drain()
    assert not run.events("compaction failed, tried again next round"), run.tail()
    for partition, blob in last.items():
        blobs = chain(fs, topic_name, partition)  # strict: one chain, nothing redundant left
        assert blobs[0].first == blob.first and len(blobs) < 1 + 1_500 // 250, blobs
    check_archive_table(fs, kafka.bootstrap, topic_name, TABLE, {p: blob.first for p, blob in last.items()})
    verified = run_cli("verify", "--config", str(config), "--format", "json", env=fs.env())
    assert verified.returncode == 0, verified.stdout + verified.stderr
    rows = {row["partition"]: row for row in json.loads(verified.stdout)["mirrors"]}
    assert {p: (row["checked-from"], row["checked-end"], row["missing"]) for p, row in rows.items()} == {
        p: (blob.first, third[p], 0) for p, blob in last.items()
    }


def _ten_moments(config: Path, fs: BlobTarget, topic: str) -> list[int]:
    """Ten moments spread over partition 0's blob commits, each the moment a blob was committed (its time, rounded
    up to the millisecond): the restore as of it holds that blob and none after it."""
    archive = open_destination(load_config(config).destination).archive
    assert archive is not None
    blobs = chain(fs, topic, 0)

    async def times() -> list[float]:
        store = archive.chain_store(topic, 0)
        try:
            return [written for blob in blobs if (written := await store.modified_at(blob.name)) is not None]
        finally:
            await store.close()

    written = anyio.run(times)
    return sorted({math.ceil(written[round(i * (len(written) - 1) / 9)] * 1000) for i in range(10)})


def _as_of_ranges(restore: Path, moment_ms: int) -> dict[int, tuple[int, int]]:
    """The offsets `restore --as-of <moment_ms>` restores per partition (`commands.restore.select_partitions`)."""
    config = msgspec.structs.replace(load_restore_config(restore), as_of=moment_ms)
    parts = anyio.run(select_partitions, config, archive_of(config))
    return {part.partition: (part.first, part.end) for part in parts}


def _kept(fs: BlobTarget, topic: str, partition: int) -> list[BlobRange]:
    """The chain as readers take it while a compaction runs: its blobs without those a merged blob made redundant."""
    ranges = [blob for name in fs.names(topic, partition) if (blob := parse_blob_name(name)) is not None]
    return without_redundant(ranges)[0]
