"""Server-side encryption and storage class: set on every object the S3 destination writes (the blob's
multipart upload at creation, the claim's PutObject) and on no other request, as the store reports them back."""

from __future__ import annotations

from typing import Any

import anyio.to_thread
import pytest

from config.errors import ConfigError
from config.loader import parse_config
from config.secrets import MissingSecretError
from sinks.blob.chain import blob_name
from sinks.retry import RetryPolicy
from sinks.s3.destination import s3_settings
from sinks.s3.staging import S3Settings, S3Staging
from sinks.s3.store import S3Connection, S3Store, claims_prefix
from testkit.http_fault_proxy import FaultProxy
from tests.fakes import moto_settings

PREFIX = "archive/t/0/"
KMS_KEY = "arn:aws:kms:us-east-1:123456789012:key/0f6c2d6e-1111-2222-3333-444455556666"


def _client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1"
    )


def _settings(endpoint: str, bucket: str, **options: str | None) -> S3Settings:
    return moto_settings(endpoint, bucket, part_size=5 * 1024 * 1024, **options)


async def _write_blob(settings: S3Settings) -> str:
    """Stage a two-part blob as a Spark task does, and commit it (claim + complete) as the driver does."""
    staging = S3Staging(
        settings, PREFIX, "writer", RetryPolicy(initial_backoff_s=0.01, max_backoff_s=0.01, deadline_s=1)
    )

    def stage() -> Any:
        output = staging.open(0)
        output.file.write(b"x" * (settings.part_size + 10))
        return output.finish(0, 9, 0, 0)

    staged = await anyio.to_thread.run_sync(stage)
    store = S3Store(S3Connection(settings), PREFIX)
    try:
        await store.commit_staged(blob_name(0, 9), staged)
    finally:
        await store.close()
    return PREFIX + blob_name(0, 9)


@pytest.mark.parametrize(
    ("options", "reported"),
    [
        (
            {"server_side_encryption": "aws:kms", "sse_kms_key_id": KMS_KEY, "storage_class": "STANDARD_IA"},
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": KMS_KEY, "StorageClass": "STANDARD_IA"},
        ),
        ({"server_side_encryption": "AES256"}, {"ServerSideEncryption": "AES256"}),
    ],
)
async def test_every_object_written_carries_encryption_and_storage_class(
    moto_endpoint: str, options: dict[str, str], reported: dict[str, str]
) -> None:
    bucket = f"sse-{len(options)}"
    client = _client(moto_endpoint)
    client.create_bucket(Bucket=bucket)
    with FaultProxy(moto_endpoint) as proxy:
        blob = await _write_blob(_settings(proxy.endpoint, bucket, **options))
        requests = proxy.requests

    claim = claims_prefix(PREFIX) + "start"
    for key in (blob, claim):
        head = client.head_object(Bucket=bucket, Key=key)
        assert {name: head.get(name) for name in reported} == reported, key

    def kind(method: str, query: str) -> str:
        if method == "POST" and query.startswith("uploads"):
            return "create"
        if method == "POST" and "uploadId" in query:
            return "complete"
        if method == "PUT" and "partNumber" in query:
            return "part"
        return "put" if method == "PUT" else method

    headers = {"ServerSideEncryption": "x-amz-server-side-encryption", "StorageClass": "x-amz-storage-class"}
    headers["SSEKMSKeyId"] = "x-amz-server-side-encryption-aws-kms-key-id"
    seen = {kind(r.method, r.query): {h: r.header(headers[h]) for h in reported} for r in requests}
    assert set(seen) >= {"create", "part", "complete", "put"}
    # Only the requests that create an object say how to store it; S3 refuses the headers on the others.
    assert seen["create"] == seen["put"] == reported
    assert seen["part"] == seen["complete"] == dict.fromkeys(reported)


async def test_without_options_objects_get_the_bucket_defaults(moto_endpoint: str) -> None:
    client = _client(moto_endpoint)
    client.create_bucket(Bucket="plain")
    with FaultProxy(moto_endpoint) as proxy:
        await _write_blob(_settings(proxy.endpoint, "plain"))
        requests = proxy.requests
    assert all(r.header("x-amz-server-side-encryption") is None for r in requests)
    assert all(r.header("x-amz-storage-class") is None for r in requests)


def _config(**destination: str) -> str:
    keys = "".join(f"\n  {key}: {value}" for key, value in destination.items())
    mirror = "{name: m, source: {bootstrap-servers: 'k:9092'}, topic: t, partition: 0}"
    return f"destination:\n  type: s3\n  bucket: b{keys}\nmirrors:\n  - {mirror}\n"


def test_the_config_takes_encryption_and_storage_class() -> None:
    config = parse_config(
        _config(
            **{"server-side-encryption": "aws:kms", "sse-kms-key-id": "alias/archive", "storage-class": "GLACIER_IR"}
        )
    )
    destination = config.destination
    assert (destination.server_side_encryption, destination.sse_kms_key_id, destination.storage_class) == (  # type: ignore[union-attr]
        "aws:kms",
        "alias/archive",
        "GLACIER_IR",
    )


@pytest.mark.parametrize(
    ("keys", "field", "problem", "line"),
    [
        ({"sse-kms-key-id": "alias/a"}, "sse-kms-key-id", "needs server-side-encryption: aws:kms", 4),
        (
            {"server-side-encryption": "AES256", "sse-kms-key-id": "alias/a"},
            "sse-kms-key-id",
            "needs server-side-encryption: aws:kms",
            5,
        ),
        (
            {"server-side-encryption": "SSE-C"},
            "server-side-encryption",
            "invalid value 'SSE-C'; expected one of: AES256, aws:kms",
            4,
        ),
        ({"storage-class": "DEEP_ARCHIVE"}, "storage-class", "DEEP_ARCHIVE objects cannot be read back", 4),
        ({"storage-class": "standard"}, "storage-class", "invalid value 'standard'", 4),
    ],
)
def test_inconsistent_encryption_or_storage_class_is_a_config_error(
    keys: dict[str, str], field: str, problem: str, line: int
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_config(**keys))
    assert (caught.value.path, caught.value.line) == (("destination", field), line)
    assert caught.value.problem.startswith(problem), caught.value.problem


def test_an_unset_key_variable_is_a_config_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2E_S3_KEY_ID", "id")
    monkeypatch.delenv("E2E_S3_SECRET", raising=False)
    keys = {"access-key-id-env": "E2E_S3_KEY_ID", "secret-access-key-env": "E2E_S3_SECRET"}
    destination = parse_config(_config(**keys)).destination
    with pytest.raises(MissingSecretError) as caught:
        s3_settings(destination)  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.variable) == ("destination.secret-access-key-env", "E2E_S3_SECRET")
