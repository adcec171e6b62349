"""Where a mirror writes, seen from outside mirror-v3: its `destination:` block, how far it got, what it holds.

Three targets behind one interface, read back around the product (plain directory listings and files, boto3
listings and GETs, a confluent-kafka consumer), so a bug in mirror-v3's own readers cannot hide one in its writers:

    FilesystemTarget -- a directory (`destination.type: filesystem`)
    S3Target         -- a bucket of its own on an S3 server (`destination.type: s3`, path-style, credentials in
                        environment variables the config names)
    KafkaTarget      -- topics on another cluster (`destination.type: kafka`, offsets preserve or renumber)

The end-to-end tests compare `records()` with the source record by record; the benchmarks check `offsets()` (one
column, cheap at millions of records); the quickstart and both wait on `next_offset()`.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sinks.blob.chain import BlobRange, is_temp_name, parse_blob_name, without_redundant
from sinks.filesystem.store import is_bookkeeping
from testkit.kafka_data import ConsumedRecord, committed_offset, consume_all, consume_as_group, watermarks

SOURCE_OFFSET_HEADER = "mirror-v3.source-offset"
SOURCE_CLUSTER_HEADER = "mirror-v3.source-cluster"  # renumber: the cluster a record was copied from
DEFAULT_FLUSH = {"max-time-ms": 1000}
_buckets = itertools.count()


@dataclass(frozen=True)
class SourceRecord:
    """A record as the source holds it: what every destination must reproduce."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int


def source_records(bootstrap: str, topic: str, partition: int) -> list[SourceRecord]:
    """Every record a read_committed consumer sees in the source partition."""
    return [_from_consumed(r, r.offset, list(r.headers or [])) for r in consume_all(bootstrap, topic, partition)]


class VerificationError(AssertionError):
    """What landed is not exactly the source."""


