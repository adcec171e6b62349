"""S3 BlobStore on aiobotocore (the driver's side): one key prefix per partition, conditional commits.

Spark tasks stage each blob as a multipart upload that is uploaded but not completed
(`sinks.s3.staging`). The driver commits it in two conditional steps, each `If-None-Match: *`:

1. claim: a small object `<parent>/_claims/<partition>/<offset>` naming the blob, where `<offset>` is
   the offset the chain continues at (`start` for an empty chain). Two writers that cut blobs at
   different offsets never share a blob name, but they do share the successor of the chain's end:
   only one of them gets the claim, and the other is refused before anything it wrote is visible.
2. publish: `CompleteMultipartUpload` under the blob's name, so a blob is created only if its name is
   free (this also refuses a second writer that cut the same blob).

A 412 on either step is resolved by looking at what is there: the claim naming this very blob is this
writer's own lost answer or an interrupted writer's claim that this one continues; a blob carrying this
process's writer id and the staged bytes' SHA-256 (set as metadata when the upload was created) is an
earlier attempt whose answer was lost; anything else is another writer. A process that dies between
the two steps leaves a claim without its blob: the next writer finds it on open
(`interrupted_commit`) and writes exactly that blob next. Claims live beside the chain, never in it,
under a name that Spark, Hive and Athena skip (a leading underscore). Cost: one small PUT per blob,
one LIST per open. Errors are classified for the retry layer (`sinks.s3.errors`).

Some S3-compatible stores ignore `If-None-Match` (VersityGW, s3rver): there, each commit also lists right behind
the previous tail, where another writer shows up within one flush. Whether the store honours it is asked once per
process and destination, when the first chain opens (`S3Connection.conditional_creates`: the same new key created
twice, the second must be refused); a store that honours it is spared a LIST per flush.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiohttp
import anyio
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

from core.errors import first_line
from core.logs import log_event
from sinks.base import DestinationError
from sinks.blob.chain import (
    BlobExistsError,
    ChainProblem,
    CorruptChainError,
    ListedBlob,
    blob_name,
    parse_blob_name,
)
from sinks.blob.staging import BlobFormat, StagedBlob
from sinks.retry import RetryPolicy, TransientDestinationError
from sinks.s3.errors import (
    NoSuchUpload,
    NotImplementedByStore,
    PreconditionFailed,
    classify_client_error,
)
from sinks.s3.staging import SHA256_METADATA, WRITER_METADATA, WRITTEN_METADATA, S3Settings, S3Staging

T = TypeVar("T")

log = logging.getLogger("mirror_v3.s3")

CLAIMS_DIRECTORY = "_claims"
PROBES_DIRECTORY = "_mirror-v3/probes"  # under the destination's prefix: the conditional-create probe's key
START_CLAIM = "start"  # the claim of an empty chain's first blob; sorts after every offset's claim


def claims_prefix(key_prefix: str) -> str:
    """Where a chain's claims live: `a/b/<partition>/` -> `a/b/_claims/<partition>/` (beside the chain, so
    chain listings never see them; under the topic, so removing a topic's prefix removes them too)."""
    parent, _, partition = key_prefix.rstrip("/").rpartition("/")
    return f"{parent}/{CLAIMS_DIRECTORY}/{partition}/" if parent else f"{CLAIMS_DIRECTORY}/{partition}/"


def claim_name(after: str | None) -> str:
    """The claim of the blob that follows blob `after` (None: the first blob of an empty chain)."""
    if after is None:
        return START_CLAIM
    blob = parse_blob_name(after)
    if blob is None:
        raise ValueError(f"not a blob name: {after!r}")
    return f"{blob.last + 1:020d}"


def _drop_expect_continue(request: Any, **_: Any) -> None:
    """botocore asks for `Expect: 100-continue` on uploads and aiohttp then waits for the 100 with no
    timeout: a stalled server would hang the commit forever. Send bodies straight away instead."""
    headers = getattr(request, "headers", None)
    if headers is not None and "Expect" in headers:
        del headers["Expect"]


