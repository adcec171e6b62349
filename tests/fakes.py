"""In-memory stand-ins for the source, the blob store and metrics, for fast invariant tests."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import pyarrow as pa
from aiokafka import TopicPartition
from prometheus_client import CollectorRegistry

from core.file_statistics import FileStatistics
from core.records import KAFKA_SCHEMA
from kafka_clients.clients import KafkaClients, KafkaRecord
from kafka_clients.schema_registry import RegistryRequestError, Schema, SubjectVersion
from sinks.base import DestinationError
from sinks.blob.chain import BlobExistsError, BlobStore, ListedBlob, blob_name, is_temp_name, temp_name
from sinks.blob.staging import BlobFormat, StagedBlob
from sinks.retry import TransientDestinationError
from sinks.s3.staging import S3Settings
from sinks.schemas.mapping import same_schema
from sinks.tables.iceberg import TableError
from sinks.tables.positions import TableFile, TablePositions, walk_positions
from sinks.tables.rewrites import FileChange, plan_rewrite
from sinks.write_target import BlobLimits, RecordSource, TaskRange, WriteTarget, Written, check_coverage
from source.offsets import PolledOffsets, Sighting, SourceOffsets
from source.outages import ClusterReachability
from source.range_reader import SharedConsumers, SourcePartition
from telemetry.metrics import MetricFamilies, MirrorMetrics
from workers.flush_planner import PlannedTask


@dataclass
class FakeRecord:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    timestamp_ms: int = 1_700_000_000_000
    timestamp_type: int = 1  # librdkafka's numbering: 1 CreateTime, 2 LogAppendTime


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


class FakeKafkaError:
    def __init__(self, code: int, text: str = "") -> None:
        self._code, self._text = code, text

    def code(self) -> int:
        return self._code

    def fatal(self) -> bool:
        return False

    def str(self) -> str:
        return self._text or f"error {self._code}"


class FakeMessage:
    """The parts of confluent_kafka.Message a task reads."""

    def __init__(
        self,
        record: FakeRecord | None = None,
        error: FakeKafkaError | None = None,
        where: tuple[str | None, int | None] = ("t", 0),
    ) -> None:
        self._record, self._error = record, error
        self._where = where

    def topic(self) -> str | None:
        return self._where[0]

    def partition(self) -> int | None:
        return self._where[1]

    def error(self) -> FakeKafkaError | None:
        return self._error

    def offset(self) -> int:
        return -1 if self._record is None else self._record.offset

    def key(self) -> bytes | None:
        return None if self._record is None else self._record.key

    def value(self) -> bytes | None:
        return None if self._record is None else self._record.value

    def timestamp(self) -> tuple[int, int]:
        return (1, 0) if self._record is None else (self._record.timestamp_type, self._record.timestamp_ms)

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return None if self._record is None or not self._record.headers else list(self._record.headers)


class FakeConsumer:
    """A librdkafka consumer over a FakePartitionSource: fetches `batch` records per call, moves its
    position past holes like a read_committed consumer, and reports deleted offsets as an error."""

    def __init__(self, source: FakePartitionSource, batch: int = 64) -> None:
        self._source = source
        self._batch = batch
        self.position_at = -1001
        self.closed = False

    def assign(self, partitions: list[Any]) -> None:
        self.position_at = partitions[0].offset

    def unassign(self) -> None:
        self.position_at = -1001

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        source = self._source
        if self.position_at < source.log_start:
            return [FakeMessage(error=FakeKafkaError(-140, "offset out of range"))]
        found: list[FakeMessage] = []
        while self.position_at < source.end and len(found) < min(num_messages, self._batch):
            record = source.records.get(self.position_at)
            if record is not None:
                found.append(FakeMessage(record))
            self.position_at += 1
        return found

    def position(self, partitions: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(p.topic, p.partition, self.position_at) for p in partitions]

    def get_watermark_offsets(self, partition: Any, timeout: float) -> tuple[int, int]:
        return self._source.log_start, self._source.end

    def close(self) -> None:
        self.closed = True


class FakeClusterConsumer:
    """A librdkafka consumer over several FakePartitionSources of one cluster: each consume call takes up to
    `batch` records of every assigned, unpaused partition in turn (messages of different partitions interleave,
    as fetch responses do); positions move past holes; deleted offsets are the partition's own error. As in
    librdkafka, a paused partition stays paused through unassign and assign until resumed."""

    def __init__(
        self,
        sources: Sequence[FakePartitionSource],
        batch: int = 16,
        silent: Iterable[tuple[str, int]] = (),
        waited: Callable[[float], None] | None = None,
    ) -> None:
        """`silent`: partitions whose broker sends nothing (killed, cut off); `waited(seconds)` is told how long
        each consume call waited (for a fake clock)."""
        self._sources = {(s.topic, s.partition): s for s in sources}
        self._batch = batch
        self.silent = set(silent)
        self._waited = waited
        self.positions: dict[tuple[str, int], int] = {}
        self.paused: set[tuple[str, int]] = set()
        self.assignments = 0
        self.closed = False

    def assign(self, partitions: list[Any]) -> None:
        self.assignments += 1
        self.positions = {(p.topic, p.partition): p.offset for p in partitions}  # paused ones stay paused

    def unassign(self) -> None:
        self.positions = {}

    def pause(self, partitions: list[Any]) -> None:
        self.paused |= {(p.topic, p.partition) for p in partitions}

    def resume(self, partitions: list[Any]) -> None:
        self.paused -= {(p.topic, p.partition) for p in partitions}

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        found: list[FakeMessage] = []
        for key, at in list(self.positions.items()):
            if key in self.paused or key in self.silent:
                continue
            source = self._sources[key]
            if at < source.log_start:
                found.append(FakeMessage(error=FakeKafkaError(-140, "offset out of range"), where=key))
                continue
            taken = 0
            while at < source.end and taken < self._batch and len(found) < num_messages:
                record = source.records.get(at)
                if record is not None:
                    found.append(FakeMessage(record, where=key))
                    taken += 1
                at += 1
            self.positions[key] = at
        if not found and self._waited is not None:
            self._waited(timeout)  # librdkafka waits out its timeout when nothing comes
        return found

    def position(self, partitions: list[Any]) -> list[Any]:
        from confluent_kafka import TopicPartition

        return [TopicPartition(p.topic, p.partition, self.positions[(p.topic, p.partition)]) for p in partitions]

    def get_watermark_offsets(self, partition: Any, timeout: float) -> tuple[int, int]:
        source = self._sources[(partition.topic, partition.partition)]
        return source.log_start, source.end

    def close(self) -> None:
        self.closed = True


class FakeClock:
    """A clock that moves only when the test says (core.clock.Clock): sleepers wake once their time has come.

    `run_until` advances it in small steps, letting every task run between two steps, so timers fire in the
    order and at the moments they would in real time, without the test waiting for them."""

    EPOCH = 1_700_000_000.0  # the wall clock's reading at monotonic 0

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, anyio.Event]] = []

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.EPOCH + self.now

    async def sleep(self, seconds: float) -> None:
        woken = anyio.Event()
        self._sleepers.append((self.now + max(0.0, seconds), woken))
        self._wake()
        await woken.wait()

    async def wait_for(self, event: anyio.Event, timeout_s: float) -> bool:
        """The event or this clock's timeout: a sleeping task cancels the wait (the event loop's own deadlines run
        on real time)."""
        if event.is_set():
            return True
        async with anyio.create_task_group() as waiting:

            async def time_out() -> None:
                await self.sleep(timeout_s)
                waiting.cancel_scope.cancel()

            waiting.start_soon(time_out)
            await event.wait()
            waiting.cancel_scope.cancel()
        return event.is_set()

    def sleeping(self) -> int:
        """How many tasks wait on this clock now."""
        return len(self._sleepers)

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self._wake()

    def _wake(self) -> None:
        due = [(at, event) for at, event in self._sleepers if at <= self.now + 1e-9]
        self._sleepers = [sleeper for sleeper in self._sleepers if sleeper not in due]
        for _, event in due:
            event.set()

    async def run_until(self, condition: Callable[[], bool], step_s: float = 0.005, limit_s: float = 60.0) -> None:
        """Advance by `step_s` at a time, once every task waits again, until `condition()` holds."""
        began = self.now
        await _settle()
        while not condition():
            assert self.now - began < limit_s, f"still waiting after {limit_s}s of fake time"
            self.advance(step_s)
            await _settle()

    async def run_for(self, seconds: float, step_s: float = 0.005) -> None:
        end = self.now + seconds
        await self.run_until(lambda: self.now >= end - 1e-9, step_s, limit_s=seconds + step_s)


async def _settle() -> None:
    """Let every other task run until each waits for something: anyio.wait_all_tasks_blocked, without the
    0.1 s of real time it sleeps whenever a task is still running (a fake clock steps thousands of times)."""
    this = asyncio.current_task()
    for _ in range(100_000):
        await asyncio.sleep(0)
        tasks = [task for task in asyncio.all_tasks() if task is not this]
        # What asyncio itself records about a waiting task (anyio's own check reads the same).
        if all(task._fut_waiter is not None and not task._fut_waiter.done() for task in tasks):  # type: ignore[attr-defined]
            return
    raise AssertionError("the tasks never settled: one of them never waits")


class FakePartitionSource:
    """A partition as a dict offset -> record; missing offsets inside [log_start, end) are holes.


    and stages blobs with the real `stage_blobs`, or returns the records."""

    def __init__(self, topic: str = "t", partition: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.records: dict[int, FakeRecord] = {}
        self.log_start = 0
        self.end = 0
        self.high_watermark: int | None = None
        self.jobs: list[list[tuple[int, int, int]]] = []  # per job: (first, read_from, end) per task
        self.job_delay = 0.0
        self.clock: FakeClock | None = None  # job_delay passes on it when set
        self.cores = 2
        self.fail_check: Exception | None = None
        self.fail_runs: list[Exception] = []  # raised by the next runs, one each, before anything is read
        self.cancelled = False
        self._watchers: list[Callable[[], None]] = []
        self._seen: list[Sighting] = []
        self.reachability = ClusterReachability("fake:9092", lambda: self.clock.now if self.clock else time.monotonic())

    def _poll_saw(self) -> None:
        """A poll at this moment: what it showed, as the estate poll records it."""
        now = self.clock.now if self.clock is not None else time.monotonic()
        self._seen.append((now, now, self.end))

    def _moved(self) -> None:
        """The estate poll sees every change at once: the end as it was until now, then the watchers woken."""
        for changed in list(self._watchers):
            changed()

    def append(self, count: int, *, holes_every: int = 0) -> None:
        if self._watchers:
            self._poll_saw()
        self._append(count, holes_every)
        self._moved()

    def _append(self, count: int, holes_every: int) -> None:
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
        self._moved()

    async def check(self) -> None:
        if self.fail_check is not None:
            raise self.fail_check

    async def offsets(self) -> SourceOffsets:
        hw = self.end if self.high_watermark is None else self.high_watermark
        return SourceOffsets(log_start=self.log_start, end=self.end, high_watermark=hw)

    def wake_at(self, end: int | None) -> None:
        return None  # the fake wakes its watchers at every change: woken early is always allowed

    def watch(self, changed: Callable[[], None]) -> Callable[[], None]:
        self._watchers.append(changed)
        return lambda: self._watchers.remove(changed)

    async def polled(self) -> PolledOffsets:
        self._poll_saw()
        seen, self._seen = tuple(self._seen), []
        return PolledOffsets(await self.offsets(), seen, seen[-1][1])

    async def offset_for_time(self, timestamp_ms: int) -> int | None:
        later = [o for o, r in self.records.items() if r.timestamp_ms >= timestamp_ms]
        return min(later) if later else None

    async def parallelism(self) -> int:
        return self.cores

    def partition_spec(self) -> SourcePartition:
        return SourcePartition("fake:9092", self.topic, self.partition, "read_committed", "g", 5.0)

    def reader(self, batch: int = 64) -> RecordSource:
        """This partition as a task reads it: the real shared-consumer reader over a FakeConsumer."""
        return self.partition_spec().open(SharedConsumers(lambda _: FakeConsumer(self, batch)))

    async def run(
        self,
        tasks: Sequence[PlannedTask],
        limits: BlobLimits,
        target: WriteTarget[Any],
        bytes_per_offset: float | None = None,
    ) -> list[Any]:
        assert all(t.end <= self.end for t in tasks), "job past the end"
        assert not target.ordered, "ordered (Kafka) targets: tests/test_kafka_produce.py"
        self.jobs.append([(t.first, t.read_from, t.end) for t in tasks])
        if self.job_delay:
            await (self.clock.sleep(self.job_delay) if self.clock is not None else anyio.sleep(self.job_delay))
        if self.fail_runs:
            raise self.fail_runs.pop(0)
        items: list[Written] = []
        for task in tasks:
            task_range = TaskRange(task.first, task.read_from, task.end)
            written = target.write(self.reader(), task_range, limits)
            check_coverage(f"{self.topic}-{self.partition}", task_range, written)
            items.extend(written)
        return items

    def cancel(self) -> None:
        self.cancelled = True


class MemoryStaging:
    """Stages blobs of an InMemoryStore under temporary names, as a task would on a filesystem."""

    def __init__(self, store: InMemoryStore, blob_format: BlobFormat | None = None) -> None:
        self.store = store
        self.blob_format = blob_format or BlobFormat()
        self.stages_at_once = 1

    def open(self, first: int) -> MemoryBlobOutput:
        return MemoryBlobOutput(self.store, temp_name(f"{first:020d}-staged.parquet", uuid.uuid4().hex))


class MemoryBlobOutput:
    def __init__(self, store: InMemoryStore, name: str) -> None:
        self.store, self.name = store, name
        self.file = pa.BufferOutputStream()

    def finish(
        self, first: int, last: int, records: int, record_bytes: int, written_ms: int | None = None
    ) -> StagedBlob:
        data = self.file.getvalue().to_pybytes()
        self.store.blobs[self.name] = data
        if written_ms is not None:
            self.store.written_at[self.name] = written_ms / 1000
        return StagedBlob(
            first=first, last=last, records=records, record_bytes=record_bytes, size=len(data), ref=self.name
        )

    def abandon(self) -> None:
        self.store.blobs.pop(self.name, None)


def stage_bytes(store: InMemoryStore, data: bytes, first: int = 0, last: int = 0) -> StagedBlob:
    """Stage raw bytes in an InMemoryStore (for chain and store tests that do not care about Parquet)."""
    name = temp_name(f"{first:020d}-staged.parquet", uuid.uuid4().hex)
    store.blobs[name] = data
    return StagedBlob(first=first, last=last, records=0, record_bytes=0, size=len(data), ref=name)


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
        # after -> the blob an interrupted writer claimed as its successor (None: the first blob)
        self.claims: dict[str | None, str] = {}

    def twin(self) -> InMemoryStore:
        """Another writer on the same blobs (a second process on the same chain)."""
        other = InMemoryStore()
        other.blobs, other.written_at, other.claims = self.blobs, self.written_at, self.claims
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

    async def list_details(self, start_after: str | None, max_keys: int) -> tuple[list[ListedBlob], bool]:
        names, more = await self.list_page(start_after, max_keys)
        return [ListedBlob(n, len(self.blobs[n]), self.written_at.get(n, 0.0)) for n in names], more

    async def forget_before(self, first_kept: int) -> int:
        return 0  # keeps nothing about a blob but the blob

    async def commit_merged(self, name: str, staged: StagedBlob) -> bool:
        if name in self.blobs:
            self.blobs.pop(staged.ref, None)
            return False
        self.blobs[name] = self.blobs.pop(staged.ref)
        self.written_at[name] = self.written_at.pop(staged.ref, time.time())
        return True

    async def commit_staged(self, name: str, staged: StagedBlob, after: str | None = None) -> int:
        data = self.blobs.get(staged.ref)
        if name in self.blobs:
            if name in self.unsure and data is None:
                return staged.size  # our earlier attempt moved it; its answer was lost
            raise BlobExistsError(f"{name} exists")
        if data is None:
            raise DestinationError(f"staged {staged.ref} is gone")
        self.blobs[name] = self.blobs.pop(staged.ref)
        self.written_at[name] = time.time()
        if self.lose_answers:
            self.lose_answers -= 1
            self.unsure.add(name)
            raise TransientDestinationError("connection reset after the commit")
        return staged.size

    async def discard_staged(self, staged: StagedBlob) -> None:
        await self.remove(staged.ref)

    async def interrupted_commit(self, after: str | None) -> str | None:
        return self.claims.get(after)

    async def close(self) -> None:
        return None

    async def remove(self, name: str) -> None:
        self.removed.append(name)
        self.blobs.pop(name, None)

    async def remove_redundant(self, names: Sequence[str]) -> None:
        for name in names:
            await self.remove(name)


def fresh_metrics(topic: str = "t", partition: int = 0) -> tuple[MetricFamilies, MirrorMetrics]:
    families = MetricFamilies(CollectorRegistry())
    return families, MirrorMetrics.for_mirror(families, "c", topic, partition, topic)


def sample(families: MetricFamilies, name: str, topic: str = "t", partition: int = 0) -> float:
    """The partition's series of `name`, or its topic's where the family is per topic (a total over partitions)."""
    labels = {"source_cluster": "c", "topic": topic, "destination": topic}
    value = families.registry.get_sample_value(name, {**labels, "partition": str(partition)})
    if value is None:
        value = families.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def moto_settings(endpoint: str, bucket: str, part_size: int = 8 * 1024 * 1024, **options: Any) -> S3Settings:
    """The settings of a bucket on the tests' moto server (any key and secret do)."""
    return S3Settings(
        bucket=bucket,
        region="us-east-1",
        endpoint=endpoint,
        path_style=True,
        access_key_id="k",
        secret_access_key="s",
        session_token=None,
        part_size=part_size,
        request_timeout_s=10,
        **options,
    )


