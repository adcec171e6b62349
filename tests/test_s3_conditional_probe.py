"""The S3 destination asks once whether the store honours `If-None-Match: *`: where it does, commits skip the LIST
behind the tail (a second writer is refused by the conditional creates); where it does not, or the question could
not be answered, every commit keeps its listing."""

from __future__ import annotations

from typing import Any

import anyio.to_thread

from sinks.blob.chain import BlobChain
from sinks.retry import RetryPolicy
from sinks.s3.staging import S3Staging
from sinks.s3.store import PROBES_DIRECTORY, S3Connection, S3Store
from testkit.http_fault_proxy import FaultProxy
from tests.fakes import moto_settings

PREFIX = "archive/t/0/"


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )


def _ignore_if_none_match(request: Any, **_: Any) -> None:
    """What a store that ignores conditional creates sees: the header never reaches it."""
    if "If-None-Match" in request.headers:
        del request.headers["If-None-Match"]


async def _append_two_blobs(connection: S3Connection) -> S3Store:
    """Open a chain and append two staged blobs."""
    staging = S3Staging(connection.settings, PREFIX, connection.writer_id, RetryPolicy(deadline_s=1))

    def stage(first: int) -> Any:
        output = staging.open(first)
        output.file.write(b"x" * 10)
        return output.finish(first, first + 9, 1, 10)

    store = S3Store(connection, PREFIX)
    chain = BlobChain(store)
    try:
        await chain.open()
        for first in (0, 10):
            await chain.append(await anyio.to_thread.run_sync(stage, first))
    finally:
        await store.close()
    return store


async def test_a_store_that_honours_conditional_creates_is_spared_the_listing_after_each_commit(
    moto_endpoint: str,
) -> None:
    client = _client(moto_endpoint)
    client.create_bucket(Bucket="honours")
    with FaultProxy(moto_endpoint) as proxy:
        connection = S3Connection(moto_settings(proxy.endpoint, "honours"), "archive")
        store = await _append_two_blobs(connection)
        requests = proxy.requests
    assert connection.honours_conditional_creates is True and store.checks_for_foreign_blobs is False
    probes = [r for r in requests if PROBES_DIRECTORY in r.path]
    assert [r.method for r in probes] == ["PUT", "PUT", "DELETE"]
    assert all(r.path.startswith(f"/honours/archive/{PROBES_DIRECTORY}/") for r in probes)
    listings = [r for r in requests if r.method == "GET" and "list-type=2" in r.query and "_claims" not in r.query]
    assert len(listings) == 1  # the chain's tail at open, none per commit
    assert "Contents" not in client.list_objects_v2(Bucket="honours", Prefix=f"archive/{PROBES_DIRECTORY}")


async def test_a_store_that_ignores_conditional_creates_keeps_the_listing_after_each_commit(
    moto_endpoint: str,
) -> None:
    _client(moto_endpoint).create_bucket(Bucket="ignores")
    with FaultProxy(moto_endpoint) as proxy:
        connection = S3Connection(moto_settings(proxy.endpoint, "ignores"), "archive")
        (await connection.acquire()).meta.events.register("before-send.s3.PutObject", _ignore_if_none_match)
        try:
            store = await _append_two_blobs(connection)
        finally:
            await connection.release()
        requests = proxy.requests
    assert connection.honours_conditional_creates is False and store.checks_for_foreign_blobs is True
    listings = [r for r in requests if r.method == "GET" and "list-type=2" in r.query and "_claims" not in r.query]
    assert len(listings) == 3  # the tail at open, then one behind it after each of the two commits


async def test_a_probe_that_cannot_be_answered_keeps_the_listing(moto_endpoint: str) -> None:
    connection = S3Connection(moto_settings(moto_endpoint, "no-such-bucket"), "archive")
    assert await connection.conditional_creates() is False
    assert S3Store(connection, PREFIX).checks_for_foreign_blobs is True
