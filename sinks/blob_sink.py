"""A Sink over a BlobChain: each committed chunk becomes one Parquet blob."""

from __future__ import annotations

import anyio.to_thread

from sinks.base import Chunk, Committed, Inspection
from sinks.blob_chain import BlobChain, BlobStore
from sinks.records import encode_parquet


class BlobSink:
    def __init__(self, store: BlobStore, description: str, compression: str, compression_level: int | None) -> None:
        self._chain = BlobChain(store)
        self._description = description
        self._compression = compression
        self._compression_level = compression_level

    @property
    def description(self) -> str:
        return self._description

    @property
    def chain(self) -> BlobChain:
        return self._chain

    async def open(self) -> int | None:
        return await self._chain.open()

    async def inspect(self, deep: bool = False) -> Inspection:
        tail = await self._chain.inspect_tail(deep)
        if tail is None:
            return Inspection(next_offset=None)
        return Inspection(next_offset=tail.last + 1, last_write=await self._chain.store.modified_at(tail.name))

    async def commit(self, chunk: Chunk) -> Committed:
        # Parquet encoding is CPU-bound: keep it off the event loop.
        data = await anyio.to_thread.run_sync(encode_parquet, chunk.records, self._compression, self._compression_level)
        location, size = await self._chain.append(chunk.first_offset, chunk.last_offset, data)
        return Committed(location=location, bytes_written=size)

    async def close(self) -> None:
        await self._chain.store.close()