class S3Connection:
    """One aiobotocore client shared by every mirror of a destination."""

    def __init__(self, settings: S3Settings, prefix: str | None = None) -> None:
        """`prefix`: the destination's own key prefix (where the conditional-create probe writes)."""
        self.settings = settings
        self.writer_id = uuid.uuid4().hex
        self._root = f"{prefix.strip('/')}/" if prefix else ""
        self._client: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._users = 0
        self._lock = anyio.Lock()
        self._probe_lock = anyio.Lock()
        self.honours_conditional_creates: bool | None = None  # None: not asked yet (treated as "no")

    async def conditional_creates(self) -> bool:
        """Whether the store refuses a second create of a key with `If-None-Match: *`; asked once (a PUT of a new
        key under `<prefix>/_mirror-v3/probes/`, the same PUT again, which must be refused, and its removal).
        Any failure of the probe answers no: the chains then keep their listing after each commit."""
        async with self._probe_lock:
            if self.honours_conditional_creates is None:
                self.honours_conditional_creates = await self._probe()
                log_event(
                    log,
                    logging.INFO if self.honours_conditional_creates else logging.WARNING,
                    "S3 store honours conditional creates"
                    if self.honours_conditional_creates
                    else "S3 store ignores conditional creates: every commit lists behind the chain's tail",
                    bucket=self.settings.bucket,
                    endpoint=self.settings.endpoint or "aws",
                )
            return self.honours_conditional_creates

    async def _probe(self) -> bool:
        client = await self.acquire()
        key = f"{self._root}{PROBES_DIRECTORY}/{self.writer_id}"
        where = f"s3://{self.settings.bucket}/{key}"

        async def create() -> Any:
            return await client.put_object(
                Bucket=self.settings.bucket,
                Key=key,
                Body=b"",
                IfNoneMatch="*",
                **self.settings.short_lived_object_options(),
            )

        try:
            await self.call(f"probe {where}", create)
            try:
                await self.call(f"probe {where} again", create)
                return False
            except PreconditionFailed:
                return True
        except DestinationError as exc:
            log_event(log, logging.DEBUG, "conditional-create probe failed", where=where, error=str(exc))
            return False
        finally:
            with contextlib.suppress(DestinationError):
                await self.call(f"remove {where}", lambda: client.delete_object(Bucket=self.settings.bucket, Key=key))
            await self.release()

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

    async def call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        """One S3 request, bounded in time, its failure classified for the retry layer."""
        try:
            with anyio.fail_after(self.settings.request_timeout_s):
                return await operation()
        except ClientError as exc:
            raise classify_client_error(exc, what, self.settings.bucket) from None
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise DestinationError(f"{what}: no usable S3 credentials ({exc})") from None
        except TimeoutError:  # before OSError, of which it is a subclass
            raise TransientDestinationError(f"{what}: no answer within {self.settings.request_timeout_s:g}s") from None
        except (BotoConnectionError, BotoHTTPClientError, aiohttp.ClientError, OSError) as exc:
            raise TransientDestinationError(f"{what}: connection failed: {first_line(exc)}") from None

    async def pages(self, what: str, paginated: AsyncIterable[Any]) -> AsyncIterator[Any]:
        """The pages of an aiobotocore paginator's listing, each request bounded and classified as `call` does. A
        failure ends the listing (a paginator cannot resume a failed request): the caller's retry lists again."""
        pages = aiter(paginated)
        while True:
            try:
                page = await self.call(what, lambda: anext(pages))
            except StopAsyncIteration:
                return
            yield page


class ConnectionUser:
    """One user of a shared S3Connection: its client acquired at first use, released once at close."""

    def __init__(self, connection: S3Connection) -> None:
        self._connection = connection
        self._bucket = connection.settings.bucket
        self._client: Any = None

    async def _s3(self) -> Any:
        if self._client is None:
            self._client = await self._connection.acquire()
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            self._client = None
            await self._connection.release()


