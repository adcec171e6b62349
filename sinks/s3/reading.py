"""How a Spark task reads an S3 chain's blobs back: an object under the partition's key prefix, whole. Reads are
idempotent, so transient failures are retried under the destination's retry policy."""

from __future__ import annotations

from dataclasses import dataclass

from sinks.retry import RetryPolicy, retry_transient_sync
from sinks.s3.errors import call_blocking
from sinks.s3.staging import S3Settings, blocking_client


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
