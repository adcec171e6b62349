"""S3 listings page through aiobotocore's and botocore's paginators (`S3Connection.pages`, `sinks.s3.catalog`),
each request bounded and its failure classified like any other S3 call; a failure ends the listing and the caller's
retry lists again. Against the tests' moto, with pages of two keys so that every listing spans several."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sinks.retry import RetryPolicy, TransientDestinationError
from sinks.s3.catalog import s3_chains
from sinks.s3.documents import S3Documents
from sinks.s3.store import S3Connection, S3Store, claims_prefix
from tests.fakes import moto_settings

BUCKET = "listings"


@pytest.fixture
async def connection(moto_endpoint: str) -> AsyncIterator[S3Connection]:
    import boto3

    client: Any = boto3.client(
        "s3", endpoint_url=moto_endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )
    client.create_bucket(Bucket=BUCKET)
    for key in ["a/t/0/x", "a/t/1/x", "a/t/2/x", "a/u/0/x", "a/_claims/t/0/y", "a/docs/1", "a/docs/2", "a/docs/3"]:
        client.put_object(Bucket=BUCKET, Key=key, Body=b"")
    yield S3Connection(moto_settings(moto_endpoint, BUCKET))


def small_pages(s3: Any) -> list[int]:
    """Make every ListObjectsV2 of `s3` ask for two keys a page; returns the requests' count, as it grows."""
    requests: list[int] = []

    def two_a_page(params: dict[str, Any], **_: Any) -> None:
        params["MaxKeys"] = 2
        requests.append(1)

    s3.meta.events.register("provide-client-params.s3.ListObjectsV2", two_a_page)
    return requests


async def test_every_page_of_a_listing_is_read(connection: S3Connection) -> None:
    s3 = await connection.acquire()
    requests = small_pages(s3)
    listing = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="a/")
    pages = [page async for page in connection.pages("list a/", listing)]
    keys = [entry["Key"] for page in pages for entry in page.get("Contents", [])]
    assert len(keys) == 8 and keys == sorted(keys) and len(pages) == len(requests) == 4
    documents = S3Documents(connection, "a")
    assert await documents.listing("docs") == ["1", "2", "3"]
    await connection.release()


async def test_a_failed_page_ends_the_listing_with_a_transient_error_naming_it(connection: S3Connection) -> None:
    s3 = await connection.acquire()
    requests = small_pages(s3)

    def refuse_the_second(**_: Any) -> None:
        if len(requests) == 2:
            raise ConnectionResetError("reset by peer")

    s3.meta.events.register("before-send.s3.ListObjectsV2", refuse_the_second)
    listing = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="a/")
    read: list[Any] = []
    with pytest.raises(TransientDestinationError, match="list s3://listings/a/: connection failed: reset by peer"):
        async for page in connection.pages("list s3://listings/a/", listing):
            read.append(page)
    assert len(read) == 1
    s3.meta.events.unregister("before-send.s3.ListObjectsV2", refuse_the_second)
    await connection.release()


async def test_claims_before_a_blob_are_forgotten_across_pages(connection: S3Connection) -> None:
    s3 = await connection.acquire()
    store = S3Store(connection, "b/t/0/")
    for offset in range(5):
        await s3.put_object(Bucket=BUCKET, Key=f"{claims_prefix('b/t/0/')}{offset:020d}", Body=b"")
    small_pages(s3)
    assert await store.forget_before(3) == 3
    assert await store.forget_before(3) == 0
    await store.close()
    await connection.release()


def test_the_catalog_lists_chains_across_pages(moto_endpoint: str, connection: S3Connection) -> None:
    import botocore.session

    original = botocore.session.Session.create_client

    def two_a_page(self: Any, *args: Any, **kwargs: Any) -> Any:
        client = original(self, *args, **kwargs)
        small_pages(client)
        return client

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session.Session, "create_client", two_a_page)
        chains = s3_chains(moto_settings(moto_endpoint, BUCKET), "a", RetryPolicy(deadline_s=5))
    assert chains == {"t": [0, 1, 2], "u": [0]}
