"""Disaster recovery through the CLI, as docs/disaster-recovery.md tells it: an estate (a compacted topic and one with
committed and aborted transactions) backed up to the filesystem and to S3 while producers write and three consumer
groups commit; a fresh cluster rebuilt from the archives as of a moment T (topics, records, group positions), with
a kill -9 in the middle of the restore (its series on /metrics read just before); `verify` of the restore; each
group then reads exactly the records after its position at T, compared record by record with the source; `verify
--as-of` a moment before anything was archived names the records the cluster holds from after it."""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import (
    commit_offset,
    create_topic,
    generate_records,
    partition_count,
    produce,
    produce_transactional,
    set_topic_config,
    topic_configs,
    watermarks,
)
from testkit.mirror_run import MirrorRun, run_cli
from testkit.ports import free_port
from testkit.targets import BlobTarget, FilesystemTarget, KafkaTarget, S3Target, assert_same_records, source_records
from tools.generated import RESTORE_VERIFY_SCHEMA

PARTITIONS = (0, 1)
VERIFY_SCHEMA = json.loads(RESTORE_VERIFY_SCHEMA.path.read_text())


class Estate:
    """Two topics of the source, three groups reading them, and what the test made of them so far."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.bootstrap = bootstrap
        self.ledger, self.payments = f"{name}-ledger", f"{name}-payments"
        self.reads = {
            f"{name}-ledger-readers": [self.ledger],
            f"{name}-payment-readers": [self.payments],
            f"{name}-auditors": [self.ledger, self.payments],
        }
        self.positions: dict[str, dict[tuple[str, int], int]] = {group: {} for group in self.reads}
        self.rounds = 0
        # The records are stamped now, so neither retention nor a time-based segment roll touches them, and the
        # active segment is never compacted: the compacted topic keeps every offset (preserve can restore it).
        create_topic(bootstrap, self.ledger, partitions=2, config={"cleanup.policy": "compact"})
        create_topic(bootstrap, self.payments, partitions=2, config={"max.message.bytes": "2000000"})

    def round(self) -> None:
        """Producers write (the payments in committed and aborted transactions), then every group commits."""
        self.rounds += 1
        now_ms = int(time.time() * 1000)
        for partition in PARTITIONS:
            seed = 1_000 * self.rounds + 10 * partition
            produce(
                self.bootstrap,
                self.ledger,
                partition,
                generate_records(400, seed=seed, key_space=60, null_key_ratio=0.0, base_timestamp_ms=now_ms),
            )
            batches = [
                (generate_records(150, seed=seed + 1, base_timestamp_ms=now_ms), True),
                (generate_records(40, seed=seed + 2, base_timestamp_ms=now_ms), False),
                (generate_records(150, seed=seed + 3, base_timestamp_ms=now_ms), True),
            ]
            produce_transactional(self.bootstrap, self.payments, partition, batches)
        for index, (group, topics) in enumerate(sorted(self.reads.items())):
            for topic in topics:
                for partition in PARTITIONS:
                    offset = max(0, self.end(topic, partition) - 37 * (index + 1))  # each behind by its own amount
                    commit_offset(self.bootstrap, group, topic, partition, offset)
                    self.positions[group][topic, partition] = offset

    def end(self, topic: str, partition: int) -> int:
        return watermarks(self.bootstrap, topic, partition)[1]

    def ends(self) -> dict[tuple[str, int], int]:
        return {(topic, p): self.end(topic, p) for topic in (self.ledger, self.payments) for p in PARTITIONS}

    def archived_positions(self) -> dict[str, dict[str, dict[str, int]]]:
        """The positions the archive should hold now, in its documents' shape."""
        shaped: dict[str, dict[str, dict[str, int]]] = {}
        for group, offsets in self.positions.items():
            for (topic, partition), offset in offsets.items():
                shaped.setdefault(group, {}).setdefault(topic, {})[str(partition)] = offset
        return shaped


def backup_config(path: Path, estate: Estate, target: BlobTarget, name: str) -> Path:
    destination = target.config({"max-time-ms": 300, "max-offsets": 100_000})
    destination["topic-metadata-interval-ms"] = 1_000
    destination["archive-groups"] = {"groups": [f"{name}-.*"], "interval-ms": 1_000}
    document = {
        "clusters": {"prod": {"bootstrap-servers": estate.bootstrap, "poll-interval-ms": 200}},
        "destination": destination,
        "mirrors": [{"name": "estate", "cluster": "prod", "topic-regex": f"{name}-(ledger|payments)"}],
        "spark": {"master": "local[1]"},
    }
    path.write_text(yaml.safe_dump(document))
    return path


def newest_positions(target: BlobTarget) -> dict[str, Any] | None:
    documents = target.documents("_groups/prod")
    return json.loads(documents[-1])["groups"] if documents else None


