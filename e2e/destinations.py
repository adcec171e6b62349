"""The destinations an end-to-end test can mirror into, behind one interface.

Tests are written once against `DestinationUnderTest` and run for the filesystem and for S3 (a real
S3 server process started by the harness). Reading back goes around mirror-v3: plain directory
listings and files, or boto3 listings and GETs.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path
from typing import Any, Protocol

import pyarrow.parquet as pq

from sinks.blob_chain import BlobRange, parse_blob_name

_buckets = itertools.count()


class DestinationConfig(Protocol):
    kind: str

    def config(self, flush: dict[str, int] | None) -> dict[str, Any]:
        """The `destination:` block of a config."""
        ...


class DestinationUnderTest(DestinationConfig, Protocol):
    """A blob destination (filesystem or S3): a chain of Parquet files per partition."""

    def names(self, dest_name: str, partition: int) -> list[str]:
        """Every entry of the partition's directory / prefix, sorted."""
        ...

    def read(self, dest_name: str, partition: int, name: str) -> bytes: ...

    def write_raw(self, dest_name: str, partition: int, name: str, data: bytes) -> None:
        """Put an arbitrary entry there (to corrupt a chain on purpose)."""
        ...

    def location(self, dest_name: str, partition: int, name: str) -> str:
        """How mirror-v3 names that entry in its messages."""
        ...


class FilesystemDestinationUnderTest:
    kind = "filesystem"

    def __init__(self, root: Path) -> None:
        self.root = root

    def config(self, flush: dict[str, int] | None) -> dict[str, Any]:
        return {"type": "filesystem", "root": str(self.root), "flush": flush or {"max-time-ms": 1000}}

    def directory(self, dest_name: str, partition: int) -> Path:
        return self.root / dest_name / str(partition)

    def names(self, dest_name: str, partition: int) -> list[str]:
        directory = self.directory(dest_name, partition)
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []

    def read(self, dest_name: str, partition: int, name: str) -> bytes:
        return (self.directory(dest_name, partition) / name).read_bytes()

    def write_raw(self, dest_name: str, partition: int, name: str, data: bytes) -> None:
        directory = self.directory(dest_name, partition)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)

    def location(self, dest_name: str, partition: int, name: str) -> str:
        return str(self.directory(dest_name, partition) / name)


class S3DestinationUnderTest:
    kind = "s3"

    def __init__(self, endpoint: str, access_key: str, secret_key: str, region: str, prefix: str = "archive") -> None:
        import boto3

        self.endpoint, self.access_key, self.secret_key, self.region = endpoint, access_key, secret_key, region
        self.bucket = f"mirror-e2e-{next(_buckets)}"
        self.prefix = prefix
        self.client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
        )
        self.client.create_bucket(Bucket=self.bucket)

    def env(self) -> dict[str, str]:
        return {"E2E_S3_KEY": self.access_key, "E2E_S3_SECRET": self.secret_key}

    def config(self, flush: dict[str, int] | None) -> dict[str, Any]:
        return {
            "type": "s3",
            "bucket": self.bucket,
            "prefix": self.prefix,
            "endpoint": self.endpoint,
            "region": self.region,
            "path-style": True,
            "access-key-id-env": "E2E_S3_KEY",
            "secret-access-key-env": "E2E_S3_SECRET",
            "flush": flush or {"max-time-ms": 1000},
            "retry": {"initial-backoff-ms": 50, "max-backoff-ms": 1000, "deadline-ms": 60_000},
        }

    def key_prefix(self, dest_name: str, partition: int) -> str:
        return f"{self.prefix}/{dest_name}/{partition}/"

    def names(self, dest_name: str, partition: int) -> list[str]:
        prefix = self.key_prefix(dest_name, partition)
        names: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            names.extend(entry["Key"][len(prefix) :] for entry in page.get("Contents", []))
        return sorted(names)

    def read(self, dest_name: str, partition: int, name: str) -> bytes:
        key = self.key_prefix(dest_name, partition) + name
        return bytes(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def write_raw(self, dest_name: str, partition: int, name: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.key_prefix(dest_name, partition) + name, Body=data)

    def location(self, dest_name: str, partition: int, name: str) -> str:
        return f"s3://{self.bucket}/{self.key_prefix(dest_name, partition)}{name}"


class KafkaDestinationUnderTest:
    """A topic on a second Kafka cluster, in `preserve` or `renumber` mode."""

    kind = "kafka"

    def __init__(self, bootstrap: str, offsets: str, **extra: Any) -> None:
        self.bootstrap = bootstrap
        self.offsets = offsets
        self.extra = extra

    def config(self, flush: dict[str, int] | None) -> dict[str, Any]:
        return {
            "type": "kafka",
            "bootstrap-servers": self.bootstrap,
            "offsets": self.offsets,
            "flush": flush or {"max-time-ms": 500},
            "retry": {"initial-backoff-ms": 50, "max-backoff-ms": 1000, "deadline-ms": 60_000},
            **self.extra,
        }

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The next source offset the destination expects, read around mirror-v3: the end offset in
        preserve mode, the consumer group's committed position in renumber mode."""
        from testkit.kafka_data import committed_offset, watermarks

        if self.offsets == "preserve":
            return watermarks(self.bootstrap, topic, partition)[1]
        return committed_offset(self.bootstrap, f"mirror-v3.{topic}", topic, partition)


def chain(dest: DestinationUnderTest, dest_name: str, partition: int) -> list[BlobRange]:
    """The chain's blobs in order; asserts that their names form a valid chain."""
    from sinks.blob_chain import is_temp_name

    ranges: list[BlobRange] = []
    for name in dest.names(dest_name, partition):
        if is_temp_name(name):
            continue
        blob = parse_blob_name(name)
        assert blob is not None, f"foreign entry {dest.location(dest_name, partition, name)}"
        if ranges:
            assert blob.first == ranges[-1].last + 1, f"chain broken at {name}"
        ranges.append(blob)
    return ranges


def next_offset(dest: DestinationUnderTest, dest_name: str, partition: int) -> int | None:
    blobs = chain(dest, dest_name, partition)
    return blobs[-1].last + 1 if blobs else None


def read_tables(dest: DestinationUnderTest, dest_name: str, partition: int) -> list[tuple[BlobRange, Any]]:
    return [
        (blob, pq.read_table(io.BytesIO(dest.read(dest_name, partition, blob.name))))
        for blob in chain(dest, dest_name, partition)
    ]
