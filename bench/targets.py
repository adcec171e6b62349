"""Where a benchmark's mirror writes, and how the benchmark reads it back around mirror-v3.

Three destinations behind one interface (`Target`):

    FilesystemTarget -- a local directory (`destination.type: filesystem`); plain listdir and files.
    S3Target         -- a fresh bucket on a moto S3 server the benchmark started (`destination.type: s3`, path-style,
                        credentials in environment variables named in the config); botocore listings and GETs.
    KafkaTarget      -- the topic on a second broker the benchmark started (`destination.type: kafka`, preserve or
                        renumber); confluent-kafka watermarks / committed offsets and a read_committed consumer.

Each gives the type-specific part of the mirror's `destination:` block and the environment the mirror needs, the
destination's next offset (done-detection, polled while the mirror runs), a verification that every offset landed
exactly once (after the run), and what the store itself cost while the mirror ran.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import KafkaError

from sinks.blob_chain import BlobRange, parse_blob_name
from testkit.s3_servers import MotoServer, S3Server

# moto keeps an object's bytes in a SpooledTemporaryFile that rolls over to a temp file on disk past this many bytes
# (default 5 MiB - 1 KiB). The benchmark raises it above any object size so every object stays in RAM.
MOTO_KEY_BUFFER_ENV = "MOTO_S3_DEFAULT_KEY_BUFFER_SIZE"
MOTO_KEY_BUFFER_BYTES = 1 << 40
# Names of the environment variables the mirror reads its S3 credentials from (the config names them).
ACCESS_KEY_ENV = "MIRROR_V3_BENCH_S3_ACCESS_KEY_ID"
SECRET_KEY_ENV = "MIRROR_V3_BENCH_S3_SECRET_ACCESS_KEY"
# werkzeug's access log line: 127.0.0.1 - - [date] "PUT /bucket/key?... HTTP/1.1" 200 -
_ACCESS_LOG = re.compile(rb'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')


@dataclass(frozen=True)
class StoreUsage:
    """What the S3 server did between the mirror's process start and the last offset landing."""

    cpu_seconds: float  # the server process's user + system CPU time
    requests: dict[str, int] = field(default_factory=dict)  # kind of request -> count (from its access log)
    bench_lists: int = 0  # LISTs of those that were the benchmark's own done-detection polls


class Target(Protocol):
    kind: str  # "filesystem" or "s3"
    # Done-detection looks at the chains whenever the mirror logs a flush, and at least this often otherwise.
    idle_look_seconds: float

    def destination(self) -> dict[str, Any]:
        """The type-specific keys of the config's `destination:` block (flush and compression are added)."""
        ...

    def env(self) -> dict[str, str]:
        """Extra environment of the mirror process."""
        ...

    def describe(self) -> str:
        """Where the chains live, for the report."""
        ...

    def location(self, partition: int, name: str = "") -> str:
        """A partition's directory / key prefix, or one of its blobs, for messages."""
        ...

    def chain_next(self, partition: int) -> int | None:
        """The next source offset the destination holds for the partition, None while it holds nothing."""
        ...

    def verify(self, ends: dict[int, int]) -> tuple[int, int]:
        """Check that partition p holds source offsets 0..ends[p]-1 exactly once; return (units written: files,
        objects or record batches, their bytes). Raises VerificationError."""
        ...

    def begin_usage(self) -> None:
        """Start counting what the store does (called when the mirror process starts)."""
        ...

    def end_usage(self) -> StoreUsage | None:
        """What the store did since begin_usage(); None when there is no server to measure."""
        ...


class VerificationError(RuntimeError):
    pass


class BlobTarget(Protocol):
    """What the chain verification needs of a filesystem or S3 target."""

    def location(self, partition: int, name: str = "") -> str: ...

    def blobs(self, partition: int) -> list[tuple[BlobRange, int]]:
        """The partition's blobs in offset order with their sizes in bytes (other names ignored)."""
        ...

    def read_offsets(self, partition: int, blob: BlobRange) -> pa.Array:
        """The blob's `offset` column, read on its own."""
        ...