class MemoryRegistry:
    """A schema registry with the Confluent API's rules (an ID per distinct schema, registry-wide; versions per
    subject, appended; registering a schema a subject holds returns its version). The real one is e2e's."""

    def __init__(self, url: str, first_id: int = 1) -> None:
        self.url = url
        self.ids: dict[Schema, int] = {}
        self.subjects: dict[str, list[Schema]] = {}
        self.next_id = first_id
        self.requests = 0

    def schema(self, schema_id: int) -> Schema:
        self.requests += 1
        for schema, found in self.ids.items():
            if found == schema_id:
                return schema
        raise RegistryRequestError(self.url, f"GET /schemas/ids/{schema_id}", 404, 40403, "Schema not found")

    def subjects_of(self, schema_id: int) -> list[tuple[str, int]]:
        self.requests += 1
        return [
            (subject, index + 1)
            for subject, versions in self.subjects.items()
            for index, schema in enumerate(versions)
            if self.ids[schema] == schema_id
        ]

    def versions(self, subject: str) -> list[int]:
        self.requests += 1
        return list(range(1, len(self.subjects.get(subject, [])) + 1))

    def version(self, subject: str, version: int) -> SubjectVersion:
        self.requests += 1
        schema = self.subjects[subject][version - 1]
        return SubjectVersion(subject, version, self.ids[schema], schema)

    def lookup(self, subject: str, schema: Schema) -> SubjectVersion | None:
        self.requests += 1
        for index, held in enumerate(self.subjects.get(subject, [])):
            if same_schema(held, schema):
                return SubjectVersion(subject, index + 1, self.ids[held], held)
        return None

    def register(self, subject: str, schema: Schema) -> int:
        self.requests += 1
        found = self.lookup(subject, schema)
        if found is not None:
            return found.schema_id
        if schema not in self.ids:
            self.ids[schema] = self.next_id
            self.next_id += 1
        self.subjects.setdefault(subject, []).append(schema)
        return self.ids[schema]


