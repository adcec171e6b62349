"""The quickstart: a local broker with sample data, mirrored live to ./mirror-data (files, and an Iceberg table of
them in the embedded catalog) while you watch it (`status --watch`, /metrics, /readyz), stopped cleanly, and the
table read back by name.

Run through `bash scripts/quickstart.sh`. Everything it starts, it stops; the archive, the config and the
mirror's log it wrote stay behind for you to look at.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce, watermarks
from testkit.mirror_run import MirrorRun, MirrorRunError, cli_env, run_cli
from testkit.ports import free_port
from testkit.targets import FilesystemTarget

TOPIC = "quickstart-orders"
TABLE = "archive.{topic}"
PARTITIONS = 3
RECORDS_PER_PARTITION = 20_000
LIVE_RECORDS_PER_PARTITION = 1_000  # produced while you watch, in ten bursts a second apart
# `status --watch 2` is shown for this many refreshes (each a table of the mirrors), then stopped with Ctrl-C: by
# what it printed, not after a fixed time, as its first table comes only after a CLI start and one status round
# (seconds on a busy machine: 8 s once showed none).
WATCH_REFRESHES = 2
WATCH_DEADLINE_S = 60.0


def say(message: str) -> None:
    print(f"quickstart: {message}", flush=True)


def main() -> int:
    workdir = Path.cwd()
    archive = FilesystemTarget(workdir / "mirror-data")
    config_path = workdir / "quickstart.yaml"
    port = metrics_port()
    env = {"MIRROR_V3_METRICS_PORT": str(port)}
    say("starting a local Apache Kafka broker (KRaft)")
    with KafkaBroker() as broker:
        create_topic(broker.bootstrap, TOPIC, partitions=PARTITIONS)
        for partition in range(PARTITIONS):
            produce(broker.bootstrap, TOPIC, partition, generate_records(RECORDS_PER_PARTITION, seed=partition))
        say(f"produced {PARTITIONS} x {RECORDS_PER_PARTITION} sample records to {TOPIC} on {broker.bootstrap}")
        write_config(config_path, broker.bootstrap, archive.root)
        say(f"wrote {config_path.name} with `init`; `plan` says what it will mirror:")
        planned = run_cli("plan", "--config", str(config_path), env=env)
        print("".join(f"  {line}\n" for line in planned.stdout.splitlines()), end="", file=sys.stdout)
        if planned.returncode != 0:
            say(f"plan failed: {planned.stderr.strip()}")
            return 1
        say(f"mirroring into {archive.root}/ (Spark takes a few seconds)")
        log = workdir / "quickstart-mirror.log"
        log.unlink(missing_ok=True)
        say(f"the mirror's log: {log.name}")
        with MirrorRun(config_path, log, env=env) as run:
            try:
                wait_ready(run, port)
                if port:
                    say(f"running: http://127.0.0.1:{port}/metrics, /readyz, /healthz and /mirrors")
                    print(f"  /readyz: {fetch(port, '/readyz')}")
                backlog = dict.fromkeys(range(PARTITIONS), RECORDS_PER_PARTITION)
                run.wait_for_offsets(lambda p: archive.next_offset(TOPIC, p), backlog, 300)
                say(
                    f"the {PARTITIONS} x {RECORDS_PER_PARTITION} sample records are in the archive; now it mirrors live"
                )
                live = threading.Thread(target=produce_live, args=(broker.bootstrap,), daemon=True)
                live.start()
                say(f"`status --watch` for {WATCH_REFRESHES} refreshes while records arrive (Ctrl-C ends a real one):")
                watch(config_path, env)
                live.join()
                if port:
                    print("  /metrics:", *lag_lines(port), sep="\n    ")
                ends = {p: watermarks(broker.bootstrap, TOPIC, p)[1] for p in range(PARTITIONS)}
                run.wait_for_offsets(lambda p: archive.next_offset(TOPIC, p), ends, 300)
                say("stopping it with SIGTERM: it finishes the flush in flight and exits 0")
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
    say("your own cluster next: python -m supervisor init --bootstrap-servers HOST:9092 --destination ./mirror-data")
    return 0


def metrics_port() -> int:
    """MIRROR_V3_METRICS_PORT if set (0: off), else 7780 when free, else any free port."""
    given = os.environ.get("MIRROR_V3_METRICS_PORT")
    if given is not None:
        return int(given)
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 7780)) != 0:
            return 7780
    return free_port()


def write_config(path: Path, bootstrap: str, archive: Path) -> None:
    """`init`'s starting config for the sample topic, with two of its commented settings turned on: blobs at least
    every 2 s, and the archive as an Iceberg table (committed every 5 s)."""
    made = run_cli(
        "init",
        "--bootstrap-servers",
        bootstrap,
        "--destination",
        str(archive),
        "--topics",
        TOPIC,
        "--output",
        str(path),
        "--force",
    )
    if made.returncode != 0:
        raise SystemExit(f"init failed: {made.stderr}")
    text = path.read_text()
    turned_on = {
        "  # flush:\n  #   max-time-ms: 60000": "  flush:\n    max-time-ms: 2000",
        "  # table:": "  table:",
        "  #   format: iceberg\n  #   name: archive.{topic}": (
            f"    format: iceberg\n    name: {TABLE}\n    commit-interval-ms: 5000"
        ),
    }
    for commented, setting in turned_on.items():
        if commented not in text:
            raise SystemExit(f"init's config no longer has {commented!r}: update the quickstart")
        text = text.replace(commented, setting)
    path.write_text(text)


def wait_ready(run: MirrorRun, port: int) -> None:
    """Until /readyz answers 200 (every mirror started and Spark ready), or the first flush without metrics."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if not run.running:
            raise MirrorRunError(f"the mirror stopped:\n{run.tail()}")
        if port and fetch(port, "/readyz").startswith("200"):
            return
        if not port and run.events("flushed"):
            return
        time.sleep(0.3)
    raise MirrorRunError(f"not ready within 180 s:\n{run.tail()}")


