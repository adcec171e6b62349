"""When each record became durable at a destination, read around the system that wrote it, so produce -> durable
latency and the lag at any moment can be computed after the run (`Landings`).

Every record's value starts with its produce time (bench.steady). Where each destination says "durable":

- filesystem (the mirror): the committed blob's inode change time. The commit links the staged file to its final
  name, fsyncs the directory and then unlinks the staged name, and link(2) and unlink(2) both set the inode's ctime:
  so ctime is the end of the commit, to the kernel's clock tick. bench.latency's 5 ms directory poll measures the
  same moment, but polling P directories every 5 ms would take from the cores being measured (and its delay grows
  with P); a stat per blob after the run costs nothing during it. A merged blob (the mirror compacting) keeps each
  original's range and written time (its modification time, ms) in its footer: its records landed then.
- S3 (the mirror, on moto): the mirror's own `flushed` log line (ms), logged once CompleteMultipartUpload returned.
  moto's LastModified has whole seconds only, so it is used to check the log instead: each object's line must fall in
  [LastModified, LastModified + 1 s + slack].
- Kafka (the mirror, either offsets mode): when a read_committed consumer, assigned every destination partition from
  the start and polling throughout the run, got the record (`KafkaLandings`): visible to consumers = durable there.
- an Iceberg table of the archive (`destination.table`): the time of the first snapshot whose recorded chain position
  passes the record (`table_landings`): visible to the table's readers.
- Spark Structured Streaming's Parquet sink: a file is committed when its batch's entry lands in
  `<output>/_spark_metadata` (readers of the sink see only the files listed there), so a record's time is that log
  file's modification time (it is written whole and renamed into place).
"""

from __future__ import annotations

import bisect
import io
import json
import math
import os
import statistics
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Consumer, TopicPartition

from bench.latency import TIME_DIGITS, percentile, value_stamps
from sinks.blob.chain import parse_blob_name
from sinks.blob.merging import merged_from
from testkit.kafka_data import RDKAFKA_LOGGER
from testkit.mirror_run import log_time
from testkit.targets import FilesystemTarget, S3Target, VerificationError, chain

STATS = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))
S3_LOG_SLACK = 0.5  # seconds a `flushed` line may trail its object's LastModified beyond moto's whole second


@dataclass
class Landings:
    """Per record: its produce time and the moment it was durable (epoch seconds), in no particular order."""

    produced: list[float] = field(default_factory=list)
    durable: list[float] = field(default_factory=list)

    def add(self, stamps_us: Iterable[int], durable: float) -> None:
        for us in stamps_us:
            self.produced.append(us / 1e6)
            self.durable.append(durable)

    def __len__(self) -> int:
        return len(self.produced)

    def summary(self, window_from: float, window_to: float) -> dict[str, Any]:
        """Latency of the records produced in [window_from, window_to), and the lag (records produced but not yet
        durable) at both ends of the window: a lag that grows over the window is a mirror that does not keep up."""
        latencies = sorted(
            d - p for p, d in zip(self.produced, self.durable, strict=True) if window_from <= p < window_to
        )
        if not latencies:
            raise VerificationError(f"no record produced in the window (of {len(self)} landed)")
        return {
            "records": len(latencies),
            **{label: round(percentile(latencies, q), 4) for label, q in STATS},
            "max": round(latencies[-1], 4),
            "mean": round(math.fsum(latencies) / len(latencies), 4),
            "lag_window_start": self.lag_at(window_from),
            "lag_window_end": self.lag_at(window_to),
            "last_durable": round(max(self.durable), 3),
        }

    def lag_at(self, moment: float) -> int:
        """Records produced at or before `moment` that were not durable yet then."""
        produced, durable = sorted(self.produced), sorted(self.durable)
        return bisect.bisect_right(produced, moment) - bisect.bisect_right(durable, moment)


# ------------------------------------------------------------------------------------------------- filesystem


