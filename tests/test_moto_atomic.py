"""The tests' moto keeps S3's guarantee for conditional writes (`testkit.moto_atomic`): of two writers creating one
key with `If-None-Match: *`, one lands and the other gets 412, even when a thread switch falls between moto's check
and its store. The switch is forced here by slowing the step moto runs between the two (without the lock both
writers get 200: seen on 2026-11-28)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest
from moto.s3.responses import S3Response


@pytest.fixture
def client(moto_endpoint: str) -> Iterator[Callable[[], Any]]:
    def make() -> Any:
        return boto3.client(
            "s3", endpoint_url=moto_endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
        )

    make().create_bucket(Bucket="conditional-writes")
    yield make


def slowed(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Make moto's step `name`, which runs after the condition is checked and before the object is stored, slow."""
    step = getattr(S3Response, name)

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.2)
        return step(*args, **kwargs)

    monkeypatch.setattr(S3Response, name, slow)


def race(writes: list[Callable[[], object]]) -> list[str]:
    outcomes: list[str] = []
    start = threading.Barrier(len(writes))

    def write(attempt: Callable[[], object]) -> None:
        start.wait()
        try:
            attempt()
            outcomes.append("landed")
        except botocore.exceptions.ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])

    threads = [threading.Thread(target=write, args=(attempt,)) for attempt in writes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(outcomes)


def test_of_two_conditional_puts_one_lands(client: Callable[[], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    slowed(monkeypatch, "_get_checksum")

    def create(s3: Any, body: str) -> Callable[[], object]:
        return lambda: s3.put_object(Bucket="conditional-writes", Key="k", Body=body, IfNoneMatch="*")

    outcomes = race([create(client(), body) for body in ("a", "b")])
    assert outcomes == ["PreconditionFailed", "landed"]


def test_of_two_conditional_multipart_completions_one_lands(
    client: Callable[[], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    slowed(monkeypatch, "_complete_multipart_body")
    s3 = client()
    parts = []
    for n in range(2):
        upload = s3.create_multipart_upload(Bucket="conditional-writes", Key="m")["UploadId"]
        etag = s3.upload_part(Bucket="conditional-writes", Key="m", UploadId=upload, PartNumber=1, Body=f"{n}")["ETag"]
        parts.append((upload, etag))

    def complete(s3: Any, upload: str, etag: str) -> Callable[[], object]:
        return lambda: s3.complete_multipart_upload(
            Bucket="conditional-writes",
            Key="m",
            UploadId=upload,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]},
            IfNoneMatch="*",
        )

    outcomes = race([complete(client(), upload, etag) for upload, etag in parts])
    assert outcomes == ["PreconditionFailed", "landed"]
