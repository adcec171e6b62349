"""verify tasks over a Kafka destination, against in-memory source and destination partitions: preserve and
renumber copies compared record by record, slices cut where the driver cuts them, tampering named."""

from __future__ import annotations

from dataclasses import replace

from commands.verify import source_bounds
from core.kafka_records import copied_from, parse_source_offset, source_cluster_header, source_offset_header
from tests.fakes import FakeConsumer, FakePartitionSource, FakeRecord
from workers.kafka_verify_task import KafkaSlice, check_kafka_slice
from workers.record_comparison import Comparison


def source_with_headers(count: int, holes_every: int = 0) -> FakePartitionSource:
    source = FakePartitionSource()
    source.append(count, holes_every=holes_every)
    for offset, record in source.records.items():
        if offset % 3 == 0:
            record.headers = [("h", b"1"), ("h", None), ("h", b"1")]  # duplicates and a null, in order
        if offset % 5 == 0:
            record.timestamp_type = 2  # LogAppendTime: a Kafka destination stamps CreateTime instead
    return source


def renumbered_copy(source: FakePartitionSource, skip_cluster: str | None = None) -> FakePartitionSource:
    destination = FakePartitionSource(topic="copy")
    for offset in sorted(source.records):
        record = source.records[offset]
        if skip_cluster is not None and copied_from(record.headers, skip_cluster):
            continue  # the mirror leaves out what came from its destination
        stamped = [*record.headers, source_offset_header(offset), source_cluster_header("A")]
        append(destination, replace(record, headers=stamped, timestamp_type=1))
    return destination


def append(destination: FakePartitionSource, record: FakeRecord) -> None:
    destination.records[destination.end] = replace(record, offset=destination.end)
    destination.end += 1


def check_renumbered(
    source: FakePartitionSource,
    destination: FakePartitionSource,
    per_slice: int,
    position: int,
    skip_cluster: str | None = None,
    ignore_unmapped: bool = False,
) -> Comparison:
    """Cut the destination as the driver does and join the slices' results."""
    starts = list(range(destination.log_start, destination.end, per_slice))
    found = []
    for start in starts:
        mapped = [parse_source_offset(r.headers) for o, r in sorted(destination.records.items()) if o >= start]
        found.append(next((m for m in mapped if m is not None), None))
    bounds = source_bounds(found, position)
    joined: Comparison | None = None
    for index, start in enumerate(starts):
        work = KafkaSlice(
            source.partition_spec(),
            destination.partition_spec(),
            True,
            start,
            starts[index + 1] if index + 1 < len(starts) else destination.end,
            bounds[index],
            bounds[index + 1],
            source.log_start,
            source.end,
            10,
            skip_cluster,
            ignore_unmapped,
        )
        result = check_kafka_slice(work, FakeConsumer(source), FakeConsumer(destination)).comparison
        joined = result if joined is None else joined.joined(result, 10)
    assert joined is not None
    return joined


def test_a_renumbered_copy_with_source_holes_is_equal_without_its_header_and_timestamp_types() -> None:
    source = source_with_headers(300, holes_every=7)
    destination = renumbered_copy(source)
    result = check_renumbered(source, destination, per_slice=64, position=300)
    assert result.ok and (result.first, result.end) == (0, 300)
    assert (result.equal, result.holes) == (len(source.records), 300 - len(source.records))


def test_records_that_came_from_the_destination_cluster_are_holes_not_missing() -> None:
    source = source_with_headers(100)
    for offset in range(10, 20):  # copied into the source by the mirror running the other way
        source.records[offset].headers = [source_offset_header(offset), source_cluster_header("B")]
    destination = renumbered_copy(source, skip_cluster="B")
    result = check_renumbered(source, destination, per_slice=30, position=100, skip_cluster="B")
    assert result.ok and (result.equal, result.holes) == (90, 10)
    assert not check_renumbered(source, destination, per_slice=30, position=100).ok  # without it: 10 missing


def test_the_destinations_own_records_are_extra_unless_ignored() -> None:
    """Two-way mirrors: the destination topic also holds records its own producers wrote (no header)."""
    source = source_with_headers(60)
    destination = renumbered_copy(source)
    append(destination, FakeRecord(0, b"native", b"written on the destination"))
    assert check_renumbered(source, destination, per_slice=30, position=60).extra == 1
    assert check_renumbered(source, destination, per_slice=30, position=60, ignore_unmapped=True).ok


def test_tampering_with_a_renumbered_copy_is_named_by_source_offset() -> None:
    source = source_with_headers(300)
    destination = renumbered_copy(source)
    destination.records[100].value = b"tampered"  # source offset 100
    del destination.records[150]  # source offset 150 lost (a hole in the destination's offsets)
    append(destination, replace(destination.records[199]))  # source offset 199 written again, last
    append(destination, FakeRecord(0, b"by hand", b"no header"))  # destination offset 301
    result = check_renumbered(source, destination, per_slice=64, position=300)
    assert [(d.offset, d.kind, d.fields) for d in result.differences] == [
        (100, "different", ("value",)),
        (150, "missing", ()),
        (199, "extra", ()),
        (301, "unmapped", ()),
    ]
    assert (result.equal, result.different, result.missing, result.extra) == (298, 1, 1, 2)


def test_a_copy_that_runs_backwards_across_a_slice_boundary_counts_the_second_copy_extra() -> None:
    """Source offsets 0-99, then 60-99 again: the repeat begins in another slice than the first copy."""
    source = source_with_headers(100)
    destination = renumbered_copy(source)
    for offset in range(60, 100):
        append(destination, replace(destination.records[offset]))
    result = check_renumbered(source, destination, per_slice=50, position=100)
    assert (result.equal, result.extra, result.missing, result.different) == (100, 40, 0, 0)
    assert result.holes == 0


def test_records_below_the_sources_log_start_are_passed_over() -> None:
    source = source_with_headers(200)
    destination = renumbered_copy(source)
    source.delete_before(120)
    result = check_renumbered(source, destination, per_slice=50, position=200)
    assert result.ok and (result.first, result.end, result.equal) == (120, 200, 80)


def test_a_preserved_copy_compares_offset_for_offset() -> None:
    source = source_with_headers(200)
    destination = FakePartitionSource(topic="copy")
    for offset in range(200):
        append(destination, replace(source.records[offset], timestamp_type=1))
    destination.records[42].headers = []
    append(destination, FakeRecord(0, b"k", b"appended by hand"))  # offset 200: beyond the source's end
    work = KafkaSlice(source.partition_spec(), destination.partition_spec(), False, 0, 201, 0, 201, 0, source.end, 10)
    result = check_kafka_slice(work, FakeConsumer(source), FakeConsumer(destination)).comparison
    assert [(d.offset, d.kind, d.fields) for d in result.differences] == [
        (42, "different", ("headers",)),
        (200, "extra", ()),
    ]


def test_slice_bounds_never_run_backwards_and_end_at_the_position() -> None:
    assert source_bounds([0, 40, 90], 120) == [0, 40, 90, 120]
    assert source_bounds([0, 60, 30], 120) == [0, 60, 60, 120]  # a record out of order starts slice 2
    assert source_bounds([5, None], 120) == [5, 120, 120]  # nothing mapped in slice 1: it compares nothing
    assert source_bounds([], 7) == [7]
    assert source_bounds([0, 150], 120) == [0, 150, 150]  # a header beyond the position (written by hand)