def filesystem_landings(target: FilesystemTarget, name: str, partitions: Iterable[int]) -> Landings:
    """A blob's records landed at its ctime; a merged blob's (the mirror compacting, `sinks.blob.merging`) each at
    its original's written time, from the merged blob's footer (the original's modification time, in ms: its data
    written, a moment before its commit's link)."""
    landings = Landings()
    for partition in partitions:
        directory = target.directory(name, partition)
        for blob in chain(target, name, partition):
            path = directory / blob.name
            originals = merged_from(pq.read_metadata(path))
            if originals is None:
                landings.add(_stamps(pq.read_table(path, columns=["value"])), os.stat(path).st_ctime)
                continue
            rows = pq.read_table(path, columns=["offset", "value"])
            offsets = rows.column("offset").to_numpy()
            for first, last, written_ms in originals:
                inside = rows.filter(pa.array((offsets >= first) & (offsets <= last)))
                landings.add(_stamps(inside.select(["value"])), written_ms / 1000)
    return landings


def table_commits(target: FilesystemTarget, identifier: str) -> list[tuple[float, dict[str, int]]]:
    """The commits of the archive's Iceberg table (the embedded catalog), oldest first: when each was made (PyIceberg
    stamps a snapshot as it makes it, just before the catalog commit) and the chain positions it recorded."""
    from pyiceberg.catalog import load_catalog

    from sinks.tables.positions import positions_of

    catalog = load_catalog(
        "mirror_v3",
        type="sql",
        uri=f"sqlite:///{target.root}/_catalog/iceberg.db",
        warehouse=f"file://{target.root}/_iceberg",
    )
    snapshots = catalog.load_table(identifier).snapshots()
    return sorted(
        (s.timestamp_ms / 1000, positions_of(dict(s.summary.ser_model()) if s.summary else {})) for s in snapshots
    )


def table_landings(target: FilesystemTarget, name: str, partitions: Iterable[int], identifier: str) -> Landings:
    """When each record became visible in the archive's Iceberg table: the time of the first commit whose recorded
    position for the record's chain passes it."""
    commits = table_commits(target, identifier)
    landings = Landings()
    for partition in partitions:
        key, directory = f"{name}/{partition}", target.directory(name, partition)
        for blob in chain(target, name, partition):
            visible = next((at for at, positions in commits if positions.get(key, 0) > blob.last), None)
            if visible is None:
                raise VerificationError(f"{key}: {blob.name} is in no table commit")
            landings.add(_stamps(pq.read_table(directory / blob.name, columns=["value"])), visible)
    return landings


def table_holds(target: FilesystemTarget, name: str, ends: Mapping[int, int], identifier: str) -> float:
    """When the archive's Iceberg table first held every record below `ends` (partition -> end offset)."""
    for at, positions in table_commits(target, identifier):
        if all(positions.get(f"{name}/{partition}", 0) >= end for partition, end in ends.items()):
            return at
    raise VerificationError(f"{identifier}: no table commit holds every record below {dict(ends)}")


def ctime_after_log(
    target: FilesystemTarget, name: str, partitions: Iterable[int], flushed: Mapping[tuple[int, int], float]
) -> dict[str, float]:
    """A check of the ctime reading: each blob's ctime minus its `flushed` log line's time, in ms (min, median,
    max). The line is logged right after the commit, and the log's clock has whole ms, so expect a few ms below 0.
    Merged blobs (the mirror compacting) are not a flush's: their records' times come from their footers."""
    gaps = sorted(
        (os.stat(path).st_ctime - flushed[(partition, blob.first)]) * 1000
        for partition in partitions
        for blob in chain(target, name, partition)
        if (partition, blob.first) in flushed
        and merged_from(pq.read_metadata(path := target.directory(name, partition) / blob.name)) is None
    )
    if not gaps:
        return {}
    return {"min": round(gaps[0], 1), "p50": round(statistics.median(gaps), 1), "max": round(gaps[-1], 1)}


# ----------------------------------------------------------------------------------------------------- S3


def flushed_times(events: Iterable[Mapping[str, str]]) -> dict[tuple[int, int], float]:
    """(partition, first offset) -> the time of the mirror's `flushed` line for that blob. Mirror names end in
    `-<partition>` (a selection's `<entry>.<topic>-<partition>`, testkit's `<topic>-<partition>`)."""
    return {(int(f["mirror"].rsplit("-", 1)[1]), int(f["from"])): log_time(f) for f in events}