class Target(Protocol):
    kind: str  # "filesystem", "s3" or "kafka"

    def config(self, flush: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The config's `destination:` block."""
        ...

    def env(self) -> dict[str, str]:
        """What the mirror process needs in its environment (credentials the config names)."""
        ...

    def next_offset(self, name: str, partition: int) -> int | None:
        """The next source offset the destination holds for `name`/`partition`; None while it holds nothing."""
        ...

    def records(self, name: str, partition: int, since: int = 0) -> list[SourceRecord]:
        """Every record that landed (from source offset `since` on), as the source record it copies, in
        destination order."""
        ...

    def offsets(self, name: str, partition: int) -> pa.Array:
        """The source offsets that landed, in destination order (one column: cheap for millions of records)."""
        ...

    def location(self, name: str, partition: int) -> str:
        """Where the partition lives, for messages."""
        ...


def verify_offsets(target: Target, name: str, ends: Mapping[int, int]) -> None:
    """Partition p holds source offsets 0..ends[p]-1, each exactly once (a source without holes)."""
    for partition, end in ends.items():
        every = target.offsets(name, partition)
        rows, distinct = len(every), len(pc.unique(every))
        bounds = (pc.min(every).as_py(), pc.max(every).as_py()) if rows else (0, end - 1)
        if rows != end or distinct != end or bounds != (0, end - 1):
            raise VerificationError(
                f"{target.location(name, partition)}: {rows} records, {distinct} distinct offsets in "
                f"{bounds[0]}..{bounds[1]}; expected 0..{end - 1} once each"
            )


def assert_same_records(landed: list[SourceRecord], source: list[SourceRecord]) -> None:
    """Record-by-record equality, with a readable first difference."""
    offsets = [r.offset for r in landed]
    if len(offsets) != len(set(offsets)):
        raise VerificationError("an offset landed twice")
    if landed == source:
        return
    source_by_offset = {r.offset: r for r in source}
    landed_by_offset = {r.offset: r for r in landed}
    missing = sorted(set(source_by_offset) - set(landed_by_offset))
    extra = sorted(set(landed_by_offset) - set(source_by_offset))
    common = sorted(set(source_by_offset) & set(landed_by_offset))
    differing = [o for o in common if source_by_offset[o] != landed_by_offset[o]]
    detail = ""
    if differing:
        o = differing[0]
        detail = f"\nfirst difference at {o}:\n  source {source_by_offset[o]}\n  landed {landed_by_offset[o]}"
    elif not missing and not extra:
        detail = "\nthe same records, in another order"
    raise VerificationError(
        f"landed != source: {len(missing)} missing (first {missing[:5]}), {len(extra)} extra (first {extra[:5]}), "
        f"{len(differing)} differing{detail}"
    )


# ----------------------------------------------------------------------------------------------- blob chains


class BlobTarget(Target, Protocol):
    """A filesystem or S3 target: per partition a chain of Parquet blobs."""

    def names(self, name: str, partition: int) -> list[str]:
        """Every entry of the partition's directory / key prefix, sorted."""
        ...

    def read(self, name: str, partition: int, blob: str) -> bytes: ...

    def documents(self, directory: str) -> list[bytes]:
        """Every archive document under `directory` (`_topic`, `_groups/<cluster>`), in name order."""
        ...

    def write_raw(self, name: str, partition: int, blob: str, data: bytes) -> None:
        """Put an arbitrary entry there (to corrupt a chain on purpose, or to prefill one)."""
        ...

    def blob_location(self, name: str, partition: int, blob: str) -> str:
        """How mirror-v3 names that entry in its messages."""
        ...


def chain(target: BlobTarget, name: str, partition: int) -> list[BlobRange]:
    """The chain's blobs in order; raises VerificationError unless the names form one chain."""
    ranges: list[BlobRange] = []
    for entry in target.names(name, partition):
        if is_temp_name(entry):
            continue
        blob = parse_blob_name(entry)
        if blob is None:
            raise VerificationError(f"foreign entry {target.blob_location(name, partition, entry)}")
        if ranges and blob.first != ranges[-1].last + 1:
            raise VerificationError(f"chain broken at {target.blob_location(name, partition, entry)}")
        ranges.append(blob)
    return ranges


def _chain_next(target: BlobTarget, name: str, partition: int) -> int | None:
    """Where the chain ends, as every reader of the archive sees it: a blob inside another blob's range is redundant
    (a compaction running beside the mirror commits a merged blob before it deletes its run)."""
    names = [entry for entry in target.names(name, partition) if not is_temp_name(entry)]
    ranges = [blob for entry in names if (blob := parse_blob_name(entry)) is not None]
    if len(ranges) != len(names):
        chain(target, name, partition)  # names the foreign entry
    kept, _ = without_redundant(ranges)
    for previous, current in itertools.pairwise(kept):
        if current.first != previous.last + 1:
            raise VerificationError(f"chain broken at {target.blob_location(name, partition, current.name)}")
    return kept[-1].last + 1 if kept else None


def _blob_tables(
    target: BlobTarget, name: str, partition: int, columns: list[str] | None, since: int = 0
) -> list[pa.Table]:
    """Each blob of the chain (those ending at or after `since`) as a table; every row's offset must lie inside its
    blob's name range."""
    tables = []
    for blob in chain(target, name, partition):
        if blob.last < since:
            continue
        table = pq.read_table(io.BytesIO(target.read(name, partition, blob.name)), columns=columns)
        offsets = table.column("offset")
        if len(offsets) and (pc.min(offsets).as_py() < blob.first or pc.max(offsets).as_py() > blob.last):
            where = target.blob_location(name, partition, blob.name)
            raise VerificationError(f"{where} holds offsets outside its range")
        tables.append(table)
    return tables


def _blob_records(target: BlobTarget, name: str, partition: int, since: int) -> list[SourceRecord]:
    records: list[SourceRecord] = []
    for table in _blob_tables(target, name, partition, None, since):
        millis = pc.divide(pc.cast(table.column("timestamp"), pa.int64()), 1000).to_pylist()
        for offset, key, value, headers, ms in zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            table.column("headers").to_pylist(),
            millis,
            strict=True,
        ):
            if offset >= since:
                headers = [(h["key"], h["value"]) for h in headers or []]
                records.append(SourceRecord(offset, key, value, headers, int(ms)))
    return records


def _blob_offsets(target: BlobTarget, name: str, partition: int) -> pa.Array:
    columns = [t.column("offset") for t in _blob_tables(target, name, partition, ["offset"])]
    return pa.chunked_array([c for column in columns for c in column.chunks], type=pa.int64()).combine_chunks()


class FilesystemTarget:
    kind = "filesystem"

    def __init__(self, root: Path) -> None:
        self.root = root

    def config(self, flush: Mapping[str, int] | None = None) -> dict[str, Any]:
        return {"type": "filesystem", "root": str(self.root), "flush": dict(flush or DEFAULT_FLUSH)}

    def env(self) -> dict[str, str]:
        return {}

    def directory(self, name: str, partition: int) -> Path:
        return self.root / name / str(partition)

    def location(self, name: str, partition: int) -> str:
        return str(self.directory(name, partition))

    def names(self, name: str, partition: int) -> list[str]:
        directory = self.directory(name, partition)
        return sorted(p.name for p in directory.iterdir() if not is_bookkeeping(p.name)) if directory.exists() else []

    def read(self, name: str, partition: int, blob: str) -> bytes:
        return (self.directory(name, partition) / blob).read_bytes()

    def documents(self, directory: str) -> list[bytes]:
        """Every file under `directory` of the archive (`_topic`, `_groups/<cluster>`), in name order."""
        found = sorted((self.root / directory).glob("*.json"))
        return [path.read_bytes() for path in found]

    def write_raw(self, name: str, partition: int, blob: str, data: bytes) -> None:
        directory = self.directory(name, partition)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / blob).write_bytes(data)

    def blob_location(self, name: str, partition: int, blob: str) -> str:
        return str(self.directory(name, partition) / blob)

    def next_offset(self, name: str, partition: int) -> int | None:
        return _chain_next(self, name, partition)

    def records(self, name: str, partition: int, since: int = 0) -> list[SourceRecord]:
        return _blob_records(self, name, partition, since)

    def offsets(self, name: str, partition: int) -> pa.Array:
        return _blob_offsets(self, name, partition)


