"""What a Spark task does with its range for a blob destination, against a fake librdkafka consumer: exact ranges,
holes versus deleted offsets, and blob boundaries cut from the records themselves."""

from __future__ import annotations

import io

import pyarrow.parquet as pq
import pytest

from core.file_statistics import ColumnBounds, file_statistics
from core.records import KAFKA_SCHEMA
from core.schema_wire import with_schema_id
from sinks.blob.staging import StagedBlob
from sinks.blob.writer import stage_blobs
from sinks.write_target import BlobLimits, TaskRange
from source.range_reader import OffsetsDeletedError, SourceRangeError, consume_range
from tests.fakes import (
    FakeConsumer,
    FakeMessage,
    FakePartitionSource,
    FakeRecord,
    InMemoryStore,
    MemoryStaging,
    records_table,
)
from workers.range_job import task_failure

UNLIMITED = BlobLimits(max_bytes=10**12, max_offsets=10**12)


def stage(source: FakePartitionSource, task: TaskRange, limits: BlobLimits) -> tuple[list[StagedBlob], InMemoryStore]:
    store = InMemoryStore()
    return stage_blobs(source.reader(), task, limits, MemoryStaging(store)), store


def offsets_in(store: InMemoryStore, blob: StagedBlob) -> list[int]:
    table = pq.read_table(io.BytesIO(store.blobs[blob.ref]))
    assert table.schema.equals(KAFKA_SCHEMA, check_metadata=False)
    return list(table.column("offset").to_pylist())


def test_the_range_ends_on_the_position_past_trailing_holes() -> None:
    """Offsets 95..99 are an aborted transaction and its marker: no record is ever seen at end-1."""
    source = FakePartitionSource()
    source.append(95)
    source.end = 100
    consumer = FakeConsumer(source)
    read = [m.offset() for batch in consume_range(source.partition_spec(), 10, 100, consumer) for m in batch]
    assert read == list(range(10, 95))
    assert consumer.closed


def test_the_reader_never_asks_for_more_records_than_the_range_holds() -> None:
    """librdkafka's batch consume waits until it has what was asked for: asking for more than the range
    holds would make every small flush wait out the timeout."""
    source = FakePartitionSource()
    source.append(1_000)
    asked: list[int] = []

    class Recording(FakeConsumer):
        def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
            asked.append(num_messages)
            return super().consume(num_messages, timeout)

    batches = consume_range(source.partition_spec(), 990, 1_000, Recording(source))
    read = [message.offset() for batch in batches for message in batch]
    assert read == list(range(990, 1_000))
    assert asked == [10]


def test_holes_inside_the_range_are_legal_and_counted_by_the_blob() -> None:
    source = FakePartitionSource()
    source.append(100, holes_every=4)
    (blob,), store = stage(source, TaskRange(0, 0, 100), UNLIMITED)
    assert (blob.first, blob.last, blob.records) == (0, 99, 75)
    assert offsets_in(store, blob) == [o for o in range(100) if o % 4 != 3]


def test_deleted_offsets_are_an_error_naming_them() -> None:
    source = FakePartitionSource()
    source.append(100)
    source.delete_before(40)
    with pytest.raises(OffsetsDeletedError) as caught:
        stage(source, TaskRange(20, 20, 100), UNLIMITED)
    assert (caught.value.position, caught.value.log_start) == (20, 40)


def test_lost_offsets_being_skipped_stay_inside_the_first_blob() -> None:
    source = FakePartitionSource()
    source.append(100)
    source.delete_before(40)
    (blob,), store = stage(source, TaskRange(20, 40, 100), UNLIMITED)
    assert (blob.first, blob.last, blob.records) == (20, 99, 60)
    assert offsets_in(store, blob)[0] == 40


def test_offsets_going_back_fail_the_read() -> None:
    source = FakePartitionSource()
    source.append(10)

    class Rewinding(FakeConsumer):
        def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
            messages = super().consume(num_messages, timeout)
            self.position_at = 3 if self.position_at == 10 else self.position_at
            return messages

    with pytest.raises(SourceRangeError) as caught:
        list(consume_range(source.partition_spec(), 0, 20, Rewinding(source, batch=10)))
    assert (caught.value.source, caught.value.offset) == ("t-0", 3)