def s3_landings(
    target: S3Target, name: str, partitions: Iterable[int], flushed: Mapping[tuple[int, int], float]
) -> Landings:
    landings = Landings()
    for partition in partitions:
        prefix = target.key_prefix(name, partition)
        for page in target.client.get_paginator("list_objects_v2").paginate(Bucket=target.bucket, Prefix=prefix):
            for entry in page.get("Contents", []):
                blob = parse_blob_name(entry["Key"][len(prefix) :])
                if blob is None:
                    continue
                logged = flushed.get((partition, blob.first))
                modified = entry["LastModified"].timestamp()
                if logged is None or not modified <= logged + 0.001 <= modified + 1 + S3_LOG_SLACK:
                    raise VerificationError(
                        f"{entry['Key']}: LastModified {modified:.0f}, `flushed` line at {logged}: the log does not "
                        "say when it was committed"
                    )
                table = pq.read_table(io.BytesIO(target.read(name, partition, blob.name)), columns=["value"])
                landings.add(_stamps(table), logged)
    return landings


# -------------------------------------------------------------------------------------------------- Kafka


class KafkaLandings(threading.Thread):
    """A read_committed consumer of every partition of `topic` from its start, noting when it got each record."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        super().__init__(name="bench-kafka-landings", daemon=True)
        self.landings = Landings()
        self.counts = dict.fromkeys(range(partitions), 0)
        self.error: BaseException | None = None
        self._done = threading.Event()
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "logger": RDKAFKA_LOGGER,
                "group.id": f"bench-landings-{uuid.uuid4().hex}",  # assign() only, never committed
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                # The broker answers a fetch as soon as a byte is readable; this only bounds how long an idle fetch
                # is held, so a record is seen within it of becoming readable.
                "fetch.wait.max.ms": 20,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])

    def run(self) -> None:
        try:
            while not self._done.is_set():
                messages = self._consumer.consume(num_messages=10_000, timeout=0.05)
                seen = time.time()
                for message in messages:
                    if message.error() is not None:
                        raise VerificationError(f"destination consumer: {message.error()}")
                    value, partition = message.value() or b"", message.partition()
                    self.landings.add([int(value[:TIME_DIGITS])], seen)
                    if partition is not None:
                        self.counts[partition] += 1
        except BaseException as exc:
            self.error = exc
        finally:
            self._consumer.close()

    def received(self) -> int:
        return sum(self.counts.values())

    def stop(self) -> Landings:
        self._done.set()
        self.join(30)
        if self.error is not None:
            raise VerificationError(f"destination consumer failed: {self.error}") from self.error
        return self.landings


# ------------------------------------------------------------------------------------ Structured Streaming


class SinkLog:
    """The committed files of a Structured Streaming Parquet sink, read from its `_spark_metadata` log: each batch
    writes `<batch>` (every 10th a `<batch>.compact` holding all files so far); a file is committed at the
    modification time of the first log entry that lists it."""

    def __init__(self, output: Path) -> None:
        self.output = output
        self.committed: dict[str, float] = {}  # file path -> commit time
        self.rows = 0  # records in the committed files
        self.batches: list[float] = []  # commit time of each batch log that added a file
        self._read: set[str] = set()  # log files already read

    def poll(self) -> int:
        """Read the log entries written since the last poll; returns the records committed so far."""
        log = self.output / "_spark_metadata"
        entries = sorted(
            (int(name.split(".")[0]), name)
            for name in (os.listdir(log) if log.is_dir() else [])
            if name.split(".")[0].isdigit() and name not in self._read
        )
        for _, name in entries:
            path = log / name
            committed_at = os.stat(path).st_mtime
            added = False
            for line in path.read_text().splitlines()[1:]:  # the first line is the log's version, `v1`
                entry = json.loads(line)
                file = unquote(urlparse(entry["path"]).path)
                if entry.get("action", "add") == "add" and file not in self.committed:
                    self.committed[file] = committed_at
                    self.rows += pq.read_metadata(file).num_rows
                    added = True
            if added:
                self.batches.append(committed_at)
            self._read.add(name)
        return self.rows

    def landings(self) -> tuple[Landings, int]:
        """Every committed record's times, and how many distinct (partition, offset) the files hold."""
        landings, seen = Landings(), set[tuple[int, int]]()
        for file, committed_at in self.committed.items():
            table = pq.read_table(file, columns=["value", "partition", "offset"])
            landings.add(_stamps(table), committed_at)
            seen.update(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))
        return landings, len(seen)


def _stamps(table: Any) -> list[int]:
    return [int(us) for us in value_stamps(table.column("value")).to_pylist()]
