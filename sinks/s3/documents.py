"""An S3 archive's documents (`sinks.archive.documents`): objects under its prefix, each one PUT with
`If-None-Match: *` (a second write of the same moment is refused, and it says the same)."""

from __future__ import annotations

import contextlib
from typing import Any

from sinks.archive.documents import is_document
from sinks.s3.errors import PreconditionFailed
from sinks.s3.store import ConnectionUser, S3Connection


class S3Documents(ConnectionUser):
    def __init__(self, connection: S3Connection, prefix: str | None) -> None:
        super().__init__(connection)
        self._root = f"{prefix.strip('/')}/" if prefix else ""

    def _prefix(self, directory: str) -> str:
        return f"{self._root}{directory}/"

    def location(self, directory: str) -> str:
        return f"s3://{self._bucket}/{self._prefix(directory)}"

    async def _pages(self, directory: str, delimiter: bool) -> list[Any]:
        """Every page of the listing under `directory` (with `delimiter`: one level, as CommonPrefixes)."""
        s3, prefix = await self._s3(), self._prefix(directory)
        listing = s3.get_paginator("list_objects_v2").paginate(
            Bucket=self._bucket, Prefix=prefix, **({"Delimiter": "/"} if delimiter else {})
        )
        return [page async for page in self._connection.pages(f"list {self.location(directory)}", listing)]

    async def names(self, directory: str) -> list[str]:
        return [name for name in await self.listing(directory) if is_document(name)]

    async def listing(self, directory: str) -> list[str]:
        prefix = self._prefix(directory)
        pages = await self._pages(directory, delimiter=True)  # the files right in it, not those below
        return sorted(entry["Key"][len(prefix) :] for page in pages for entry in page.get("Contents", []))

    async def subdirectories(self, directory: str) -> list[str]:
        prefix = self._prefix(directory)
        pages = await self._pages(directory, delimiter=True)
        return sorted(e["Prefix"][len(prefix) :].rstrip("/") for page in pages for e in page.get("CommonPrefixes", []))

    async def read(self, directory: str, name: str) -> bytes:
        s3, key = await self._s3(), self._prefix(directory) + name

        async def read() -> bytes:
            response = await s3.get_object(Bucket=self._bucket, Key=key)
            async with response["Body"] as body:
                return bytes(await body.read())

        return await self._connection.call(f"read s3://{self._bucket}/{key}", read)

    async def add(self, directory: str, name: str, data: bytes) -> None:
        s3, key = await self._s3(), self._prefix(directory) + name
        options = self._connection.settings.short_lived_object_options()  # SSE, no cold storage class: read often
        with contextlib.suppress(PreconditionFailed):  # that moment's document exists: it says the same
            await self._connection.call(
                f"write s3://{self._bucket}/{key}",
                lambda: s3.put_object(Bucket=self._bucket, Key=key, Body=data, IfNoneMatch="*", **options),
            )

    async def remove(self, directory: str, name: str) -> None:
        s3, key = await self._s3(), self._prefix(directory) + name
        await self._connection.call(
            f"delete s3://{self._bucket}/{key}", lambda: s3.delete_object(Bucket=self._bucket, Key=key)
        )
