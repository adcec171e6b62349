"""The quickstart: a local broker with sample data, mirrored to ./mirror-data (files, and an Iceberg table of them in
the embedded catalog), then `status`, and the table read back by name.

Run through `bash scripts/quickstart.sh`. Everything it starts, it stops; the archive, the config and the
mirror's log it wrote stay behind for you to look at.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce
from testkit.mirror_run import MirrorRun, MirrorRunError, mirror_config, run_cli
from testkit.targets import FilesystemTarget

TOPIC = "quickstart-orders"
TABLE = "archive.{topic}"
PARTITIONS = 3
RECORDS_PER_PARTITION = 20_000
SCHEMA_HEADER = "# yaml-language-server: $schema=schemas/mirror-v3.config.schema.json\n# Written by the quickstart.\n"


def say(message: str) -> None:
    print(f"quickstart: {message}", flush=True)


def main() -> int:
    import yaml

    workdir = Path.cwd()
    archive = FilesystemTarget(workdir / "mirror-data")
    config_path = workdir / "quickstart.yaml"
    say("starting a local Apache Kafka broker (KRaft)")
    with KafkaBroker() as broker:
        create_topic(broker.bootstrap, TOPIC, partitions=PARTITIONS)
        for partition in range(PARTITIONS):
            produce(broker.bootstrap, TOPIC, partition, generate_records(RECORDS_PER_PARTITION, seed=partition))
        say(f"produced {PARTITIONS} x {RECORDS_PER_PARTITION} sample records to {TOPIC} on {broker.bootstrap}")
        destination = archive.config({"max-time-ms": 2000})
        # The archive is an Iceberg table too, in the embedded catalog (a SQLite file under mirror-data/).
        destination["table"] = {"format": "iceberg", "name": TABLE, "commit-interval-ms": 5000}
        document = mirror_config(
            bootstrap=broker.bootstrap,
            destination=destination,
            mirrors=[{"topic": TOPIC, "partition": p, "name": f"orders-{p}"} for p in range(PARTITIONS)],
        )
        config_path.write_text(SCHEMA_HEADER + yaml.safe_dump(document, sort_keys=False))
        say(f"wrote {config_path.name}; mirroring into {archive.root}/ (Spark start-up takes a few seconds)")
        log = workdir / "quickstart-mirror.log"
        log.unlink(missing_ok=True)
        say(f"the mirror's log: {log.name}")
        env = {"MIRROR_V3_METRICS_PORT": os.environ.get("MIRROR_V3_METRICS_PORT", "0")}
        with MirrorRun(config_path, log, env=env) as run:
            try:
                run.wait_for_offsets(
                    lambda p: archive.next_offset(TOPIC, p),
                    dict.fromkeys(range(PARTITIONS), RECORDS_PER_PARTITION),
                    300,
                )
                run.drain()
            except MirrorRunError as exc:
                say(f"the mirror did not finish: {exc}")
                return 1
        say("mirror stopped with exit code 0; `status` of the mirrors:")
        status = run_cli("status", "--config", str(config_path), env=env)
        print(status.stdout, end="")
        print(status.stderr, end="", file=sys.stderr)
        say("files written:")
        for path in sorted(archive.root.glob(f"{TOPIC}/*/*.parquet")):
            print(f"  {path.relative_to(workdir)}  ({path.stat().st_size} bytes)")
        say("stopping the broker")
    if status.returncode != 0:
        return 1
    say(f"the archive as a table, read back by name with PyIceberg: {TABLE.format(topic=TOPIC)}")
    print(f"  {read_back(archive.root)}")
    print(f"  {table_rows(archive.root)}")
    say("done. Read the files with pyarrow: pyarrow.parquet.read_table('mirror-data/quickstart-orders/0')")
    return 0


def read_back(root: Path) -> str:
    """The line a user pastes into Python to open the quickstart's table."""
    return (
        f'from pyiceberg.catalog import load_catalog; load_catalog("mirror_v3", type="sql", '
        f'uri="sqlite:///{root}/_catalog/iceberg.db", warehouse="file://{root}/_iceberg")'
        f'.load_table("{TABLE.format(topic=TOPIC)}").scan().to_arrow()'
    )


def table_rows(root: Path) -> str:
    """What the table holds, counted per source partition: `partition 0: 20000 rows (offsets 0-19999), ...`."""
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "mirror_v3", type="sql", uri=f"sqlite:///{root}/_catalog/iceberg.db", warehouse=f"file://{root}/_iceberg"
    )
    rows = catalog.load_table(TABLE.format(topic=TOPIC)).scan(selected_fields=("partition", "offset")).to_arrow()
    parts = []
    for partition in range(PARTITIONS):
        offsets = [
            o for p, o in zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), strict=True) if p == partition
        ]
        span = f"offsets {min(offsets)}-{max(offsets)}" if offsets else "empty"
        parts.append(f"partition {partition}: {len(offsets)} rows ({span})")
    return ", ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