class S3Store(ConnectionUser):
    """The blobs of one partition under `s3://<bucket>/<key_prefix>`."""

    @property
    def checks_for_foreign_blobs(self) -> bool:
        """List behind the tail after every commit unless the store is known to honour If-None-Match (asked when
        the chain opens: `clean_leftovers`)."""
        return self._connection.honours_conditional_creates is not True

    def __init__(self, connection: S3Connection, key_prefix: str) -> None:
        super().__init__(connection)
        self._prefix = key_prefix
        self._claims = claims_prefix(key_prefix)
        self.list_calls = 0

    @property
    def key_prefix(self) -> str:
        return self._prefix

    def location(self, name: str) -> str:
        return f"s3://{self._bucket}/{self._prefix}{name}"

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        """Up to max_keys names after `start_after` (exclusive), in order; and whether more follow."""
        listed, more = await self.list_details(start_after, max_keys)
        return [entry.name for entry in listed], more

    async def list_details(self, start_after: str | None, max_keys: int) -> tuple[list[ListedBlob], bool]:
        """`list_page` with each object's size and time, which the same LIST answer carries."""
        s3 = await self._s3()
        params: dict[str, Any] = {"Bucket": self._bucket, "Prefix": self._prefix, "MaxKeys": max_keys}
        if start_after is not None:
            params["StartAfter"] = self._prefix + start_after
        self.list_calls += 1
        response = await self._call(f"list {self.location('')}", lambda: s3.list_objects_v2(**params))
        listed = [
            ListedBlob(entry["Key"][len(self._prefix) :], int(entry["Size"]), entry["LastModified"].timestamp())
            for entry in response.get("Contents", [])
        ]
        return listed, bool(response.get("IsTruncated"))

    async def clean_leftovers(self) -> list[str]:
        await self._s3()  # the probe shares this store's client
        await self._connection.conditional_creates()
        return await self.abort_incomplete_uploads()

    async def modified_at(self, name: str) -> float | None:
        s3 = await self._s3()
        key = self._prefix + name
        head = await self._call(f"head {self.location(name)}", lambda: s3.head_object(Bucket=self._bucket, Key=key))
        written = (head.get("Metadata") or {}).get(WRITTEN_METADATA)
        if written is not None:  # a merged blob: its newest original's time
            return int(written) / 1000
        modified = head.get("LastModified")
        return None if modified is None else float(modified.timestamp())

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        """Claim `name` as the successor of `after`, then complete the staged multipart upload as `name`,
        only if the name is free."""
        s3 = await self._s3()
        await self._claim(s3, name, after, staged)
        aborted = "did another process clean this prefix on start? it owns this chain now"
        if not await self._complete(s3, name, staged, aborted):
            raise BlobExistsError(f"{self.location(name)} already exists: another writer owns this chain")
        return staged.size

    async def commit_merged(self, name: str, staged: StagedBlob) -> bool:
        """Complete the staged upload as `name` if the name is free (no claim: the chain's end is not moved)."""
        aborted = "did a writer start on this chain meanwhile? compaction respects the chain's lease"
        return await self._complete(await self._s3(), name, staged, aborted)

    async def _complete(self, s3: Any, name: str, staged: StagedBlob, aborted: str) -> bool:
        """Complete the staged upload as `name` unless the name is taken: True when it is ours now, False (the upload
        aborted) when someone else's object has the name. DestinationError (naming `aborted`'s likely cause) when the
        upload was aborted by someone else."""
        key = self._prefix + name
        try:
            await self._call(
                f"complete upload {self.location(name)}",
                lambda: s3.complete_multipart_upload(
                    Bucket=self._bucket,
                    Key=key,
                    UploadId=staged.ref,
                    MultipartUpload={"Parts": [{"PartNumber": n, "ETag": etag} for n, etag in staged.parts]},
                    IfNoneMatch="*",
                ),
            )
        except (PreconditionFailed, NoSuchUpload) as exc:
            # The name is taken, or the upload is gone. It is ours only if this process staged exactly
            # these bytes: an attempt whose answer was lost (the upload completed, so it is gone), or
            # one the HTTP client resent on its own after a dropped connection. Anything else,
            # identical bytes included, is another writer's.
            if await self._holds_our_bytes(s3, key, staged.sha256):
                return True
            if isinstance(exc, NoSuchUpload):
                raise DestinationError(
                    f"{self.location(name)}: the staged upload was aborted before it could be completed ({aborted})"
                ) from None
            await self.discard_staged(staged, key)
            return False
        return True

    async def _claim(self, s3: Any, name: str, after: str | None, staged: StagedBlob) -> None:
        claim = self._claims + claim_name(after)
        where = f"s3://{self._bucket}/{claim}"
        try:
            await self._call(
                f"claim {where}",
                lambda: s3.put_object(
                    Bucket=self._bucket,
                    Key=claim,
                    Body=name.encode(),
                    IfNoneMatch="*",
                    Metadata={WRITER_METADATA: self._connection.writer_id},
                    **self._connection.settings.object_options(),
                ),
            )
            return
        except PreconditionFailed:
            pass
        claimed = await self._read_claim(s3, claim)
        if claimed == name:
            return  # this writer's own claim whose answer was lost, or an interrupted writer's it continues
        await self.discard_staged(staged, self._prefix + name)
        raise BlobExistsError(
            f"{self.location(name)}: another writer claimed {claimed} as the blob after "
            f"{after or 'the start of the chain'} ({where}): it owns this chain"
        )

    async def _read_claim(self, s3: Any, claim: str) -> str:
        where = f"s3://{self._bucket}/{claim}"

        async def read() -> bytes:
            response = await s3.get_object(Bucket=self._bucket, Key=claim)
            async with response["Body"] as body:
                return bytes(await body.read())

        return (await self._call(f"read claim {where}", read)).decode(errors="replace")

    async def interrupted_commit(self, after: str | None) -> str | None:
        """The claim of the blob after `after`, if a writer made it; found with one LIST (claims sort by
        offset, so the first claim after `after`'s own is the only candidate)."""
        s3 = await self._s3()
        params: dict[str, Any] = {"Bucket": self._bucket, "Prefix": self._claims, "MaxKeys": 1}
        expected = claim_name(after)
        if after is not None:
            params["StartAfter"] = f"{self._claims}{int(expected) - 1:020d}"
        self.list_calls += 1
        response = await self._call(f"list s3://{self._bucket}/{self._claims}", lambda: s3.list_objects_v2(**params))
        found = [entry["Key"][len(self._claims) :] for entry in response.get("Contents", [])]
        if not found or (found[0] == START_CLAIM and after is not None):
            return None  # nothing claimed past the end (the start claim of a chain that has blobs is history)
        if found[0] == expected:
            return await self._read_claim(s3, self._claims + expected)
        files = [f"s3://{self._bucket}/{self._claims}{found[0]}"] + ([self.location(after)] if after else [])
        raise CorruptChainError(ChainProblem.STALE_CLAIM, files)

    async def discard_staged(self, staged: StagedBlob, key: str | None = None) -> None:
        """Abort a staged upload (best effort: unfinished uploads are also aborted on start)."""
        s3 = await self._s3()
        with contextlib.suppress(Exception), anyio.fail_after(self._connection.settings.request_timeout_s):
            await s3.abort_multipart_upload(
                Bucket=self._bucket,
                Key=key or self._prefix + blob_name(staged.first, staged.last),
                UploadId=staged.ref,
            )

    def staging(self, retry: RetryPolicy, blob_format: BlobFormat) -> S3Staging:
        return S3Staging(self._connection.settings, self._prefix, self._connection.writer_id, retry, blob_format)

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

    async def remove_redundant(self, names: Sequence[str]) -> None:
        s3 = await self._s3()
        for start in range(0, len(names), 1000):
            batch = [{"Key": self._prefix + name} for name in names[start : start + 1000]]
            objects: dict[str, Any] = {"Objects": batch, "Quiet": True}
            answer = await self._call(
                f"delete {len(batch)} blobs under {self.location('')}",
                _deleting(s3, self._bucket, objects),
            )
            errors = answer.get("Errors") or []
            if errors:  # Quiet: only the keys that could not be deleted come back
                first = errors[0]
                raise DestinationError(
                    f"s3://{self._bucket}/{first.get('Key')}: not deleted ({first.get('Code')}: {first.get('Message')})"
                )

    async def forget_before(self, first_kept: int) -> int:
        """Delete the claims of blobs before `first_kept` (and the empty chain's `start` claim): history no commit
        reads again (`interrupted_commit` looks past the chain's end only). One LIST per 1 000 claims, one
        DeleteObjects per page; a failed request ends it (what it deleted stays deleted: the retry lists again)."""
        s3, below = await self._s3(), f"{self._claims}{first_kept:020d}"
        removed = 0
        listing = s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=self._claims)
        async for page in self._connection.pages(f"list s3://{self._bucket}/{self._claims}", listing):
            keys = [entry["Key"] for entry in page.get("Contents", [])]
            history = [key for key in keys if key < below or key == self._claims + START_CLAIM]
            if history:
                objects = {"Objects": [{"Key": key} for key in history], "Quiet": True}
                await self._call(
                    f"delete claims s3://{self._bucket}/{self._claims}",
                    _deleting(s3, self._bucket, objects),
                )
                removed += len(history)
        return removed

    async def abort_incomplete_uploads(self) -> list[str]:
        """Abort multipart uploads an interrupted commit left under this prefix; returns their keys. One LIST per
        1 000 uploads."""
        s3 = await self._s3()
        listing = s3.get_paginator("list_multipart_uploads").paginate(Bucket=self._bucket, Prefix=self._prefix)
        aborted = []
        try:
            async for page in self._connection.pages(f"list uploads {self.location('')}", listing):
                for upload in page.get("Uploads", []):
                    await self._call(
                        f"abort upload s3://{self._bucket}/{upload['Key']}",
                        lambda upload=upload: s3.abort_multipart_upload(  # type: ignore[misc]
                            Bucket=self._bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                        ),
                    )
                    aborted.append(upload["Key"])
        except NotImplementedByStore:
            return []  # a store without multipart listing has no leftovers we could see or abort
        return aborted

    async def _call(self, what: str, operation: Callable[[], Awaitable[T]]) -> T:
        return await self._connection.call(what, operation)


def _deleting(s3: Any, bucket: str, objects: dict[str, Any]) -> Any:
    return lambda: s3.delete_objects(Bucket=bucket, Delete=objects)