def verify_chains(target: BlobTarget, ends: dict[int, int]) -> tuple[int, int]:
    """Each chain is contiguous from 0, holds offsets 0..end-1 exactly once, each inside its blob's range.

    Reads only the `offset` column of each blob. Returns (blob count, total blob bytes).
    """
    files = size = 0
    for partition, end in ends.items():
        expected_first = 0
        offsets: list[pa.Array] = []
        for blob, blob_bytes in target.blobs(partition):
            if blob.first != expected_first:
                raise VerificationError(
                    f"{target.location(partition)}: chain gap or overlap at {blob.name} "
                    f"(expected from {expected_first})"
                )
            expected_first = blob.last + 1
            column = target.read_offsets(partition, blob)
            if len(column) and (pc.min(column).as_py() < blob.first or pc.max(column).as_py() > blob.last):
                raise VerificationError(
                    f"{target.location(partition, blob.name)} holds offsets outside its name's range"
                )
            offsets.append(column)
            files += 1
            size += blob_bytes
        if expected_first != end:
            raise VerificationError(f"{target.location(partition)}: chain ends at {expected_first}, expected {end}")
        _check_once(pa.chunked_array(offsets, type=pa.int64()).combine_chunks(), end, target.location(partition))
    return files, size


def _check_once(every: pa.Array, end: int, where: str) -> None:
    rows, distinct = len(every), len(pc.unique(every))
    if rows != end or distinct != end or (end and (pc.min(every).as_py(), pc.max(every).as_py()) != (0, end - 1)):
        raise VerificationError(f"{where}: {rows} rows, {distinct} distinct offsets; expected 0..{end - 1} once each")


class FilesystemTarget:
    kind = "filesystem"
    idle_look_seconds = 0.0  # a listdir costs nothing: every 20 ms tick

    def __init__(self, root: Path, topic: str) -> None:
        self.root = root
        self.topic = topic

    def destination(self) -> dict[str, Any]:
        return {"type": "filesystem", "root": str(self.root)}

    def env(self) -> dict[str, str]:
        return {}

    def describe(self) -> str:
        return f"directory {self.root}"

    def directory(self, partition: int) -> Path:
        return self.root / self.topic / str(partition)

    def location(self, partition: int, name: str = "") -> str:
        return str(self.directory(partition) / name) if name else str(self.directory(partition))

    def chain_next(self, partition: int) -> int | None:
        try:
            names = os.listdir(self.directory(partition))
        except FileNotFoundError:
            return None
        lasts = [blob.last for blob in map(parse_blob_name, names) if blob is not None]
        return max(lasts) + 1 if lasts else None

    def blobs(self, partition: int) -> list[tuple[BlobRange, int]]:
        directory = self.directory(partition)
        found = sorted(blob for blob in map(parse_blob_name, os.listdir(directory)) if blob is not None)
        return [(blob, (directory / blob.name).stat().st_size) for blob in found]

    def read_offsets(self, partition: int, blob: BlobRange) -> pa.Array:
        table = pq.read_table(self.directory(partition) / blob.name, columns=["offset"])
        return table.column("offset").combine_chunks()

    def verify(self, ends: dict[int, int]) -> tuple[int, int]:
        return verify_chains(self, ends)

    def begin_usage(self) -> None:
        pass

    def end_usage(self) -> StoreUsage | None:
        return None


class InMemoryMotoServer(MotoServer):
    """`testkit.s3_servers.MotoServer` with every object kept in RAM (no spooling to temp files)."""

    def _command(self) -> tuple[list[str], dict[str, str]]:
        command, env = super()._command()
        return command, {**(env or {}), MOTO_KEY_BUFFER_ENV: str(MOTO_KEY_BUFFER_BYTES)}


def moto_version() -> str:
    try:
        return metadata.version("moto")
    except metadata.PackageNotFoundError:
        return "not installed"


