"""Drive the real CLI as a subprocess and read back what it wrote."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import yaml

from e2e.destinations import DestinationConfig, DestinationUnderTest, KafkaDestinationUnderTest, read_tables
from testkit.kafka_data import ConsumedRecord, consume_all

REPO = Path(__file__).resolve().parent.parent


def write_config(
    path: Path,
    *,
    bootstrap: str,
    destination: DestinationConfig,
    mirrors: list[dict[str, Any]],
    flush: dict[str, int] | None = None,
    spark: dict[str, Any] | None = None,
) -> Path:
    config: dict[str, Any] = {
        "destination": destination.config(flush),
        "mirrors": [
            {
                "name": m.get("name", f"{m['topic']}-{m['partition']}"),
                "source": {"bootstrap-servers": bootstrap, "poll-interval-ms": 200, **m.get("source", {})},
                "topic": m["topic"],
                "partition": m["partition"],
                **({"destination-name-override": m["override"]} if "override" in m else {}),
            }
            for m in mirrors
        ],
    }
    if spark:
        config["spark"] = spark
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def cli_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("MIRROR_V3_METRICS_PORT", "0")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=REPO,
        env=env or cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class MirrorProcess:
    """`python -m supervisor run` in the background; stderr goes to a file we can search."""

    def __init__(self, config: Path, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor", "run", "--config", str(config)],
            cwd=REPO,
            env=env or cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout: float = 120, count: int = 1) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            matches = list(regex.finditer(self.log_text()))
            if len(matches) >= count:
                return matches[count - 1]
            if self.proc.poll() is not None:
                raise AssertionError(f"mirror exited {self.proc.returncode} before /{pattern}/:\n{self.tail()}")
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for /{pattern}/:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def kill9(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()


@dataclass(frozen=True)
class ArchivedRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int


def read_archive(destination: DestinationUnderTest, dest_name: str, partition: int) -> list[ArchivedRecord]:
    """Every row of every blob, checking the chain and that each row lies inside its blob's range."""
    records: list[ArchivedRecord] = []
    for blob, table in read_tables(destination, dest_name, partition):
        records.extend(_rows(table, blob.first, blob.last, blob.name))
    return records


def read_kafka_destination(destination: KafkaDestinationUnderTest, topic: str, partition: int) -> list[ArchivedRecord]:
    """Every committed record of the destination partition, as the source record it copies.

    preserve: the destination offset is the source offset. renumber: the source offset comes from the
    `mirror-v3.source-offset` header (removed here), and destination offsets must only increase.
    """
    records: list[ArchivedRecord] = []
    last_destination_offset = -1
    for r in consume_all(destination.bootstrap, topic, partition, "read_committed"):
        assert r.offset > last_destination_offset
        last_destination_offset = r.offset
        headers = [(k, v) for k, v in (r.headers or [])]
        offset = r.offset
        if destination.offsets == "renumber":
            tagged = [v for k, v in headers if k == "mirror-v3.source-offset"]
            assert len(tagged) == 1 and tagged[0] is not None, f"destination offset {r.offset}: header {headers}"
            offset = int(tagged[0])
            headers = [(k, v) for k, v in headers if k != "mirror-v3.source-offset"]
        records.append(ArchivedRecord(offset, r.key, r.value, headers, r.timestamp_ms))
    return records


def _rows(table: pa.Table, first: int, last: int, name: str) -> list[ArchivedRecord]:
    millis = pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist()
    rows = []
    for offset, key, value, headers, ts in zip(
        table.column("offset").to_pylist(),
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        table.column("headers").to_pylist(),
        millis,
        strict=True,
    ):
        assert first <= offset <= last, f"{name} holds offset {offset}"
        rows.append(ArchivedRecord(offset, key, value, [(h["key"], h["value"]) for h in (headers or [])], int(ts)))
    return rows


def source_records(bootstrap: str, topic: str, partition: int) -> list[ArchivedRecord]:
    consumed: list[ConsumedRecord] = consume_all(bootstrap, topic, partition, "read_committed")
    return [
        ArchivedRecord(r.offset, r.key, r.value, [(k, v) for k, v in (r.headers or [])], r.timestamp_ms)
        for r in consumed
    ]


def assert_same_records(archive: list[ArchivedRecord], source: list[ArchivedRecord]) -> None:
    """Record-by-record equality, with a readable first difference."""
    archived_offsets = [r.offset for r in archive]
    assert len(archived_offsets) == len(set(archived_offsets)), "an offset landed twice"
    if archive == source:
        return
    source_by_offset = {r.offset: r for r in source}
    archive_by_offset = {r.offset: r for r in archive}
    missing = sorted(set(source_by_offset) - set(archive_by_offset))
    extra = sorted(set(archive_by_offset) - set(source_by_offset))
    differing = [
        o for o in sorted(set(source_by_offset) & set(archive_by_offset)) if source_by_offset[o] != archive_by_offset[o]
    ]
    detail = ""
    if differing:
        o = differing[0]
        detail = f"\nfirst difference at {o}:\n  source  {source_by_offset[o]}\n  archive {archive_by_offset[o]}"
    raise AssertionError(
        f"archive != source: {len(missing)} missing (first {missing[:5]}), {len(extra)} extra (first {extra[:5]}), "
        f"{len(differing)} differing{detail}"
    )


def wait_until(check: Any, timeout: float, message: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(message)


def scrape_metric(port: int, name: str, topic: str, partition: int) -> float | None:
    """One sample of a metric from the running mirror's /metrics endpoint."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == {"topic": topic, "partition": str(partition)}:
                return float(sample.value)
    return None