class S3Target:
    """A fresh bucket on an S3 server; keys `<prefix>/<name>/<partition>/<from>-<to>.parquet`."""

    kind = "s3"
    ACCESS_KEY_ENV = "MIRROR_V3_TEST_S3_KEY_ID"
    SECRET_KEY_ENV = "MIRROR_V3_TEST_S3_SECRET"

    def __init__(
        self, endpoint: str, access_key: str, secret_key: str, region: str, *, prefix: str = "archive"
    ) -> None:
        import boto3

        self.endpoint, self.access_key, self.secret_key, self.region = endpoint, access_key, secret_key, region
        self.bucket = f"mirror-test-{next(_buckets)}"
        self.prefix = prefix
        self.extra: dict[str, Any] = {}  # further keys of the destination block (multipart sizes, ...)
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
        )
        self.client.create_bucket(Bucket=self.bucket)
        self._seen: dict[str, tuple[str, int | None]] = {}  # key prefix -> (last key listed, next offset it implies)

    def routed(self, endpoint: str) -> S3Target:
        """The same bucket, with the mirror talking to it at another address (a fault-injecting proxy)."""
        twin = S3Target.__new__(S3Target)
        twin.__dict__.update(self.__dict__)
        twin.endpoint = endpoint
        return twin

    def config(self, flush: Mapping[str, int] | None = None) -> dict[str, Any]:
        return {
            "type": "s3",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "endpoint": self.endpoint,
            "region": self.region,
            "path-style": True,
            "access-key-id-env": self.ACCESS_KEY_ENV,
            "secret-access-key-env": self.SECRET_KEY_ENV,
            "flush": dict(flush or DEFAULT_FLUSH),
            "retry": {"initial-backoff-ms": 50, "max-backoff-ms": 1000, "deadline-ms": 60_000},
            **self.extra,
        }

    def env(self) -> dict[str, str]:
        return {self.ACCESS_KEY_ENV: self.access_key, self.SECRET_KEY_ENV: self.secret_key}

    def key_prefix(self, name: str, partition: int) -> str:
        return f"{self.prefix}/{name}/{partition}/"

    def location(self, name: str, partition: int) -> str:
        return f"s3://{self.bucket}/{self.key_prefix(name, partition)}"

    def blob_location(self, name: str, partition: int, blob: str) -> str:
        return self.location(name, partition) + blob

    def _keys(self, prefix: str, start_after: str | None = None) -> list[str]:
        request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
        if start_after is not None:
            request["StartAfter"] = start_after
        keys: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(**request):
            keys.extend(entry["Key"] for entry in page.get("Contents", []))
        return keys

    def names(self, name: str, partition: int) -> list[str]:
        prefix = self.key_prefix(name, partition)
        return sorted(key[len(prefix) :] for key in self._keys(prefix))

    def read(self, name: str, partition: int, blob: str) -> bytes:
        body = self.client.get_object(Bucket=self.bucket, Key=self.key_prefix(name, partition) + blob)["Body"]
        try:
            return bytes(body.read())
        finally:
            body.close()

    def documents(self, directory: str) -> list[bytes]:
        """Every object under `directory` of the archive (`_topic`, `_groups/<cluster>`), in key order."""
        found = []
        for key in sorted(self._keys(f"{self.prefix}/{directory}/")):
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                found.append(bytes(body.read()))
            finally:
                body.close()
        return found

    def write_raw(self, name: str, partition: int, blob: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.key_prefix(name, partition) + blob, Body=data)

    def next_offset(self, name: str, partition: int) -> int | None:
        """Lists only behind the last key seen (keys sort by offset), so a poll is one short LIST. Blobs are
        immutable, so what was seen stays true; the full check is `records()` / `offsets()`."""
        prefix = self.key_prefix(name, partition)
        last_key, seen = self._seen.get(prefix, (None, None))
        keys = self._keys(prefix, last_key)
        lasts = [blob.last for key in keys if (blob := parse_blob_name(key[len(prefix) :])) is not None]
        if lasts:
            seen = max(lasts) + 1
        if keys:
            self._seen[prefix] = (keys[-1], seen)
        return seen

    def records(self, name: str, partition: int, since: int = 0) -> list[SourceRecord]:
        return _blob_records(self, name, partition, since)

    def offsets(self, name: str, partition: int) -> pa.Array:
        return _blob_offsets(self, name, partition)


