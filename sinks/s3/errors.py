"""How S3 answers are classified, for the driver's store and the tasks' staging alike.

A failure that another attempt may cure (5xx, throttling, timeouts, connection resets) becomes a
`TransientDestinationError` for the retry layer; everything else a `DestinationError` naming the
operation; a failed condition (412) and a vanished upload get their own types, which the commit
resolves by looking at what is there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

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
from sinks.base import DestinationError
from sinks.retry import TransientDestinationError

T = TypeVar("T")
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


class PreconditionFailed(DestinationError):
    """HTTP 412: the conditional create found the name taken."""


class NoSuchUpload(DestinationError):
    """The multipart upload no longer exists (completed or aborted)."""


class NoSuchKey(DestinationError):
    """HTTP 404 on an object: it does not exist (or no longer)."""


class NotImplementedByStore(DestinationError):
    """The S3-compatible store lacks an optional API (HTTP 501)."""


def classify_client_error(exc: ClientError, what: str, bucket: str) -> DestinationError:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    message = error.get("Message") or code or str(status)
    if status == 412 or code == "PreconditionFailed":
        return PreconditionFailed(f"{what}: precondition failed")
    if code == "NoSuchUpload":
        return NoSuchUpload(f"{what}: no such upload")
    if code in {"NoSuchKey", "NotFound"} or (status == 404 and code in {"", "404"}):
        return NoSuchKey(f"{what}: no such key")
    if code == "NotImplemented" or status == 501:
        return NotImplementedByStore(f"{what}: not implemented by this store")
    if status >= 500 or status == 429 or code in _TRANSIENT_CODES:
        return TransientDestinationError(f"{what}: HTTP {status} {code}: {message}")
    if code == "NoSuchBucket":
        return DestinationError(f"{what}: bucket {bucket!r} does not exist")
    if status == 403 or code in {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
        return DestinationError(f"{what}: access denied ({code}: {message})")
    return DestinationError(f"{what}: HTTP {status} {code}: {message}")


def call_blocking(what: str, operation: Callable[[], T], bucket: str) -> T:
    """One blocking botocore request (inside a task), its failure classified like the driver's. (Blocking botocore
    never raises aiohttp's errors, so this module does not import aiohttp: each Spark Python daemon imports it,
    0.2 s of CPU at every command's first job, measured.)"""
    try:
        return operation()
    except ClientError as exc:
        raise classify_client_error(exc, what, bucket) from None
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise DestinationError(f"{what}: no usable S3 credentials ({exc})") from None
    except (BotoConnectionError, BotoHTTPClientError, OSError) as exc:
        raise TransientDestinationError(f"{what}: connection failed: {first_line(exc)}") from None
