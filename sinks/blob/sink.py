"""A Sink over a BlobChain: each staged blob a Spark task wrote is committed as the chain's next link."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from sinks.base import Committed, Inspection
from sinks.blob.chain import BlobChain, BlobStore
from sinks.blob.staging import BlobStaging, StagedBlob
from sinks.blob.writer import BlobTarget
from sinks.schemas.archive import SchemaArchive


class BlobSink:
    def __init__(
        self,
        store: BlobStore,
        description: str,
        staging: BlobStaging,
        take_lease: Callable[[], Awaitable[None]] | None = None,
        schemas: SchemaArchive | None = None,
    ) -> None:
        """`take_lease`: take this chain's lease (`sinks.leases`) before open() touches anything; None when
        nothing is written (status) or the caller took it. `schemas`: where the schemas of the records' IDs are
        kept (a mirror with `schemas`), each before the first blob that needs it is committed."""
        self._chain = BlobChain(store)
        self._take_lease = take_lease
        self._description = description
        self._schemas = schemas
        self._target = BlobTarget(staging, () if schemas is None else schemas.fields)

    @property
    def description(self) -> str:
        return self._description

    @property
    def chain(self) -> BlobChain:
        return self._chain

    def target(self) -> BlobTarget:
        return self._target

    async def open(self) -> int | None:
        if self._take_lease is not None:  # a live writer's staged blobs are cleaned by open(): never touch them
            await self._take_lease()
        return await self._chain.open()

    def claimed_range(self) -> tuple[int, int] | None:
        claimed = self._chain.claimed
        return None if claimed is None else (claimed.first, claimed.last)

    async def inspect(self, deep: bool = False) -> Inspection:
        tail = await self._chain.inspect_tail(deep)
        if tail is None:
            return Inspection(next_offset=None)
        return Inspection(next_offset=tail.last + 1, last_write=await self._chain.store.modified_at(tail.name))

    async def commit(self, item: StagedBlob) -> Committed:
        if self._schemas is not None and item.schema_ids:
            await self._schemas.keep(item.schema_ids)
        location, size = await self._chain.append(item)
        return Committed(location=location, bytes_written=size)

    async def discard(self, item: StagedBlob) -> None:
        await self._chain.store.discard_staged(item)

    async def close(self) -> None:
        await self._chain.store.close()
