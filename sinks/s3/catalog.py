"""Which chains an S3 archive holds: the key segments and partitions mirror-v3 wrote under its prefix
(`<prefix>/<name>/<partition>/<blobs>`).

Blocking (run it in a thread): S3 ListObjectsV2 with a delimiter through botocore's paginator, one page (1 000
names) per request; a failed request lists again from the start under the archive's retry policy (listing is
idempotent). A name whose entries are not partition numbers (the claims directory `_claims`, anything else put
there) is passed over. Cost: one listing of the prefix and one per name.
"""

from __future__ import annotations

from sinks.retry import RetryPolicy, retry_transient_sync
from sinks.s3.errors import call_blocking
from sinks.s3.staging import S3Settings, blocking_client
from sinks.s3.store import CLAIMS_DIRECTORY


def s3_chains(settings: S3Settings, prefix: str | None, retry: RetryPolicy) -> dict[str, list[int]]:
    """{name: partitions} under an S3 archive's prefix."""
    root = f"{prefix.strip('/')}/" if prefix else ""
    found: dict[str, list[int]] = {}
    for name in _common_prefixes(settings, root, retry):
        if name == CLAIMS_DIRECTORY:
            continue
        partitions = sorted(int(p) for p in _common_prefixes(settings, f"{root}{name}/", retry) if p.isdigit())
        if partitions:
            found[name] = partitions
    return found


def _common_prefixes(settings: S3Settings, prefix: str, retry: RetryPolicy) -> list[str]:
    """The next segment of every key under `prefix` (its "directories"); a failed page lists again from the start."""
    client = blocking_client(settings)
    where = f"s3://{settings.bucket}/{prefix}"

    def listing() -> list[str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket, Prefix=prefix, Delimiter="/")
        return [entry["Prefix"][len(prefix) :].rstrip("/") for entry in pages.search("CommonPrefixes") if entry]

    what = f"list {where}"
    return retry_transient_sync(lambda: call_blocking(what, listing, settings.bucket), retry, what)