class S3Target:
    """A bucket on a running S3 server; keys `<prefix>/<topic>/<partition>/<from>-<to>.parquet`."""

    kind = "s3"
    # Each look is one LIST per partition that moto answers with a few ms of CPU taken from Spark and the mirror: look
    # when the mirror has logged a flush (the object is committed by then), and otherwise only once a second.
    idle_look_seconds = 1.0

    def __init__(self, server: S3Server, bucket: str, prefix: str, topic: str) -> None:
        self.server = server
        self.bucket = bucket
        self.prefix = prefix
        self.topic = topic
        self._client: Any = server.client()
        # Done-detection lists only behind the last key it saw (keys sort by offset), so a poll is one short LIST.
        self._last_key: dict[int, str] = {}
        self._next: dict[int, int] = {}
        self._lists = 0
        self._usage_start: tuple[float, int, int] | None = None  # (cpu seconds, log offset, own LISTs)

    def close(self) -> None:
        self._client.close()

    def destination(self) -> dict[str, Any]:
        return {
            "type": "s3",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "endpoint": self.server.endpoint,
            "region": self.server.region,
            "path-style": True,
            "access-key-id-env": ACCESS_KEY_ENV,
            "secret-access-key-env": SECRET_KEY_ENV,
        }

    def env(self) -> dict[str, str]:
        return {ACCESS_KEY_ENV: self.server.access_key, SECRET_KEY_ENV: self.server.secret_key}

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}/ on {self.server.name} at {self.server.endpoint}"

    def key_prefix(self, partition: int) -> str:
        return f"{self.prefix}/{self.topic}/{partition}/"

    def location(self, partition: int, name: str = "") -> str:
        return f"s3://{self.bucket}/{self.key_prefix(partition)}{name}"

    def _list(self, partition: int, start_after: str | None = None) -> list[tuple[str, int]]:
        """(key, size) of every object under the partition's prefix (after `start_after`), in key order."""
        prefix = self.key_prefix(partition)
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after is not None:
            request["StartAfter"] = start_after
        found: list[tuple[str, int]] = []
        while True:
            page = self._client.list_objects_v2(**request)
            self._lists += 1
            found.extend((entry["Key"], int(entry["Size"])) for entry in page.get("Contents", []))
            if not page.get("IsTruncated"):
                return found
            request["ContinuationToken"] = page["NextContinuationToken"]

    def chain_next(self, partition: int) -> int | None:
        new = self._list(partition, self._last_key.get(partition))
        if new:
            self._last_key[partition] = new[-1][0]
        cut = len(self.key_prefix(partition))
        lasts = [blob.last for blob in (parse_blob_name(key[cut:]) for key, _ in new) if blob is not None]
        if lasts:
            seen = max(lasts) + 1
            self._next[partition] = max(seen, self._next.get(partition, seen))
        return self._next.get(partition)

    def blobs(self, partition: int) -> list[tuple[BlobRange, int]]:
        cut = len(self.key_prefix(partition))
        found = []
        for key, size in self._list(partition):
            blob = parse_blob_name(key[cut:])
            if blob is not None:
                found.append((blob, size))
        return sorted(found)

    def read_offsets(self, partition: int, blob: BlobRange) -> pa.Array:
        response = self._client.get_object(Bucket=self.bucket, Key=self.key_prefix(partition) + blob.name)
        body = response["Body"]
        try:
            data = body.read()
        finally:
            body.close()
        table = pq.read_table(pa.BufferReader(data), columns=["offset"])
        return table.column("offset").combine_chunks()

    def verify(self, ends: dict[int, int]) -> tuple[int, int]:
        return verify_chains(self, ends)

    def begin_usage(self) -> None:
        self._usage_start = (self._server_cpu_seconds(), self._log_size(), self._lists)

    def end_usage(self) -> StoreUsage | None:
        if self._usage_start is None:
            return None
        cpu, offset, lists = self._usage_start
        return StoreUsage(
            cpu_seconds=self._server_cpu_seconds() - cpu,
            requests=self._requests_since(offset),
            bench_lists=self._lists - lists,
        )

    def _server_cpu_seconds(self) -> float:
        """User + system CPU of the server process (all its threads) from /proc; 0 where that is unreadable."""
        pid = self.server.pid
        if pid is None:
            return 0.0
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    def _log_size(self) -> int:
        try:
            return self.server.stdout_path.stat().st_size
        except OSError:
            return 0

    def _requests_since(self, offset: int) -> dict[str, int]:
        """Requests in the server's access log past `offset`, by kind (LIST, PUT object, PUT part, ...)."""
        try:
            with self.server.stdout_path.open("rb") as log:
                log.seek(offset)
                text = log.read()
        except OSError:
            return {}
        counts: dict[str, int] = {}
        for method, target, _status in _ACCESS_LOG.findall(text):
            kind = _request_kind(method.decode(), target.decode(errors="replace"))
            counts[kind] = counts.get(kind, 0) + 1
        return counts