class MemoryGroupOffsets:
    """A cluster's committed group offsets with their metadata, as `sinks.kafka.leases.GroupOffsets` (the admin
    client) sees them: commits overwrite, a deleted group has none. Each call yields once, so concurrent callers
    interleave as they would over the network."""

    def __init__(self) -> None:
        self.groups: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        self.missing_topics: set[str] = set()  # commits on their partitions are refused, as a broker does

    async def group_offsets_with_metadata(
        self, group: str, partitions: Sequence[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], tuple[int, str]]:
        await anyio.sleep(0)
        found = self.groups.get(group, {})
        return dict(found) if partitions is None else {tp: found[tp] for tp in partitions if tp in found}

    async def commit_group_offsets_with_metadata(
        self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]
    ) -> dict[tuple[str, int], str]:
        await anyio.sleep(0)
        refused = {tp: "UNKNOWN_TOPIC_OR_PART" for tp in offsets if tp[0] in self.missing_topics}
        self.groups.setdefault(group, {}).update({tp: v for tp, v in offsets.items() if tp not in refused})
        return refused

    async def delete_group(self, group: str) -> None:
        await anyio.sleep(0)
        self.groups.pop(group, None)


# ----------------------------------------------------------------------------------------------- archive tables


class MemoryArchive:
    """The chains of an archive, in memory (what the table keeper and table-sync list and name)."""

    def __init__(self) -> None:
        self.stores: dict[tuple[str, int], InMemoryStore] = {}

    def add(self, name: str, partition: int, first: int, last: int) -> None:
        self.stores.setdefault((name, partition), InMemoryStore()).blobs[blob_name(first, last)] = b"x"

    def chain_store(self, name: str, partition: int) -> BlobStore:
        return self.stores.setdefault((name, partition), InMemoryStore())

    def file_uri(self, name: str, partition: int, blob: str) -> str:
        return f"mem://{name}/{partition}/{blob}"