# -------------------------------------------------------------------------------------------------- Kafka


class KafkaTarget:
    """Topics on another cluster: `preserve` keeps the source offset, `renumber` carries it in a header."""

    kind = "kafka"

    def __init__(self, bootstrap: str, offsets: str, **extra: Any) -> None:
        self.bootstrap = bootstrap
        self.mode = offsets
        self.extra = extra  # further keys of the destination block (compression, security, ...)

    def config(self, flush: Mapping[str, int] | None = None) -> dict[str, Any]:
        return {
            "type": "kafka",
            "bootstrap-servers": self.bootstrap,
            "offsets": self.mode,
            "flush": dict(flush or {"max-time-ms": 500}),
            "retry": {"initial-backoff-ms": 50, "max-backoff-ms": 1000, "deadline-ms": 60_000},
            **self.extra,
        }

    def env(self) -> dict[str, str]:
        return {}

    def location(self, name: str, partition: int) -> str:
        return f"{self.bootstrap}/{name}/{partition}"

    def next_offset(self, name: str, partition: int) -> int | None:
        """Read around mirror-v3: the end offset in preserve mode, the position group's commit in renumber mode."""
        if self.mode == "preserve":
            return watermarks(self.bootstrap, name, partition)[1] or None
        return committed_offset(self.bootstrap, f"mirror-v3.{name}", name, partition)

    def records(self, name: str, partition: int, since: int = 0) -> list[SourceRecord]:
        """Every committed record (read_committed); destination offsets must only increase."""
        consumed = consume_all(self.bootstrap, name, partition, "read_committed", timeout=600)
        return self._as_source(consumed, name, partition, since)

    def records_of_group(self, group: str, name: str, partition: int) -> list[SourceRecord]:
        """What a consumer of `group` reads of the partition from the group's committed offset on."""
        return self._as_source(consume_as_group(self.bootstrap, group, name, partition), name, partition, 0)

    def _as_source(self, found: list[ConsumedRecord], name: str, partition: int, since: int) -> list[SourceRecord]:
        records = []
        previous = -1
        for consumed in found:
            if consumed.offset <= previous:
                raise VerificationError(f"{self.location(name, partition)}: offset {consumed.offset} after {previous}")
            previous = consumed.offset
            headers = list(consumed.headers or [])
            offset = consumed.offset
            if self.mode == "renumber":
                tagged = [v for k, v in headers if k == SOURCE_OFFSET_HEADER]
                if len(tagged) != 1 or tagged[0] is None:
                    raise VerificationError(
                        f"{self.location(name, partition)} offset {consumed.offset}: headers {headers}"
                    )
                offset = int(tagged[0])
                if sum(1 for k, _ in headers if k == SOURCE_CLUSTER_HEADER) > 1:
                    raise VerificationError(f"{self.location(name, partition)} offset {consumed.offset}: {headers}")
                headers = [(k, v) for k, v in headers if k not in (SOURCE_OFFSET_HEADER, SOURCE_CLUSTER_HEADER)]
            if offset >= since:
                records.append(_from_consumed(consumed, offset, headers))
        return records

    def offsets(self, name: str, partition: int) -> pa.Array:
        return pa.array([r.offset for r in self.records(name, partition)], type=pa.int64())


def _from_consumed(record: ConsumedRecord, offset: int, headers: list[tuple[str, bytes | None]]) -> SourceRecord:
    return SourceRecord(offset, record.key, record.value, headers, record.timestamp_ms)


def table_records(rows: pa.Table, partition: int) -> list[SourceRecord]:
    """One partition's rows of a table (what PyIceberg, deltalake or Spark read) as records, in offset order."""
    mine = rows.filter(pc.equal(rows["partition"], partition)).sort_by("offset")
    millis = pc.divide(pc.cast(mine["timestamp"], pa.int64()), 1000).to_pylist()
    return [
        SourceRecord(offset, key, value, [(h["key"], h["value"]) for h in headers or []], int(ms))
        for offset, key, value, headers, ms in zip(
            mine["offset"].to_pylist(),
            mine["key"].to_pylist(),
            mine["value"].to_pylist(),
            mine["headers"].to_pylist(),
            millis,
            strict=True,
        )
    ]
