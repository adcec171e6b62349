"""What an archive keeps of each archived topic beyond its records: partition count, replication factor, topic ID
and the configs set on the topic (retention, compaction, message size, timestamp type...), as seen at a moment.

Rebuilding a lost cluster from the archive needs them (`restore` creates missing topics from them), and a topic's
history of them answers "as of when". Each time the mirror sees a topic differ from the archive's newest record
(`supervisor.topic_archiver`), it adds one JSON document beside the topic's chains:

    <root or prefix>/<destination name>/_topic/<seen at, ms since the epoch, 13 digits>.json

Documents are never changed or removed, only added, each created whole or not at all (filesystem: written to a
temporary name, made durable, then linked; S3: one PUT, `If-None-Match: *`), so a crash never leaves half of one
and a reader never sees one half-written. `_topic` is not a partition (digits only), so listings of chains skip
it; Spark, Hive and Athena skip names that start with `_`. Readable with any JSON tool (`jq . _topic/*.json`).

Cost: a document of a few hundred bytes per topic per change; reading the newest is one listing and one read.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread
import msgspec
import msgspec.structs

from sinks.filesystem import fsync_directory, make_durable_dirs
from sinks.s3 import ConnectionUser, S3Connection
from sinks.s3_errors import PreconditionFailed

TOPIC_DIRECTORY = "_topic"
FORMAT = 1  # of the document; a reader skips documents of a format it does not know
_MS_DIGITS = 13


class ArchivedTopic(msgspec.Struct, frozen=True, rename="kebab", forbid_unknown_fields=False):
    """One document: the source topic as seen at `seen_at_ms`."""

    source_cluster: str
    source_topic: str
    seen_at: str  # the same moment, RFC 3339 UTC, for people
    seen_at_ms: int
    partitions: int
    replication_factor: int
    topic_id: str
    cleanup_policy: str
    configs: dict[str, str]  # set on the topic itself; broker defaults are not the topic's
    format: int = FORMAT

    def same_topic(self, other: ArchivedTopic) -> bool:
        """Whether `other` says the same of the topic (whenever it was seen)."""
        return msgspec.structs.replace(other, seen_at=self.seen_at, seen_at_ms=self.seen_at_ms) == self


def seen_at(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def document_name(seen_at_ms: int) -> str:
    return f"{seen_at_ms:0{_MS_DIGITS}d}.json"


def encode(topic: ArchivedTopic) -> bytes:
    return msgspec.json.format(msgspec.json.encode(topic), indent=2) + b"\n"


def decode(data: bytes) -> ArchivedTopic | None:
    """None for anything that is not a document this version reads (a later format, a file put there by hand)."""
    try:
        found = msgspec.json.decode(data, type=ArchivedTopic)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    return found if found.format == FORMAT else None


def _listing(s3: Any, params: dict[str, Any]) -> Any:
    return lambda: s3.list_objects_v2(**params)


def _is_document(name: str) -> bool:
    stem = name.removesuffix(".json")
    return name.endswith(".json") and len(stem) == _MS_DIGITS and stem.isdigit()


class TopicMetadataStore(Protocol):
    """Where an archive keeps its topics' documents (a directory, an S3 prefix)."""

    def location(self, destination_name: str) -> str: ...

    async def history(self, destination_name: str) -> list[ArchivedTopic]:
        """Every document of the topic, oldest first."""
        ...

    async def add(self, destination_name: str, topic: ArchivedTopic) -> None:
        """Add a document (a no-op when one of that moment exists already)."""
        ...

    async def close(self) -> None: ...


async def newest(store: TopicMetadataStore, destination_name: str) -> ArchivedTopic | None:
    found = await store.history(destination_name)
    return found[-1] if found else None


class FilesystemTopicMetadata:
    def __init__(self, root: str) -> None:
        self._root = Path(root).expanduser().resolve()

    def _directory(self, destination_name: str) -> Path:
        return self._root / destination_name / TOPIC_DIRECTORY

    def location(self, destination_name: str) -> str:
        return str(self._directory(destination_name))

    async def history(self, destination_name: str) -> list[ArchivedTopic]:
        return await anyio.to_thread.run_sync(self._history, self._directory(destination_name))

    async def add(self, destination_name: str, topic: ArchivedTopic) -> None:
        await anyio.to_thread.run_sync(self._add, self._directory(destination_name), topic)

    async def close(self) -> None:
        return None

    @staticmethod
    def _history(directory: Path) -> list[ArchivedTopic]:
        try:
            names = sorted(name for name in os.listdir(directory) if _is_document(name))
        except FileNotFoundError:
            return []
        found = (decode((directory / name).read_bytes()) for name in names)
        return [topic for topic in found if topic is not None]

    @staticmethod
    def _add(directory: Path, topic: ArchivedTopic) -> None:
        make_durable_dirs(directory)
        temp = directory / f".{document_name(topic.seen_at_ms)}.tmp-{uuid.uuid4().hex}"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, encode(topic))
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            with contextlib.suppress(FileExistsError):  # that moment's document exists: it says the same
                os.link(temp, directory / document_name(topic.seen_at_ms))
        finally:
            os.remove(temp)
        fsync_directory(directory)


class S3TopicMetadata(ConnectionUser):
    def __init__(self, connection: S3Connection, prefix: str | None) -> None:
        super().__init__(connection)
        self._root = f"{prefix.strip('/')}/" if prefix else ""

    def _prefix(self, destination_name: str) -> str:
        return f"{self._root}{destination_name}/{TOPIC_DIRECTORY}/"

    def location(self, destination_name: str) -> str:
        return f"s3://{self._bucket}/{self._prefix(destination_name)}"

    async def history(self, destination_name: str) -> list[ArchivedTopic]:
        s3, prefix = await self._s3(), self._prefix(destination_name)
        keys: list[str] = []
        token: str | None = None
        while True:
            params: dict[str, Any] = {"Bucket": self._bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token is not None:
                params["ContinuationToken"] = token
            page = await self._connection.call(f"list {self.location(destination_name)}", _listing(s3, params))
            keys += [entry["Key"] for entry in page.get("Contents", []) if _is_document(entry["Key"][len(prefix) :])]
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or token is None:
                break
        found = []
        for key in sorted(keys):

            async def read(key: str = key) -> bytes:
                response = await s3.get_object(Bucket=self._bucket, Key=key)
                async with response["Body"] as body:
                    return bytes(await body.read())

            topic = decode(await self._connection.call(f"read s3://{self._bucket}/{key}", read))
            if topic is not None:
                found.append(topic)
        return found

    async def add(self, destination_name: str, topic: ArchivedTopic) -> None:
        s3 = await self._s3()
        key = self._prefix(destination_name) + document_name(topic.seen_at_ms)
        options = self._connection.settings.short_lived_object_options()  # SSE, no cold storage class: read often
        with contextlib.suppress(PreconditionFailed):  # that moment's document exists: it says the same
            await self._connection.call(
                f"write s3://{self._bucket}/{key}",
                lambda: s3.put_object(Bucket=self._bucket, Key=key, Body=encode(topic), IfNoneMatch="*", **options),
            )