class MemoryTable:
    """A table that records its files and its commits' positions; `fail_next`: what its next calls raise."""

    def __init__(self, identifier: str) -> None:
        self.identifier = identifier
        self.files: list[str] = []
        self.statistics: dict[str, FileStatistics | None] = {}  # file -> the statistics it came with
        self.summaries: list[dict[str, int]] = []  # oldest first
        self.fail_next: list[Exception] = []
        self.rewrites: list[str] = []  # each rewrite commit's reason, oldest first

    def positions(self, chains: Iterable[str]) -> TablePositions:
        if self.fail_next:
            raise self.fail_next.pop(0)
        found = [{f"mirror-v3.next-offset.{c}": str(o) for c, o in s.items()} for s in reversed(self.summaries)]
        return walk_positions(found, chains, history_complete=True)

    def commit(self, files: list[TableFile], positions: dict[str, int], based_on: dict[str, int]) -> None:
        if self.fail_next:
            raise self.fail_next.pop(0)
        self.files += [file.uri for file in files]
        self.statistics |= {file.uri: file.statistics for file in files}
        self.summaries.append(dict(positions))

    def rewrite(self, changes: list[FileChange], reason: str) -> int:
        """As a real table's (`sinks.tables.rewrites`): one commit of what it holds, recorded in `rewrites`."""
        if self.fail_next:
            raise self.fail_next.pop(0)
        plan = plan_rewrite(changes, set(self.files), key=lambda file: file.uri)
        if plan.partial is not None:
            raise TableError(self.identifier, "rewrite", f"it holds part of a run, not {plan.partial}")
        if plan.removed:
            self.files = [f for f in self.files if f not in plan.removed] + [file.uri for file in plan.added]
            self.rewrites.append(reason)
        return len(plan.removed)


class FakeClients(KafkaClients):
    """A KafkaClients whose reads a test answers by overriding `watermarks` and `records` (per partition): the
    reads of `one_partition` go through them, one call each."""

    def __init__(self) -> None:
        super().__init__("fake:9092", {}, 1_000)

    def one_partition(
        self, tp: TopicPartition, isolation: str
    ) -> contextlib.AbstractAsyncContextManager[_ReadsThrough]:
        return _reads_through(self, tp, isolation)


class _ReadsThrough:
    def __init__(self, clients: KafkaClients, tp: TopicPartition, isolation: str) -> None:
        self._clients, self._tp, self._isolation = clients, tp, isolation

    async def watermarks(self) -> tuple[int, int]:
        return await self._clients.watermarks(self._tp, self._isolation)

    async def records(self, first: int, end: int) -> list[KafkaRecord]:
        return await self._clients.records(self._tp, first, end, self._isolation)


@contextlib.asynccontextmanager
async def _reads_through(clients: KafkaClients, tp: TopicPartition, isolation: str) -> AsyncIterator[_ReadsThrough]:
    yield _ReadsThrough(clients, tp, isolation)
