"""The quickstart: a local broker with sample data, mirrored to ./mirror-data, then `status`.

Run through `bash scripts/quickstart.sh`. Everything it starts, it stops; the archive and the config
it wrote stay behind for you to look at.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from sinks.blob_chain import parse_blob_name
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce

TOPIC = "quickstart-orders"
PARTITIONS = 3
RECORDS_PER_PARTITION = 50_000


def say(message: str) -> None:
    print(f"quickstart: {message}", flush=True)


def main() -> int:
    workdir = Path.cwd()
    archive = workdir / "mirror-data"
    config_path = workdir / "quickstart.yaml"
    say("starting a local Apache Kafka broker (KRaft)")
    with KafkaBroker() as broker:
        create_topic(broker.bootstrap, TOPIC, partitions=PARTITIONS)
        for partition in range(PARTITIONS):
            produce(broker.bootstrap, TOPIC, partition, generate_records(RECORDS_PER_PARTITION, seed=partition))
        say(f"produced {PARTITIONS} x {RECORDS_PER_PARTITION} sample records to {TOPIC} on {broker.bootstrap}")
        config_path.write_text(_config(broker.bootstrap, archive))
        say(f"wrote {config_path.name}; mirroring into {archive}/ (Spark start-up takes a few seconds)")
        env = dict(os.environ, MIRROR_V3_METRICS_PORT=os.environ.get("MIRROR_V3_METRICS_PORT", "0"))
        run = subprocess.Popen([sys.executable, "-m", "supervisor", "run", "--config", str(config_path)], env=env)
        try:
            _wait_caught_up(archive, run)
        finally:
            if run.poll() is None:
                run.send_signal(signal.SIGTERM)
            code = run.wait(120)
        say(f"mirror stopped with exit code {code}; `status` of the mirrors:")
        status = subprocess.run(
            [sys.executable, "-m", "supervisor", "status", "--config", str(config_path)], env=env, check=False
        )
        say("files written:")
        for path in sorted(archive.glob(f"{TOPIC}/*/*.parquet")):
            print(f"  {path.relative_to(workdir)}  ({path.stat().st_size} bytes)")
        say("stopping the broker")
    if code != 0 or status.returncode != 0:
        return 1
    say("done. Read it back with pyarrow: pyarrow.parquet.read_table('mirror-data/quickstart-orders/0')")
    return 0


def _config(bootstrap: str, archive: Path) -> str:
    config = {
        "destination": {"type": "filesystem", "root": str(archive), "flush": {"max-time-ms": 2000}},
        "mirrors": [
            {
                "name": f"orders-{partition}",
                "source": {"bootstrap-servers": bootstrap},
                "topic": TOPIC,
                "partition": partition,
            }
            for partition in range(PARTITIONS)
        ],
    }
    header = "# yaml-language-server: $schema=schemas/mirror-v3.config.schema.json\n# Written by the quickstart.\n"
    return header + yaml.safe_dump(config, sort_keys=False)


def _wait_caught_up(archive: Path, run: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if run.poll() is not None:
            raise SystemExit(f"quickstart: the mirror exited early with code {run.returncode}")
        if all(_next_offset(archive / TOPIC / str(p)) == RECORDS_PER_PARTITION for p in range(PARTITIONS)):
            return
        time.sleep(0.5)
    raise SystemExit("quickstart: the mirror did not catch up in time")


def _next_offset(directory: Path) -> int | None:
    ranges = [r for p in directory.glob("*.parquet") if (r := parse_blob_name(p.name)) is not None]
    return max(r.last for r in ranges) + 1 if ranges else None


if __name__ == "__main__":
    raise SystemExit(main())
