"""How Spark tasks read a chain's blobs back (`verify`, `restore`): a file of the partition's directory, or an
object under its S3 key prefix, whole, as bytes.

A blob is at most about `flush.max-bytes` compressed, so a task holds one at a time. Reads are idempotent, so
transient S3 failures are retried under the destination's retry policy; a blob that is gone or unreadable is an
error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sinks.base import DestinationError
from sinks.retry import RetryPolicy, retry_transient_sync
from sinks.s3_errors import call_blocking
from sinks.s3_staging import S3Settings, blocking_client


class BlobReader(Protocol):
    def location(self, name: str) -> str: ...

    def read(self, name: str) -> bytes:
        """The blob's bytes; DestinationError when it cannot be read."""
        ...


@dataclass(frozen=True)
class FilesystemBlobReader:
    directory: str

    def location(self, name: str) -> str:
        return str(Path(self.directory) / name)

    def read(self, name: str) -> bytes:
        try:
            return (Path(self.directory) / name).read_bytes()
        except OSError as exc:
            raise DestinationError(f"{self.location(name)}: cannot be read: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class S3BlobReader:
    settings: S3Settings
    key_prefix: str
    retry: RetryPolicy

    def location(self, name: str) -> str:
        return f"s3://{self.settings.bucket}/{self.key_prefix}{name}"

    def read(self, name: str) -> bytes:
        client, key = blocking_client(self.settings), self.key_prefix + name

        def get() -> bytes:
            response = client.get_object(Bucket=self.settings.bucket, Key=key)
            return bytes(response["Body"].read())

        where = self.location(name)
        return retry_transient_sync(
            lambda: call_blocking(f"read {where}", get, self.settings.bucket), self.retry, f"read {where}"
        )
