"""The running mirror's archive upkeep through the CLI, killed again and again (soak): a mirror that compacts its own
chains every second and prunes them to a minute is killed with SIGKILL at random moments of its flushes, merges and
prunes, and restarted. Afterwards every chain directory holds only what a reader reads right (blobs forming one
chain once redundant runs are set aside; no leftover a reader would take for a blob), `verify` against the source is
exact over what the archive keeps, and a `restore` of it into a fresh topic equals the source from the oldest kept
offset on, record by record; the table that follows the chains (Iceberg on a filesystem, Delta on S3) names only files
they hold, and holds exactly the source's records from where it starts. The default run's case is test_compaction's
(a `compact` killed, and a mirror compacting in the background); MIRROR_V3_SOAK_UPKEEP_KILLS sets the kills (default
50 on a filesystem, 20 on S3)."""

from __future__ import annotations

import itertools
import json
import os
import random
import time
from pathlib import Path

import pytest
import yaml

from e2e.harness import backlog, check_archive_table, mirror_config, partitions_of, run_until, start
from sinks.blob.chain import is_temp_name, parse_blob_name, without_redundant
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce, watermarks
from testkit.mirror_run import run_cli
from testkit.targets import BlobTarget, KafkaTarget, assert_same_records, source_records

PARTITIONS = 2
TABLE = "archive.{topic}"


@pytest.mark.soak
@pytest.mark.parametrize(("where", "default_kills"), [("filesystem", 50), ("s3", 20)])
def test_soak_upkeep_kill_cycles(
    kafka: KafkaBroker,
    where: str,
    default_kills: int,
    request: pytest.FixtureRequest,
    topic_name: str,
    tmp_path: Path,
) -> None:
    target: BlobTarget = request.getfixturevalue("fs" if where == "filesystem" else "s3")
    kills = int(os.environ.get("MIRROR_V3_SOAK_UPKEEP_KILLS", str(default_kills)))
    backlog(kafka.bootstrap, topic_name, [2_000] * PARTITIONS, seed=4901)
    config = mirror_config(
        tmp_path / "mirror.yaml",
        kafka.bootstrap,
        target,
        partitions_of(topic_name, PARTITIONS),
        flush={"max-time-ms": 300, "max-offsets": 200},
    )
    document = yaml.safe_load(config.read_text())
    document["destination"]["compaction"] = {"min-age-ms": 0, "window-ms": 10_000, "interval-ms": 1_000}
    document["destination"]["retention"] = {"keep-ms": 60_000, "interval-ms": 1_000}
    # A table follows the chains (Iceberg on a filesystem, Delta on S3): each merge and prune is also its commit.
    table_format = "iceberg" if where == "filesystem" else "delta"
    document["destination"]["table"] = {"format": table_format, "name": TABLE, "commit-interval-ms": 1_000}
    config.write_text(yaml.safe_dump(document))
    rng = random.Random(4902)
    for cycle in range(kills):
        for partition in range(PARTITIONS):
            produce(kafka.bootstrap, topic_name, partition, generate_records(400, seed=5000 + 2 * cycle + partition))
        log = tmp_path / f"run{cycle % 2}.log"  # two logs alternate
        log.unlink(missing_ok=True)
        with start(config, log, target) as run:
            run.wait_for_log(r'msg="mirror starting"')
            time.sleep(rng.uniform(1.0, 5.0))  # in a flush, a merge, a prune, or between them
            run.kill9()
    ends = {p: watermarks(kafka.bootstrap, topic_name, p)[1] for p in range(PARTITIONS)}
    final = run_until(config, tmp_path / "final.log", target, topic_name, ends)
    assert not final.events("compaction failed, tried again next round"), final.tail()
    assert not final.events("prune failed, tried again next round"), final.tail()

    kept_from = {}
    for partition in range(PARTITIONS):
        names = [name for name in target.names(topic_name, partition) if not is_temp_name(name)]
        ranges = [blob for name in names if (blob := parse_blob_name(name)) is not None]
        assert len(ranges) == len(names), names  # nothing a reader would take for something else
        kept, _ = without_redundant(ranges)
        assert all(b.first == a.last + 1 for a, b in itertools.pairwise(kept)), kept
        assert kept[-1].last + 1 == ends[partition]
        kept_from[partition] = kept[0].first
    # The table names only files the chains hold, each once, and exactly the source's records from where it starts.
    check_archive_table(target, kafka.bootstrap, topic_name, TABLE, kept_from, strict=False)

    verified = run_cli("verify", "--config", str(config), "--format", "json", env=target.env(), timeout=600)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    rows = {row["partition"]: row for row in json.loads(verified.stdout)["mirrors"]}
    assert {p: (row["checked-from"], row["checked-end"], row["missing"]) for p, row in rows.items()} == {
        p: (kept_from[p], ends[p], 0) for p in range(PARTITIONS)
    }

    restored = f"{topic_name}-back"
    create_topic(kafka.bootstrap, restored, partitions=PARTITIONS)
    restore = tmp_path / "restore.yaml"
    restore.write_text(
        yaml.safe_dump(
            {
                "archive": {k: v for k, v in target.config().items() if k != "flush"},
                "restore": [{"topic": topic_name, "rename": restored}],
                "destination": {"type": "kafka", "bootstrap-servers": kafka.bootstrap, "offsets": "renumber"},
                "spark": {"master": "local[2]"},
            }
        )
    )
    done = run_cli("restore", "--config", str(restore), env=target.env(), timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    for partition in range(PARTITIONS):
        expected = [
            r for r in source_records(kafka.bootstrap, topic_name, partition) if r.offset >= kept_from[partition]
        ]
        assert_same_records(KafkaTarget(kafka.bootstrap, "renumber").records(restored, partition), expected)