def test_a_partition_that_never_reaches_the_end_stalls_into_an_error() -> None:
    source = FakePartitionSource()
    source.append(5)
    spec = source.partition_spec()
    spec = type(spec)(**{**spec.__dict__, "stall_timeout_s": 0.2})
    with pytest.raises(SourceRangeError) as caught:
        list(consume_range(spec, 0, 10, FakeConsumer(source)))
    assert (caught.value.source, caught.value.offset) == ("t-0", 5)
    assert caught.value.problem.startswith("no progress for 0.2s at offset 5 while reading up to 9")


def test_blobs_are_cut_at_max_bytes_and_an_oversized_record_is_a_blob_of_its_own() -> None:
    source = FakePartitionSource()
    for offset in range(60):
        size = 5_000 if offset == 30 else 100
        source.records[offset] = FakeRecord(offset, None, bytes(size))
    source.end = 60
    blobs, store = stage(source, TaskRange(0, 0, 60), BlobLimits(max_bytes=1_000, max_offsets=10**9))
    assert [(b.first, b.last) for b in blobs][:4] == [(0, 9), (10, 19), (20, 29), (30, 30)]
    assert all(b.record_bytes <= 1_000 or b.records == 1 for b in blobs)
    assert blobs[-1].last == 59 and [o for b in blobs for o in offsets_in(store, b)] == list(range(60))


def test_blobs_span_at_most_max_offsets_even_across_holes() -> None:
    source = FakePartitionSource()
    source.append(10)
    source.end = 40  # 30 offsets of holes, then one record
    source.records[40] = FakeRecord(40, b"k", b"v")
    source.end = 41
    blobs, _ = stage(source, TaskRange(0, 0, 41), BlobLimits(max_bytes=10**9, max_offsets=16))
    assert [(b.first, b.last, b.records) for b in blobs] == [(0, 15, 10), (16, 31, 0), (32, 40, 1)]


def test_an_empty_range_is_one_empty_blob() -> None:
    source = FakePartitionSource()
    source.end = 10
    source.delete_before(10)
    (blob,), store = stage(source, TaskRange(0, 10, 10), UNLIMITED)
    assert (blob.first, blob.last, blob.records) == (0, 9, 0) and offsets_in(store, blob) == []


def test_records_come_back_in_the_kafka_source_layout() -> None:
    source = FakePartitionSource()
    source.append(5)
    source.records[2].headers = [("h", b"x"), ("n", None)]
    (blob,), store = stage(source, TaskRange(0, 0, 5), UNLIMITED)
    rows = pq.read_table(io.BytesIO(store.blobs[blob.ref])).to_pylist()
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[0]["headers"] is None  # as Spark's Kafka source: null, not an empty list
    assert rows[2]["headers"] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert rows[0]["timestampType"] == 0 and rows[0]["topic"] == "t"


def test_a_task_failure_is_found_in_sparks_error_text() -> None:
    text = (
        "An exception was thrown from the Python worker.\n"
        "Traceback (most recent call last):\n"
        '  File "/x/kafka_range.py", line 1, in _consume\n'
        "source.range_reader.OffsetsDeletedError: t-0: offset 5 was deleted before it was read\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)\n"
    )
    assert task_failure(text) == ("OffsetsDeletedError", "t-0: offset 5 was deleted before it was read")
    rdd_job = (  # an RDD job's Py4JJavaError: the traceback begins on the Java exception's line, and comes twice
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 1 times, most "
        "recent failure: Lost task 0.0 (TID 2): org.apache.spark.api.python.PythonException: Traceback (most recent "
        "call last):\n"
        '  File "/x/range_job.py", line 155, in run\n'
        "ValueError: boom: before the pack\n"
        "\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)\n"
        "Driver stacktrace:\n"
        "Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        '  File "/x/range_job.py", line 155, in run\n'
        "ValueError: boom: before the pack\n"
    )
    assert task_failure(rdd_job) == ("ValueError", "boom: before the pack")
    assert task_failure("java.lang.OutOfMemoryError: Java heap space") == (None, "")