def fetch(port: int, path: str) -> str:
    """`200 ready` or `503 <why>`: the status and the first line of what an endpoint answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return f"{answer.status} {answer.read().decode().strip().splitlines()[0] if path != '/metrics' else ''}"
    except urllib.error.HTTPError as refused:
        return f"{refused.code} {refused.read().decode().strip()[:200]}"
    except OSError as exc:
        return f"no answer: {exc}"


def lag_lines(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return [line for line in text.splitlines() if line.startswith("mirror_v3_source_lag_offsets{")]


def produce_live(bootstrap: str) -> None:
    bursts = 10
    for burst in range(bursts):
        for partition in range(PARTITIONS):
            records = generate_records(LIVE_RECORDS_PER_PARTITION // bursts, seed=1000 + burst * PARTITIONS + partition)
            produce(bootstrap, TOPIC, partition, records)
        time.sleep(1)


def watch(config: Path, env: dict[str, str]) -> None:
    """`status --watch 2` until it has shown WATCH_REFRESHES tables (WATCH_DEADLINE_S at most), its output passed
    through, then Ctrl-C (SIGINT), as a user stops it."""
    watching = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "status", "--config", str(config), "--watch", "2"],
        env=cli_env(env),
        stdout=subprocess.PIPE,  # not a terminal: each refresh is printed below the last, not over the screen
        stderr=sys.stderr,
        text=True,
    )
    assert watching.stdout is not None
    refreshed = threading.Semaphore(0)

    def relay() -> None:
        for line in watching.stdout:  # type: ignore[union-attr]
            print(f"  {line}", end="", flush=True)
            if "Ctrl-C to stop" in line:  # a refresh's heading: its table is printed right after it
                refreshed.release()

    relaying = threading.Thread(target=relay, daemon=True)
    relaying.start()
    deadline = time.monotonic() + WATCH_DEADLINE_S
    for _ in range(WATCH_REFRESHES):
        if not refreshed.acquire(timeout=max(0.0, deadline - time.monotonic())):
            break
    time.sleep(1)  # the last table's lines, printed right after its heading (the next refresh is 2 s away)
    watching.send_signal(signal.SIGINT)
    watching.wait(30)
    relaying.join(5)


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