def restore_config(
    path: Path, target: BlobTarget, fresh: KafkaBroker, offsets: str, entries: list[dict[str, Any]], **more: Any
) -> Path:
    document = {
        "archive": {k: v for k, v in target.config().items() if k != "flush"},
        "restore": entries,
        "destination": {"type": "kafka", "bootstrap-servers": fresh.bootstrap, "offsets": offsets},
        "spark": {"master": "local[2]", "offsets-per-task": 300},
        **more,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def landed(fresh: KafkaBroker, topics: list[str]) -> int:
    total = 0
    for topic in topics:
        if partition_count(fresh.bootstrap, topic):
            total += sum(watermarks(fresh.bootstrap, topic, p)[1] for p in PARTITIONS)
    return total


def test_an_estate_is_rebuilt_as_of_a_moment_in_a_fresh_cluster(
    kafka: KafkaBroker, fs: FilesystemTarget, s3: S3Target, topic_name: str, tmp_path: Path
) -> None:
    before_ms = int(time.time() * 1000)  # nothing archived yet
    estate = Estate(kafka.bootstrap, topic_name)
    targets: list[BlobTarget] = [fs, s3]
    with ExitStack() as running:
        runs = [
            running.enter_context(
                MirrorRun(
                    backup_config(tmp_path / f"backup-{t.kind}.yaml", estate, t, topic_name),
                    tmp_path / f"backup-{t.kind}.log",
                    env=t.env(),
                )
            )
            for t in targets
        ]
        for _ in range(3):  # producers write and groups commit while the mirrors run
            estate.round()

        # A quiet moment: both archives hold every record written so far and the groups' last positions.
        def caught_up() -> bool:
            ends = estate.ends()
            return all(
                t.next_offset(topic, p) == end and newest_positions(t) == estate.archived_positions()
                for t in targets
                for (topic, p), end in ends.items()
            )

        runs[0].wait_until(caught_up, 90, "both archives holding the records and positions written so far")
        time.sleep(1.2)
        moment_ms = int(time.time() * 1000)
        at_moment = (estate.ends(), {group: dict(offsets) for group, offsets in estate.positions.items()})
        time.sleep(1.2)

        for _ in range(2):  # and after T: more records, later positions, a config change
            estate.round()
        set_topic_config(kafka.bootstrap, estate.ledger, "min.compaction.lag.ms", "3600000")
        runs[0].wait_until(caught_up, 90, "both archives holding what came after T")
        for run in runs:

            def config_change_archived(run: MirrorRun = run) -> bool:
                return len(run.events("topic metadata archived")) >= 3

            run.wait_until(config_change_archived, 30, "the topic metadata of after T")
            run.drain()
    ends_at_moment, positions_at_moment = at_moment

    with KafkaBroker() as fresh:
        # From the filesystem archive, renumbered: every topic and group of the estate, killed once midway.
        entries = [{"topic-regex": f"{topic_name}-(ledger|payments)"}]
        renumber = restore_config(
            tmp_path / "renumber.yaml",
            fs,
            fresh,
            "renumber",
            entries,
            **{"as-of": moment_ms, "group-positions": {"groups": [f"{topic_name}-.*"]}},
        )
        document = yaml.safe_load(renumber.read_text())
        document["destination"]["create-topics"] = True
        renumber.write_text(yaml.safe_dump(document))
        dry = run_cli("restore", "--config", str(renumber), "--dry-run", env=fs.env(), timeout=300)
        assert dry.returncode == 0, dry.stderr
        assert dry.stdout.count("would create topic") == 2 and dry.stdout.count("would commit group") == 3, dry.stdout
        assert landed(fresh, [estate.ledger, estate.payments]) == 0, "the dry run wrote"
        topics = [estate.ledger, estate.payments]
        with MirrorRun(
            renumber, tmp_path / "restore-killed.log", env=fs.env(), command="restore", metrics_port=free_port()
        ) as killed:
            killed.wait_until(
                lambda: landed(fresh, topics) > 0 or killed.proc.poll() is not None, 180, "the first restored records"
            )
            fresh.pause()  # nothing more lands: the kill comes in the middle of the restore, whatever the speed
            try:
                assert killed.proc.poll() is None, killed.tail()
                # Meanwhile the restore serves run's series, labelled by the archived chain: its end as of T is
                # what is verified plus what is left.
                series: dict[str, str | int] = {
                    "source_cluster": "archive",
                    "topic": estate.payments,
                    "partition": 1,
                    "destination": estate.payments,
                }

                def scraped() -> bool:
                    try:
                        return killed.metric("mirror_v3_source_lag_offsets", **series) is not None
                    except OSError:  # not listening yet
                        return False

                killed.wait_until(scraped, 60, "the restore's series on /metrics")
                names = ("mirror_v3_destination_offset_verified", "mirror_v3_source_lag_offsets")

                def accounted() -> bool:
                    # Read from one scrape, and again while a range the restore produced before the pause is being
                    # recorded (its two series are set one after the other): they settle, as nothing more lands.
                    at, lag = killed.samples(names, **series).values()
                    return at is not None and lag is not None and at + lag == ends_at_moment[estate.payments, 1]

                killed.wait_until(accounted, 30, "the restore's verified offset and lag to add up to its end as of T")
                killed.kill9()
            finally:
                fresh.resume()
        rerun = run_cli("restore", "--config", str(renumber), env=fs.env(), timeout=300)
        assert rerun.returncode == 0, rerun.stderr
        assert "restored 0 records" not in rerun.stdout, "the kill came after the restore had finished"
        assert rerun.stdout.count("committed") == 3, rerun.stdout

        verified = run_cli("verify", "--config", str(renumber), "--format", "json", env=fs.env())
        assert verified.returncode == 0, verified.stdout + verified.stderr
        report = json.loads(verified.stdout)
        jsonschema.validate(report, VERIFY_SCHEMA)
        assert [row["restored-to"] == row["end"] for row in report["partitions"]] == [True] * 4, report
        assert len(report["groups"]) == 8 and {row["result"] for row in report["groups"]} == {"equal"}, report

        # The topics as the archive saw them at T: partitions and configs, not the config set after T.
        for topic in topics:
            assert partition_count(fresh.bootstrap, topic) == 2
        assert topic_configs(fresh.bootstrap, estate.ledger).get("cleanup.policy") == "compact"
        assert "min.compaction.lag.ms" not in topic_configs(fresh.bootstrap, estate.ledger)
        assert topic_configs(fresh.bootstrap, estate.payments).get("max.message.bytes") == "2000000"

        # From S3, preserved: the compacted topic keeps its offsets; the transactional one has holes (its
        # markers and aborted records), which preserve cannot reproduce: refused in one line.
        kept = f"{estate.ledger}-kept"
        preserve = restore_config(
            tmp_path / "preserve.yaml",
            s3,
            fresh,
            "preserve",
            [{"topic": estate.ledger, "rename": kept}],
            **{"as-of": moment_ms, "group-positions": {"groups": [f"{topic_name}-.*"]}},
        )
        restored = run_cli("restore", "--config", str(preserve), "--create-topics", env=s3.env(), timeout=300)
        assert restored.returncode == 0, restored.stderr
        # Into a topic of its own: the archive's holes are what refuses it (its renumbered copy above would be
        # refused first, by the destination check that runs before Spark: not a preserve mirror's records).
        entry = [{"topic": estate.payments, "rename": f"{estate.payments}-kept"}]
        holes = restore_config(tmp_path / "holes.yaml", s3, fresh, "preserve", entry, **{"as-of": moment_ms})
        refused = run_cli("restore", "--config", str(holes), "--dry-run", "--create-topics", env=s3.env(), timeout=300)
        last = refused.stderr.strip().splitlines()[-1]
        assert refused.returncode == 1 and last.startswith("restore refused: "), refused.stderr
        assert "transaction markers" in last and last.endswith("use offsets: renumber"), last

        # As of a moment before anything was archived, the rebuilt cluster holds records from after it: each partition
        # says how many, in both modes (not `whole`, not a hole).
        for config, target in ((renumber, fs), (preserve, s3)):
            early = run_cli(
                "verify", "--config", str(config), "--as-of", str(before_ms), "--format", "json", env=target.env()
            )
            assert early.returncode == 1, early.stdout + early.stderr
            rows = json.loads(early.stdout)["partitions"]
            assert rows and all(row["end"] == 0 and row["beyond"] == row["restored-to"] > 0 for row in rows), rows
            assert all(
                "past the restored range's end 0: more than what the archive held as of" in row["error"] for row in rows
            )

        # Each group reads exactly the records after its position at T, up to T, in order, none twice.
        source = {(topic, p): source_records(kafka.bootstrap, topic, p) for topic in topics for p in PARTITIONS}
        for group, offsets in positions_at_moment.items():
            for (topic, partition), position in offsets.items():
                expected = [
                    r for r in source[topic, partition] if position <= r.offset < ends_at_moment[topic, partition]
                ]
                assert expected, (group, topic, partition)
                reads = KafkaTarget(fresh.bootstrap, "renumber").records_of_group(group, topic, partition)
                assert_same_records(reads, expected)
                if topic == estate.ledger:
                    reads = KafkaTarget(fresh.bootstrap, "preserve").records_of_group(group, kept, partition)
                    assert_same_records(reads, expected)

        # verify names what no longer matches: a group moved on, a config changed since.
        group = f"{topic_name}-auditors"
        commit_offset(fresh.bootstrap, group, estate.payments, 1, watermarks(fresh.bootstrap, estate.payments, 1)[1])
        set_topic_config(fresh.bootstrap, estate.payments, "max.message.bytes", "3000000")
        changed = run_cli("verify", "--config", str(renumber), env=fs.env())
        assert changed.returncode == 1, changed.stdout + changed.stderr
        lines = changed.stdout.splitlines()
        assert any(estate.payments in line and "max.message.bytes 3000000, archived 2000000" in line for line in lines)
        assert any(line.split()[:3] == [group, estate.payments, "1"] and line.endswith("ahead") for line in lines), (
            changed.stdout
        )