def test_daily_blobs_never_hold_records_of_two_utc_days() -> None:
    day = 86_400_000
    source = FakePartitionSource()
    stamps = [day * 3 - 2, day * 3 - 1, day * 3, day * 3 + 5, -1, day * 4 + 1, day * 4 + 2]  # -1: no timestamp
    for offset, stamp in enumerate(stamps):
        source.records[offset] = FakeRecord(offset, None, b"v", timestamp_ms=stamp)
    source.end = len(stamps)
    blobs, _ = stage(source, TaskRange(0, 0, len(stamps)), BlobLimits(max_bytes=10**9, max_offsets=10**9, daily=True))
    assert [(b.first, b.last, b.cut) for b in blobs] == [(0, 1, "daily"), (2, 4, "daily"), (5, 6, "")]
    undivided, _ = stage(source, TaskRange(0, 0, len(stamps)), UNLIMITED)
    assert [(b.first, b.last, b.cut) for b in undivided] == [(0, 6, "")]


def test_each_blob_notes_the_schema_ids_its_records_carry_and_counts_the_others() -> None:
    source = FakePartitionSource()
    source.append(6)
    for offset, value in ((0, with_schema_id(b"\0\0\0\0\0avro", 7)), (1, b"\0\0\0\0\x09x"), (4, b"\0\0\0\0\x07y")):
        source.records[offset] = FakeRecord(offset, with_schema_id(b"\0\0\0\0\0k", 3), value)
    limits = BlobLimits(max_bytes=10**12, max_offsets=3)
    blobs = stage_blobs(source.reader(), TaskRange(0, 0, 6), limits, MemoryStaging(InMemoryStore()), ("value",))
    assert [(b.first, b.schema_ids, b.unframed) for b in blobs] == [(0, (7, 9), 1), (3, (7,), 2)]  # keys not asked
    both = stage_blobs(source.reader(), TaskRange(0, 0, 3), limits, MemoryStaging(InMemoryStore()), ("key", "value"))
    assert [(b.schema_ids, b.unframed) for b in both] == [((3, 7, 9), 1)]
    (plain,), _ = stage(source, TaskRange(0, 0, 3), UNLIMITED)
    assert (plain.schema_ids, plain.unframed) == ((), 0)  # a mirror without schemas looks at nothing


def test_each_blob_carries_the_statistics_its_footer_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sinks.blob.writer.ROW_GROUP_ROWS", 3)  # several row groups per blob
    source = FakePartitionSource()
    stamps = [5_000, 7_000, 1_000, 9_000, -1, 8_000, 6_000]  # out of order; -1: the record has no timestamp
    for offset, stamp in enumerate(stamps):
        if offset != 3:  # a hole
            source.records[offset] = FakeRecord(offset, b"k", b"v" * offset, timestamp_ms=stamp)
    source.end = len(stamps)
    (blob,), store = stage(source, TaskRange(0, 0, len(stamps)), UNLIMITED)
    data = store.blobs[blob.ref]
    footer = pq.read_metadata(io.BytesIO(data))
    assert footer.num_row_groups == 2
    assert blob.statistics == file_statistics(footer, len(data))  # what a table would read back
    statistics = blob.statistics
    assert statistics is not None
    assert (statistics.size, statistics.records, len(statistics.split_offsets)) == (len(data), 6, 2)
    assert statistics.bounds == (
        ColumnBounds("partition", 0, 0, 0),
        ColumnBounds("offset", 0, 6, 0),
        ColumnBounds("timestamp", -1_000, 8_000_000, 0),  # microseconds
    )
    assert {path for path, _ in statistics.column_sizes} == {
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers.list.element.key",
        "headers.list.element.value",
    }


def test_a_footer_without_statistics_of_a_column_bounds_nothing_of_it() -> None:
    table = records_table([FakeRecord(offset, b"k", b"v") for offset in range(3)], "t", 0)
    sink = io.BytesIO()
    pq.write_table(table, sink, write_statistics=["offset"])
    data = sink.getvalue()
    statistics = file_statistics(pq.read_metadata(io.BytesIO(data)), len(data))
    assert statistics.bounds == (ColumnBounds("offset", 0, 2, 0),)
    assert statistics.bound("timestamp") is None and statistics.records == 3
