"""S3 staging inside Spark tasks: a blob becomes a multipart upload whose parts are uploaded but
which is not completed, so nothing is visible until the driver completes it with `If-None-Match: *`.

Runs on executors with botocore's blocking client (one per worker process and settings). The blob's
Parquet bytes are built in memory first (at most about flush.max-bytes, compressed), because its
SHA-256 goes into the upload's metadata at creation: the driver's commit uses it to tell its own lost
answer from another writer's object.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from core.process_cache import PerProcess
from sinks.blob.chain import blob_name
from sinks.blob.staging import BlobFormat, StagedBlob
from sinks.retry import RetryPolicy, retry_transient_sync
from sinks.s3.errors import call_blocking

SHA256_METADATA = "mirror-v3-sha256"
WRITER_METADATA = "mirror-v3-writer"  # one random id per process: tells our own blobs from a twin's
WRITTEN_METADATA = "mirror-v3-written"  # a merged blob's time (Unix ms): its newest original's
CONTENT_TYPE = "application/vnd.apache.parquet"
# Blobs of different partitions one task stages at the same time. Staging a steady partition's small blob is two
# round trips (create the upload, upload its part) for a millisecond or two of encoding: one after the other, a
# task of 32 such blobs waited about 0.9 s on the store (moto on this machine) and an estate of 64 partitions at
# max-time 1 s fell behind. The botocore client is shared by the threads (botocore clients are thread-safe; its
# pool keeps 10 connections).
STAGES_AT_ONCE = 4


@dataclass(frozen=True)
class S3Settings:
    bucket: str
    region: str | None
    endpoint: str | None
    path_style: bool
    access_key_id: str | None = field(repr=False)
    secret_access_key: str | None = field(repr=False)
    session_token: str | None = field(repr=False)
    part_size: int
    request_timeout_s: float
    server_side_encryption: str | None = None  # AES256 | aws:kms
    sse_kms_key_id: str | None = None
    storage_class: str | None = None

    def object_options(self) -> dict[str, str]:
        """What every PutObject and CreateMultipartUpload carries (the parts and the completion inherit it)."""
        options: dict[str, str] = {}
        if self.server_side_encryption is not None:
            options["ServerSideEncryption"] = self.server_side_encryption
        if self.sse_kms_key_id is not None:
            options["SSEKMSKeyId"] = self.sse_kms_key_id
        if self.storage_class is not None:
            options["StorageClass"] = self.storage_class
        return options

    def short_lived_object_options(self) -> dict[str, str]:
        """What an object that lives seconds carries (a lease, a heartbeat, a probe): the blobs' encryption, but the
        default storage class, or it would pay an infrequent-access class's minimum storage duration each time."""
        options = self.object_options()
        options.pop("StorageClass", None)
        return options


@dataclass(frozen=True)
class S3Staging:
    """Stages a partition's blobs as unfinished multipart uploads under `key_prefix`."""

    settings: S3Settings
    key_prefix: str
    writer_id: str
    retry: RetryPolicy
    blob_format: BlobFormat = field(default_factory=BlobFormat)

    @property
    def stages_at_once(self) -> int:
        return STAGES_AT_ONCE

    def open(self, first: int) -> S3BlobOutput:
        return S3BlobOutput(self)


class S3BlobOutput:
    def __init__(self, staging: S3Staging) -> None:
        self._staging = staging
        self.file = pa.BufferOutputStream()

    def finish(
        self, first: int, last: int, records: int, record_bytes: int, written_ms: int | None = None
    ) -> StagedBlob:
        data = memoryview(self.file.getvalue())
        staging = self._staging
        settings = staging.settings
        key = staging.key_prefix + blob_name(first, last)
        digest = hashlib.sha256(data).hexdigest()
        client = blocking_client(settings)
        metadata = {SHA256_METADATA: digest, WRITER_METADATA: staging.writer_id}
        if written_ms is not None:  # an object's own time cannot be set: `S3Store.modified_at` reads this
            metadata[WRITTEN_METADATA] = str(written_ms)

        def create() -> Any:
            return client.create_multipart_upload(
                Bucket=settings.bucket,
                Key=key,
                Metadata=metadata,
                ContentType=CONTENT_TYPE,
                **settings.object_options(),
            )

        where = f"s3://{settings.bucket}/{key}"
        retries = [0]  # reported with the staged blob: the driver counts them (a task has no metrics)

        def count(_: int) -> None:
            retries[0] += 1

        created = retry_transient_sync(
            lambda: call_blocking(f"create upload {where}", create, settings.bucket),
            staging.retry,
            f"stage {where}",
            on_retry=count,
        )
        upload_id = str(created["UploadId"])
        try:
            parts = []
            for number, offset in enumerate(range(0, max(1, len(data)), settings.part_size), start=1):
                body = bytes(data[offset : offset + settings.part_size])

                def upload(body: bytes = body, number: int = number) -> Any:
                    return client.upload_part(
                        Bucket=settings.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=body
                    )

                answer = retry_transient_sync(
                    lambda upload=upload, number=number: call_blocking(  # type: ignore[misc]
                        f"upload part {number} of {where}", upload, settings.bucket
                    ),
                    staging.retry,
                    f"stage {where}",
                    on_retry=count,
                )
                parts.append((number, str(answer["ETag"])))
        except BaseException:
            # Nothing was completed; free the parts now rather than on the next start (best effort).
            with contextlib.suppress(Exception):
                client.abort_multipart_upload(Bucket=settings.bucket, Key=key, UploadId=upload_id)
            raise
        return StagedBlob(
            first=first,
            last=last,
            records=records,
            record_bytes=record_bytes,
            size=len(data),
            ref=upload_id,
            sha256=digest,
            parts=tuple(parts),
            retries=retries[0],
        )

    def abandon(self) -> None:
        return None  # nothing left the process before finish()


def _new_client(settings: S3Settings) -> Any:
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    return session.create_client(
        "s3",
        region_name=settings.region,
        endpoint_url=settings.endpoint,
        aws_access_key_id=settings.access_key_id,
        aws_secret_access_key=settings.secret_access_key,
        aws_session_token=settings.session_token,
        config=Config(
            # Retries belong to mirror-v3's retry policy (the same as the driver's).
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=min(10.0, settings.request_timeout_s),
            read_timeout=settings.request_timeout_s,
            s3={"addressing_style": "path" if settings.path_style else "auto"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


_clients: PerProcess[S3Settings, Any] = PerProcess(_new_client)


def blocking_client(settings: S3Settings) -> Any:
    """One botocore client per worker process and settings: Python workers are reused across tasks."""
    return _clients.get(settings)
