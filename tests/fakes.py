"""In-memory stand-ins for the source, the blob store and metrics, for fast invariant tests."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field

import anyio
import pyarrow as pa
from prometheus_client import CollectorRegistry

from sinks.blob_chain import BlobExistsError, is_temp_name
from sinks.records import KAFKA_SCHEMA
from sinks.retry import TransientDestinationError
from supervisor.metrics import MetricFamilies, MirrorMetrics
from supervisor.source import SourceOffsets


@dataclass
class FakeRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int = 1_700_000_000_000


def records_table(records: list[FakeRecord], topic: str = "t", partition: int = 0) -> pa.Table:
    return pa.table(
        {
            "key": [r.key for r in records],
            "value": [r.value for r in records],
            "topic": [topic] * len(records),
            "partition": [partition] * len(records),
            "offset": [r.offset for r in records],
            "timestamp": [dt.datetime.fromtimestamp(r.timestamp_ms / 1000, dt.UTC) for r in records],
            "timestampType": [0] * len(records),
            "headers": [[{"key": k, "value": v} for k, v in r.headers] for r in records],
        },
        schema=KAFKA_SCHEMA,
    )


class FakePartitionSource:
    """A partition as a dict offset -> record; missing offsets inside [log_start, end) are holes."""

    def __init__(self, topic: str = "t", partition: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.records: dict[int, FakeRecord] = {}
        self.log_start = 0
        self.end = 0
        self.high_watermark: int | None = None
        self.reads: list[tuple[int, int]] = []
        self.read_delay = 0.0
        self.fail_check: Exception | None = None

    def append(self, count: int, *, holes_every: int = 0) -> None:
        for _ in range(count):
            offset = self.end
            self.end += 1
            if holes_every and offset % holes_every == holes_every - 1:
                continue  # an offset with no record: a compaction or marker hole
            self.records[offset] = FakeRecord(offset, f"k{offset}".encode(), f"v{offset}".encode() * 3)

    def delete_before(self, offset: int) -> None:
        self.log_start = offset
        for o in [o for o in self.records if o < offset]:
            del self.records[o]

    async def check(self) -> None:
        if self.fail_check is not None:
            raise self.fail_check

    async def offsets(self) -> SourceOffsets:
        hw = self.end if self.high_watermark is None else self.high_watermark
        return SourceOffsets(log_start=self.log_start, end=self.end, high_watermark=hw)

    async def read(self, start: int, end: int, tasks: int = 1) -> pa.Table:
        assert start >= self.log_start, "read below log start"
        assert end <= self.end, "read past end"
        self.reads.append((start, end))
        if self.read_delay:
            await anyio.sleep(self.read_delay)
        return records_table(
            [self.records[o] for o in range(start, end) if o in self.records], self.topic, self.partition
        )

    def cancel_reads(self) -> None:
        pass


class InMemoryStore:
    """A BlobStore in a dict, behaving like a store that may ignore conditional creates."""

    checks_for_foreign_blobs = True

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.removed: list[str] = []
        self.list_calls = 0
        self.unsure: set[str] = set()  # names a failed put of this writer may have written
        self.lose_answers = 0  # the next puts land, then fail as if their answer was lost
        self.written_at: dict[str, float] = {}

    def twin(self) -> InMemoryStore:
        """Another writer on the same blobs (a second process on the same chain)."""
        other = InMemoryStore()
        other.blobs, other.written_at = self.blobs, self.written_at
        return other

    def location(self, name: str) -> str:
        return f"mem://{name}"

    async def list_page(self, start_after: str | None, max_keys: int) -> tuple[list[str], bool]:
        self.list_calls += 1
        names = sorted(n for n in self.blobs if not is_temp_name(n) and (start_after is None or n > start_after))
        return names[:max_keys], len(names) > max_keys

    async def clean_leftovers(self) -> list[str]:
        leftovers = [n for n in self.blobs if is_temp_name(n)]
        for name in leftovers:
            await self.remove(name)
        return leftovers

    async def modified_at(self, name: str) -> float | None:
        return self.written_at.get(name)

    async def put_if_absent(self, name: str, data: memoryview) -> int:
        if name in self.blobs:
            if name in self.unsure and self.blobs[name] == bytes(data):
                return len(data)
            raise BlobExistsError(f"{name} exists")
        self.blobs[name] = bytes(data)
        self.written_at[name] = time.time()
        if self.lose_answers:
            self.lose_answers -= 1
            self.unsure.add(name)
            raise TransientDestinationError("connection reset after the upload")
        return len(data)

    async def close(self) -> None:
        return None

    async def remove(self, name: str) -> None:
        self.removed.append(name)
        self.blobs.pop(name, None)


def fresh_metrics(topic: str = "t", partition: int = 0) -> tuple[MetricFamilies, MirrorMetrics]:
    families = MetricFamilies(CollectorRegistry())
    return families, MirrorMetrics.for_partition(families, topic, partition)


def sample(families: MetricFamilies, name: str, topic: str = "t", partition: int = 0) -> float:
    value = families.registry.get_sample_value(name, {"topic": topic, "partition": str(partition)})
    return 0.0 if value is None else value
