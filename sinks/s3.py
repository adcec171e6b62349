"""S3 BlobStore on aiobotocore: one key prefix per partition, conditional creates.

Commit = one PutObject with `If-None-Match: *` (above `multipart-threshold` a multipart upload whose
completion carries the same condition), so a blob is created only if its name is free. A 412 means
the name is taken: when the object there is byte-for-byte ours (an earlier attempt whose answer was
lost) the commit succeeded; otherwise another writer owns this chain. Each object carries the SHA-256
of its content in metadata for that comparison. Errors are classified for the retry layer.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession
from botocore.exceptions import (
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.exceptions import (
    HTTPClientError as BotoHTTPClientError,
)

from sinks.base import DestinationError
from sinks.blob_chain import BlobExistsError
from sinks.retry import TransientDestinationError

T = TypeVar("T")
SHA256_METADATA = "mirror-v3-sha256"
WRITER_METADATA = "mirror-v3-writer"  # one random id per process: tells our own blobs from a twin's
_TRANSIENT_CODES = {
    "SlowDown",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "InternalError",
    "ServiceUnavailable",
    "Throttling",
    "ThrottlingException",
    "TooManyRequests",
    "RequestLimitExceeded",
    "ConditionalRequestConflict",  # AWS: a concurrent conditional write; the retry sees the winner
    "OperationAborted",
}


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    region: str | None
    endpoint: str | None
    path_style: bool
    access_key_id: str | None
    secret_access_key: str | None
    session_token: str | None
    multipart_threshold: int
    part_size: int
    request_timeout_s: float


def _drop_expect_continue(request: Any, **_: Any) -> None:
    """botocore asks for `Expect: 100-continue` on uploads and aiohttp then waits for the 100 with no
    timeout: a stalled server would hang the commit forever. Send bodies straight away instead."""
    headers = getattr(request, "headers", None)
    if headers is not None and "Expect" in headers:
        del headers["Expect"]


class S3Connection:
    """One aiobotocore client shared by every mirror of a destination."""

    def __init__(self, settings: S3Settings) -> None:
        self.settings = settings
        self.writer_id = uuid.uuid4().hex
        self._client: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._users = 0
        self._lock = asyncio.Lock()

    async def acquire(self) -> Any:
        async with self._lock:
            if self._client is None:
                session = AioSession()
                config = AioConfig(
                    region_name=self.settings.region,
                    # Retries belong to mirror-v3's retry layer, which reports them as a metric.
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    connect_timeout=min(10.0, self.settings.request_timeout_s),
                    read_timeout=self.settings.request_timeout_s,
                    s3={"addressing_style": "path" if self.settings.path_style else "auto"},
                    request_checksum_calculation="when_required",
                    response_checksum_validation="when_required",
                )
                stack = contextlib.AsyncExitStack()
                client = await stack.enter_async_context(
                    session.create_client(
                        "s3",
                        endpoint_url=self.settings.endpoint,
                        aws_access_key_id=self.settings.access_key_id,
                        aws_secret_access_key=self.settings.secret_access_key,
                        aws_session_token=self.settings.session_token,
                        config=config,
                    )
                )
                client.meta.events.register("before-send.s3", _drop_expect_continue)
                self._client, self._stack = client, stack
            self._users += 1
            return self._client

    async def release(self) -> None:
        async with self._lock:
            self._users -= 1
            if self._users <= 0 and self._stack is not None:
                stack, self._stack, self._client = self._stack, None, None
                await stack.aclose()


class S3Store:
    """The blobs of one partition under `s3://<bucket>/<key_prefix>`."""

    # Some S3-compatible stores ignore If-None-Match: list behind the tail after every commit.
    checks_for_foreign_blobs = True

    def __init__(self, connection: S3Connection, key_prefix: str) -> None:
        self._connection = connection
        self._bucket = connection.settings.bucket
        self._prefix = key_prefix
        self._client: Any = None
        self.list_calls = 0

    @property
    def key_prefix(self) -> str:
        return self._prefix

    def location(self, name: str) -> str:
        return f"s3://{self._bucket}/{self._prefix}{name}"

    async def _s3(self) -> Any:
        if self._client is None:
            self._client = await self._connection.acquire()
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            self._client = None
            await self._connection.release()

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        """Up to max_keys names after `start_after` (exclusive), in order; and whether more follow."""
        s3 = await self._s3()
        params: dict[str, Any] = {"Bucket": self._bucket, "Prefix": self._prefix, "MaxKeys": max_keys}
        if start_after is not None:
            params["StartAfter"] = self._prefix + start_after
        self.list_calls += 1
        response = await self._call(f"list {self.location('')}", lambda: s3.list_objects_v2(**params))
        names = [entry["Key"][len(self._prefix) :] for entry in response.get("Contents", [])]
        return names, bool(response.get("IsTruncated"))

    async def clean_leftovers(self) -> list[str]:
        return await self.abort_incomplete_uploads()

    async def modified_at(self, name: str) -> float | None:
        s3 = await self._s3()
        key = self._prefix + name
        head = await self._call(f"head {self.location(name)}", lambda: s3.head_object(Bucket=self._bucket, Key=key))
        modified = head.get("LastModified")
        return None if modified is None else float(modified.timestamp())

    async def put_if_absent(self, name: str, data: memoryview) -> int:
        s3 = await self._s3()
        key = self._prefix + name
        digest = hashlib.sha256(data).hexdigest()
        metadata = {SHA256_METADATA: digest, WRITER_METADATA: self._connection.writer_id}
        try:
            if len(data) > self._connection.settings.multipart_threshold:
                await self._multipart(s3, key, data, metadata)
            else:
                await self._call(
                    f"put {self.location(name)}",
                    lambda: s3.put_object(
                        Bucket=self._bucket,
                        Key=key,
                        Body=bytes(data),
                        IfNoneMatch="*",
                        Metadata=metadata,
                        ContentType="application/vnd.apache.parquet",
                    ),
                )
        except _PreconditionFailed:
            # The name is taken. It is ours only if this process wrote exactly these bytes: an
            # attempt whose answer was lost, or one the HTTP client resent on its own after a
            # dropped connection. Anything else, identical bytes included, is another writer.
            if await self._holds_our_bytes(s3, key, digest):
                return len(data)
            raise BlobExistsError(f"{self.location(name)} already exists: another writer owns this chain") from None
        return len(data)

    async def _multipart(self, s3: Any, key: str, data: memoryview, metadata: dict[str, str]) -> None:
        created = await self._call(
            f"create upload s3://{self._bucket}/{key}",
            lambda: s3.create_multipart_upload(
                Bucket=self._bucket, Key=key, Metadata=metadata, ContentType="application/vnd.apache.parquet"
            ),
        )
        upload_id = created["UploadId"]
        try:
            part_size = self._connection.settings.part_size
            parts = []
            for number, offset in enumerate(range(0, len(data), part_size), start=1):
                body = bytes(data[offset : offset + part_size])
                answer = await self._call(
                    f"upload part {number} of s3://{self._bucket}/{key}",
                    lambda body=body, number=number: s3.upload_part(  # type: ignore[misc]
                        Bucket=self._bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                    ),
                )
                parts.append({"PartNumber": number, "ETag": answer["ETag"]})
            await self._call(
                f"complete upload s3://{self._bucket}/{key}",
                lambda: s3.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},
                    IfNoneMatch="*",
                ),
            )
        except BaseException:
            # A failed upload leaves nothing visible; free its parts (best effort).
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    s3.abort_multipart_upload(Bucket=self._bucket, Key=key, UploadId=upload_id),
                    self._connection.settings.request_timeout_s,
                )
            raise

    async def _holds_our_bytes(self, s3: Any, key: str, digest: str) -> bool:
        try:
            head = await self._call(
                f"head s3://{self._bucket}/{key}", lambda: s3.head_object(Bucket=self._bucket, Key=key)
            )
        except DestinationError:
            return False
        metadata = head.get("Metadata", {})
        return bool(
            metadata.get(SHA256_METADATA) == digest and metadata.get(WRITER_METADATA) == self._connection.writer_id
        )

    async def remove(self, name: str) -> None:
        s3 = await self._s3()
        await self._call(
            f"delete {self.location(name)}", lambda: s3.delete_object(Bucket=self._bucket, Key=self._prefix + name)
        )

    async def abort_incomplete_uploads(self) -> list[str]:
        """Abort multipart uploads an interrupted commit left under this prefix; returns their keys."""
        s3 = await self._s3()
        try:
            response = await self._call(
                f"list uploads {self.location('')}",
                lambda: s3.list_multipart_uploads(Bucket=self._bucket, Prefix=self._prefix),
            )
        except NotImplementedByStore:
            return []  # a store without multipart listing has no leftovers we could see or abort
        aborted = []
        for upload in response.get("Uploads", []):
            await self._call(
                f"abort upload s3://{self._bucket}/{upload['Key']}",
                lambda upload=upload: s3.abort_multipart_upload(  # type: ignore[misc]
                    Bucket=self._bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                ),
            )
            aborted.append(upload["Key"])
        return aborted

    async def _call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        """One S3 request, bounded in time, its failure classified for the retry layer."""
        try:
            return await asyncio.wait_for(operation(), self._connection.settings.request_timeout_s)
        except ClientError as exc:
            raise _classify(exc, what, self._bucket) from None
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise DestinationError(f"{what}: no usable S3 credentials ({exc})") from None
        except TimeoutError:  # before OSError, of which it is a subclass
            raise TransientDestinationError(
                f"{what}: no answer within {self._connection.settings.request_timeout_s:g}s"
            ) from None
        except (BotoConnectionError, BotoHTTPClientError, aiohttp.ClientError, OSError) as exc:
            raise TransientDestinationError(f"{what}: connection failed: {_first_line(exc)}") from None


class _PreconditionFailed(DestinationError):
    pass


class NotImplementedByStore(DestinationError):
    """The S3-compatible store lacks an optional API (HTTP 501)."""


def _classify(exc: ClientError, what: str, bucket: str) -> DestinationError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    message = error.get("Message") or code or str(status)
    if status == 412 or code == "PreconditionFailed":
        return _PreconditionFailed(f"{what}: precondition failed")
    if code == "NotImplemented" or status == 501:
        return NotImplementedByStore(f"{what}: not implemented by this store")
    if status >= 500 or status == 429 or code in _TRANSIENT_CODES:
        return TransientDestinationError(f"{what}: HTTP {status} {code}: {message}")
    if code == "NoSuchBucket":
        return DestinationError(f"{what}: bucket {bucket!r} does not exist")
    if status == 403 or code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
        return DestinationError(f"{what}: access denied ({code}: {message})")
    return DestinationError(f"{what}: HTTP {status} {code}: {message}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