def _request_kind(method: str, target: str) -> str:
    path, _, query = target.partition("?")
    params = {part.partition("=")[0] for part in query.split("&") if part}
    is_bucket = path.strip("/").count("/") == 0
    if method == "GET" and is_bucket and "uploads" in params:
        return "LIST uploads"
    if method == "GET" and is_bucket:
        return "LIST"
    if method == "PUT" and "partNumber" in params:
        return "PUT part"
    if method == "POST" and "uploads" in params:
        return "create upload"
    if method == "POST" and "uploadId" in params:
        return "complete upload"
    if method == "PUT":
        return "PUT object"
    return method


_NOT_READY_YET = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._TIMED_OUT,
}


class KafkaTarget:
    """The benchmark topic on a destination broker of its own, in `preserve` or `renumber` mode."""

    idle_look_seconds = 0.2  # a watermark or committed-offset query is cheap, but not free for the broker

    def __init__(self, bootstrap: str, offsets: str, topic: str, compression: str) -> None:
        from confluent_kafka import Consumer

        from testkit.kafka_data import RDKAFKA_LOGGER

        self.bootstrap = bootstrap
        self.offsets = offsets
        self.kind = f"kafka-{offsets}"
        self.topic = topic
        self.compression = compression
        # One consumer for the done-detection polls: its group is the mirror's position group (renumber), so
        # committed() reads what the mirror's transactions committed; nothing is ever committed by it.
        self._poller = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"mirror-v3.{topic}",
                "enable.auto.commit": False,
                "logger": RDKAFKA_LOGGER,
            }
        )

    def close(self) -> None:
        self._poller.close()

    def destination(self) -> dict[str, Any]:
        return {
            "type": "kafka",
            "bootstrap-servers": self.bootstrap,
            "offsets": self.offsets,
            "compression": self.compression,
        }

    def env(self) -> dict[str, str]:
        return {}

    def describe(self) -> str:
        return f"topic {self.topic} on the destination broker {self.bootstrap} (offsets: {self.offsets})"

    def location(self, partition: int, name: str = "") -> str:
        return f"{self.bootstrap}/{self.topic}/{partition}"

    def chain_next(self, partition: int) -> int | None:
        from confluent_kafka import KafkaException, TopicPartition

        from testkit.kafka_data import is_transient

        tp = TopicPartition(self.topic, partition)
        try:
            if self.offsets == "preserve":
                _, high = self._poller.get_watermark_offsets(tp, timeout=10, cached=False)
                return int(high) if high > 0 else None
            (found,) = self._poller.committed([tp], timeout=10)
        except KafkaException as exc:
            # A coordinator still loading, or a new topic whose leaders are not settled yet (a fresh broker answers
            # NOT_LEADER_FOR_PARTITION for a moment): not there yet, ask again on the next poll.
            if is_transient(exc) or exc.args[0].code() in _NOT_READY_YET:
                return None
            raise
        return None if found.offset < 0 else int(found.offset)

    def verify(self, ends: dict[int, int]) -> tuple[int, int]:
        """Read every committed record back (read_committed) and check the source offsets: the record's own
        offset in preserve mode, its `mirror-v3.source-offset` header in renumber mode."""
        from testkit.kafka_data import consume_all

        size = 0
        for partition, end in ends.items():
            records = consume_all(self.bootstrap, self.topic, partition, "read_committed", timeout=600)
            if self.offsets == "preserve":
                offsets = [r.offset for r in records]
            else:
                offsets = [_source_offset(r.headers, self.location(partition)) for r in records]
            _check_once(pa.array(offsets, type=pa.int64()), end, self.location(partition))
            size += sum(len(r.key or b"") + len(r.value or b"") for r in records)
        return 0, size  # the flush lines count the batches / transactions

    def begin_usage(self) -> None:
        pass

    def end_usage(self) -> StoreUsage | None:
        return None


def _source_offset(headers: Any, where: str) -> int:
    for key, value in headers or ():
        if key == "mirror-v3.source-offset" and value is not None:
            return int(value)
    raise VerificationError(f"{where}: a record without a mirror-v3.source-offset header")
