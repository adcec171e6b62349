"""Topic metadata in a blob archive: documents added whole, never changed, read back oldest first; the same on a
directory and on S3 (moto in this process)."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from sinks.archive.documents import ArchiveDocuments, moment_text
from sinks.archive.topic_metadata import ArchivedTopic, add, decode, encode, history, location, newest
from sinks.filesystem.documents import FilesystemDocuments
from sinks.s3.documents import S3Documents
from sinks.s3.store import S3Connection
from tests.fakes import moto_settings

_buckets = itertools.count()


def archived(ms: int, **changes: Any) -> ArchivedTopic:
    fields: dict[str, Any] = {
        "source_cluster": "prod",
        "source_topic": "orders",
        "seen_at": moment_text(ms),
        "seen_at_ms": ms,
        "partitions": 6,
        "replication_factor": 3,
        "topic_id": "kL3t0Rr4QyWb2wqS9cL1Ag",
        "cleanup_policy": "compact",
        "configs": {"cleanup.policy": "compact", "retention.ms": "604800000"},
        **changes,
    }
    return ArchivedTopic(**fields)


def test_a_document_is_plain_json_and_says_when_and_what() -> None:
    topic = archived(1_764_115_200_123)
    document = json.loads(encode(topic))
    assert document["seen-at"] == "2025-11-26T00:00:00.123Z" and document["partitions"] == 6
    assert document["configs"]["retention.ms"] == "604800000" and document["format"] == 1
    assert decode(encode(topic)) == topic
    assert decode(b"{not json") is None and decode(encode(archived(1, format=2))) is None  # a later format: skipped
    assert topic.same_topic(archived(5)) and not topic.same_topic(archived(5, partitions=12))


@pytest.fixture(params=["filesystem", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ArchiveDocuments]:
    if request.param == "filesystem":
        yield FilesystemDocuments(tmp_path)
        return
    import boto3

    endpoint, bucket = request.getfixturevalue("moto_endpoint"), f"topics-{next(_buckets)}"
    boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    ).create_bucket(Bucket=bucket)
    s3 = S3Documents(S3Connection(moto_settings(endpoint, bucket)), "archive")
    try:
        yield s3
    finally:
        await s3.close()


async def test_documents_are_added_and_read_back_oldest_first(store: ArchiveDocuments) -> None:
    assert await history(store, "orders") == [] and await newest(store, "orders") is None
    first, grown = archived(1_000), archived(2_000, partitions=12)
    await add(store, "orders", grown)
    await add(store, "orders", first)
    await add(store, "orders", first)  # the same moment again (a retried write): nothing changes
    assert await history(store, "orders") == [first, grown]
    assert await newest(store, "orders") == grown
    assert await history(store, "payments") == []  # per archived topic
    assert location(store, "orders").rstrip("/").endswith("orders/_topic")
    # Documents named otherwise (a schema's, by its ID) are listed too, but not those of a directory below.
    await store.add("orders/_topic", "42.json", b"{}")
    await store.add("orders/_topic/below", "7.json", b"{}")
    assert await store.listing("orders/_topic") == ["0000000001000.json", "0000000002000.json", "42.json"]
    assert await store.names("orders/_topic") == ["0000000001000.json", "0000000002000.json"]


async def test_a_directory_keeps_only_whole_documents(tmp_path: Path) -> None:
    store = FilesystemDocuments(tmp_path)
    await add(store, "orders", archived(1_000))
    directory = tmp_path / "orders" / "_topic"
    assert os.listdir(directory) == ["0000000001000.json"]  # no temporary left
    (directory / ".0000000002000.json.tmp-x").write_bytes(b'{"half": ')  # a crash's leftover: never read
    (directory / "notes.txt").write_text("by hand")
    assert await history(store, "orders") == [archived(1_000)]
