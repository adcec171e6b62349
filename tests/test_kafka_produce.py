"""What a Spark task does for the Kafka destination, against in-memory source and destination partitions:
offsets kept or renumbered exactly once, holes refused in preserve mode, transactions that abort and run
again, positions moved by another writer refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from core.kafka_records import parse_source_offset, source_cluster_header, source_offset_header
from sinks.kafka.produce import (
    PRODUCE_ARGUMENTS,
    DestinationMovedError,
    DestinationTaskError,
    KafkaProduceTarget,
    PreserveHoleError,
    ProducerFencedError,
    UndeliveredRecordError,
    _KeptClients,
    produce_range,
)
from sinks.retry import RetryPolicy
from sinks.write_target import TaskRange
from tests.fakes import FakePartitionSource

WRITER = 1111


@dataclass
class Landed:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp: int


@dataclass
class FakeDestination:
    """One destination partition: its log, the group's committed position, and transactions."""

    log: list[Landed] = field(default_factory=list)
    committed: dict[str, int] = field(default_factory=lambda: {"mirror-v3.copy.owner": WRITER})  # group -> offset
    foreign_records_before_delivery: int = 0  # another producer appends this many records mid-write
    fail_commits: list[KafkaError] = field(default_factory=list)  # raised by the next commit_transaction calls
    fail_watermarks: list[KafkaError] = field(default_factory=list)  # raised by the next watermark queries
    aborted: int = 0

    def target(self, offsets: str, expected: int | None = None, **loop: Any) -> KafkaProduceTarget:
        return KafkaProduceTarget(
            bootstrap_servers="fake:9092",
            topic="copy",
            partition=0,
            offsets=offsets,  # type: ignore[arg-type]
            source_name="t-0",
            transactional_id="mirror-v3.copy.0",
            group_id="mirror-v3.copy",
            owner_group="mirror-v3.copy.owner",
            writer=WRITER,
            expected=expected,
            compression=None,
            max_batch_bytes=1 << 20,
            request_timeout_ms=1_000,
            retry=RetryPolicy(initial_backoff_s=0.0, max_backoff_s=0.0, deadline_s=5.0),
            **loop,
        )


class FakeMessage:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


class FakeProducer:
    def __init__(self, destination: FakeDestination, transactional: bool) -> None:
        self._destination = destination
        self._transactional = transactional
        self._pending: list[tuple[Landed, Any]] = []
        self._offsets: tuple[str, int] | None = None
        self.reports = 0  # delivery reports served

    def init_transactions(self, timeout: float) -> None:
        pass

    def begin_transaction(self) -> None:
        self._pending, self._offsets = [], None

    def produce(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int,
        callback: Any,
        on_delivery: Any,
        timestamp: int,
        headers: Any,
    ) -> None:
        """librdkafka's positional order (`PRODUCE_ARGUMENTS`); `on_delivery` is `callback`'s alias, unused."""
        assert on_delivery is None, "the callback goes in its first slot"
        self._pending.append((Landed(-1, key, value, headers, timestamp), callback))
        if not self._transactional:
            self.flush(0)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        destination = self._destination
        for _ in range(destination.foreign_records_before_delivery):
            destination.log.append(Landed(len(destination.log), b"x", b"foreign", None, 0))
        destination.foreign_records_before_delivery = 0
        for record, callback in self._pending:
            record.offset = len(destination.log)
            destination.log.append(record)
            if callback is not None:  # librdkafka reports only the records produced with a callback
                self.reports += 1
                callback(None, FakeMessage(record.offset))
        self._pending = []
        return 0

    def send_offsets_to_transaction(self, offsets: list[TopicPartition], group: Any, timeout: float) -> None:
        (position,) = offsets
        self._offsets = (group, position.offset)

    def commit_transaction(self, timeout: float) -> None:
        if self._destination.fail_commits:
            raise KafkaException(self._destination.fail_commits.pop(0))
        self.flush(timeout)
        assert self._offsets is not None, "the position must be committed in the transaction"
        group, offset = self._offsets
        self._destination.committed[group] = offset

    def abort_transaction(self, timeout: float) -> None:
        self._pending, self._offsets = [], None
        self._destination.aborted += 1


class FakeGroupConsumer:
    def __init__(self, destination: FakeDestination, group: str) -> None:
        self._destination = destination
        self._group = group

    def get_watermark_offsets(self, partition: Any, timeout: float, cached: bool) -> tuple[int, int]:
        if self._destination.fail_watermarks:
            raise KafkaException(self._destination.fail_watermarks.pop(0))
        return 0, len(self._destination.log)

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        offset = self._destination.committed.get(self._group, -1001)
        return [TopicPartition(partitions[0].topic, partitions[0].partition, offset)]

    def consumer_group_metadata(self) -> str:
        return self._group

    def close(self) -> None:
        pass


@dataclass
class FakeClients:
    source: FakePartitionSource
    destination: FakeDestination
    transactional: bool
    released: list[tuple[str, bool]] = field(default_factory=list)

    def producer(self, on_error: Any = None) -> Any:
        return FakeProducer(self.destination, self.transactional)

    def group_consumer(self, group_id: str) -> Any:
        return FakeGroupConsumer(self.destination, group_id)

    def release(self, client: Any, broken: bool = False) -> None:
        self.released.append((type(client).__name__, broken))


def run(
    source: FakePartitionSource,
    destination: FakeDestination,
    task: TaskRange,
    offsets: str,
    clients: FakeClients | None = None,
    **kw: Any,
) -> Any:
    target = destination.target(offsets, **kw)
    clients = clients or FakeClients(source, destination, transactional=offsets == "renumber")
    return produce_range(source.reader(), task, target, clients, sleep=lambda _: None)


def test_a_preserve_write_gives_its_clients_back_and_a_failed_one_drops_its_producer() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(20, holes_every=10)
    clients = FakeClients(source, destination, transactional=False)
    run(source, destination, TaskRange(0, 0, 9), "preserve", clients)
    assert clients.released == [("FakeGroupConsumer", False), ("FakeProducer", False)]
    with pytest.raises(PreserveHoleError):
        run(source, destination, TaskRange(9, 9, 20), "preserve", clients)
    assert clients.released[2:] == [("FakeGroupConsumer", False), ("FakeProducer", True)]


def test_a_broker_handle_destroyed_during_an_outage_is_asked_again_with_a_new_consumer() -> None:
    """CI saw a preserve mirror fail on "Local: Broker handle destroyed without termination" from the watermark query
    during a destination outage: librdkafka had decommissioned that broker's handle; another consumer asks again."""
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    destination.fail_watermarks.append(KafkaError(KafkaError._DESTROY_BROKER))
    clients = FakeClients(source, destination, transactional=False)
    run(source, destination, TaskRange(0, 0, 10), "preserve", clients)
    assert [landed.offset for landed in destination.log] == list(range(10))
    assert clients.released[:2] == [("FakeGroupConsumer", True), ("FakeGroupConsumer", False)]


def test_kept_clients_are_shared_by_key_bounded_and_a_dropped_one_is_never_handed_out_again() -> None:
    closed: list[str] = []

    class Client:
        def __init__(self, name: str) -> None:
            self.name = name

        def close(self) -> None:
            closed.append(self.name)

    kept = _KeptClients(limit=2)
    first = kept.get(("a",), lambda: Client("a"))
    assert kept.get(("a",), lambda: Client("a2")) is first
    kept.get(("b",), lambda: Client("b"))
    kept.get(("a",), lambda: Client("a3"))  # a is the most recently used now
    kept.get(("c",), lambda: Client("c"))
    assert closed == ["b"] and kept.holds(first)
    assert kept.drop(first) and not kept.holds(first)
    assert kept.get(("a",), lambda: Client("a4")).name == "a4"


def test_preserve_keeps_every_offset_and_record() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(50)
    source.records[7].headers = [("h", b"1"), ("n", None)]
    produced = run(source, destination, TaskRange(0, 0, 50), "preserve")
    assert (produced.first, produced.last, produced.records) == (0, 49, 50)
    assert (produced.destination_first, produced.destination_last) == (0, 49)
    assert [r.offset for r in destination.log] == list(range(50))
    assert [(r.key, r.value) for r in destination.log] == [
        (source.records[o].key, source.records[o].value) for o in range(50)
    ]
    assert destination.log[7].headers == [("h", b"1"), ("n", None)]


def test_preserve_delivers_up_to_a_hole_and_names_it() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(20, holes_every=10)  # offsets 9 and 19 are holes
    with pytest.raises(PreserveHoleError) as caught:
        run(source, destination, TaskRange(0, 0, 20), "preserve")
    assert (caught.value.first, caught.value.last) == (9, 9)
    assert [r.offset for r in destination.log] == list(range(9))


def test_preserve_refuses_a_destination_that_does_not_end_where_the_range_begins() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(20)
    run(source, destination, TaskRange(0, 0, 10), "preserve")
    with pytest.raises(DestinationMovedError) as caught:
        run(source, destination, TaskRange(12, 12, 20), "preserve")
    assert (caught.value.expected, caught.value.found) == (12, 10)


def test_preserve_fails_when_another_producer_shifts_the_offsets() -> None:
    source, destination = FakePartitionSource(), FakeDestination(foreign_records_before_delivery=1)
    source.append(10)
    with pytest.raises(DestinationMovedError) as caught:
        run(source, destination, TaskRange(0, 0, 10), "preserve")
    assert (caught.value.expected, caught.value.found) == (0, 1)


def test_renumber_commits_records_and_position_in_one_transaction() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(30, holes_every=3)
    first = run(source, destination, TaskRange(0, 0, 15), "renumber")
    second = run(source, destination, TaskRange(15, 15, 30), "renumber", expected=15)
    assert (first.records, second.records) == (10, 10)
    assert [parse_source_offset(r.headers) for r in destination.log] == [o for o in range(30) if o % 3 != 2]
    assert [r.offset for r in destination.log] == list(range(20))
    assert destination.committed["mirror-v3.copy"] == 30


def test_renumber_asks_only_for_the_reports_its_log_line_names() -> None:
    """The first record's and each consumed batch's last record's: the commit fails if any record failed, and the
    destination offsets of the range come from these two."""
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(100)
    producers: list[FakeProducer] = []
    clients = FakeClients(source, destination, transactional=True)

    def producer(on_error: Any = None) -> FakeProducer:
        producers.append(FakeProducer(destination, True))
        return producers[-1]

    clients.producer = producer  # type: ignore[method-assign]
    target = destination.target("renumber")
    produced = produce_range(source.reader(batch=30), TaskRange(0, 0, 100), target, clients, sleep=lambda _: None)
    assert produced.records == 100 and (produced.destination_first, produced.destination_last) == (0, 99)
    assert producers[0].reports == 1 + 4  # the first record, and the last of each batch of 30, 30, 30, 10
    assert [parse_source_offset(r.headers) for r in destination.log] == list(range(100))


def test_renumber_stamps_the_source_cluster_and_leaves_out_what_came_from_the_destination() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    for offset in (3, 4, 8):  # copied here from the destination cluster by the mirror running the other way
        source.records[offset].headers = [("h", b"1"), source_offset_header(offset * 7), source_cluster_header("B")]
    source.records[5].headers = [source_cluster_header("C")]  # came from a third cluster: copied on
    produced = run(source, destination, TaskRange(0, 0, 10), "renumber", source_cluster="A", skip_cluster="B")
    assert (produced.records, produced.skipped) == (7, 3)
    assert [parse_source_offset(r.headers) for r in destination.log] == [0, 1, 2, 5, 6, 7, 9]
    assert destination.log[0].headers == [source_offset_header(0), source_cluster_header("A")]
    assert destination.log[3].headers == [
        source_cluster_header("C"),
        source_offset_header(5),
        source_cluster_header("A"),
    ]
    assert destination.committed["mirror-v3.copy"] == 10


def test_a_transaction_that_must_abort_runs_again_without_duplicates() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    destination.fail_commits.append(KafkaError(KafkaError._TIMED_OUT, "flush failed", txn_requires_abort=True))
    produced = run(source, destination, TaskRange(0, 0, 10), "renumber")
    assert produced.retries == 1 and destination.aborted == 1
    assert [parse_source_offset(r.headers) for r in destination.log] == list(range(10))


def test_a_retried_task_finds_its_range_committed_and_writes_nothing() -> None:
    """A Spark task attempt that committed, then died before reporting: the next attempt must not copy again."""
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    run(source, destination, TaskRange(0, 0, 10), "renumber")
    again = run(source, destination, TaskRange(0, 0, 10), "renumber")
    assert (again.records, again.destination_first) == (10, None)
    assert len(destination.log) == 10


def test_a_partition_taken_over_by_another_process_is_a_fence() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    destination.committed = {"mirror-v3.copy": 5, "mirror-v3.copy.owner": 2222}
    with pytest.raises(ProducerFencedError) as caught:
        run(source, destination, TaskRange(5, 5, 10), "renumber", expected=5)
    assert caught.value.owner == 2222 and caught.value.owner_group == destination.target("renumber").owner_group
    assert destination.log == [] and destination.committed["mirror-v3.copy"] == 5


def test_a_position_that_moved_under_the_same_writer_is_refused() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    destination.committed["mirror-v3.copy"] = 8
    with pytest.raises(DestinationMovedError) as caught:
        run(source, destination, TaskRange(5, 5, 10), "renumber", expected=5)
    assert (caught.value.expected, caught.value.found) == (5, 8)
    assert destination.log == []


def test_preserve_checks_each_delivery_against_its_own_source_offset() -> None:
    """A failed delivery must not let the next record, landing in its place, pass the offset check."""
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)

    class LosingFirst(FakeProducer):
        def produce(self, topic: str, value: Any, key: Any, partition: int, callback: Any, *rest: Any) -> None:
            if not getattr(self, "lost", False):
                self.lost = True
                callback(KafkaError(KafkaError._MSG_TIMED_OUT, "timed out"), None)
                return
            super().produce(topic, value, key, partition, callback, *rest)

    clients = FakeClients(source, destination, transactional=False)
    clients.producer = lambda on_error=None: LosingFirst(destination, False)  # type: ignore[method-assign]
    with pytest.raises(UndeliveredRecordError) as caught:
        produce_range(source.reader(), TaskRange(0, 0, 10), destination.target("preserve"), clients)
    assert caught.value.source_offset == 0


def test_a_producer_fenced_mid_transaction_is_reported_as_fenced() -> None:
    """librdkafka raises a bare "Local: Fatal error" from produce(); the cause reaches the error callback
    only when a poll serves it, which may not have happened yet."""
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)

    class FencedMidway(FakeProducer):
        def __init__(self, on_error: Any) -> None:
            super().__init__(destination, True)
            self._on_error = on_error
            self._unserved: list[KafkaError] = []

        def produce(self, topic: str, *args: Any) -> None:
            self._unserved.append(KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True))
            # As confluent-kafka raises it: the code only, the fatal flag unset.
            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"))

        def poll(self, timeout: float = 0) -> int:
            while self._unserved:
                self._on_error(self._unserved.pop(0))
            return 0

    clients = FakeClients(source, destination, transactional=True)
    clients.producer = lambda on_error=None: FencedMidway(on_error)  # type: ignore[method-assign]
    with pytest.raises(ProducerFencedError) as caught:
        produce_range(source.reader(), TaskRange(0, 0, 10), destination.target("renumber"), clients)
    target = destination.target("renumber")
    assert (caught.value.transactional_id, caught.value.owner) == (target.transactional_id, None)


class DesynchronisedOnCommit(FakeProducer):
    """librdkafka declares an idempotent producer fatal when a lost connection desynchronises its sequence
    numbers; the open transaction is never committed."""

    broken = False

    def commit_transaction(self, timeout: float) -> None:
        if self.broken:
            self._pending = []  # what it produced belongs to a transaction that is never committed
            raise KafkaException(
                KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence desynchronization", fatal=True)
            )
        super().commit_transaction(timeout)


class FatalOnProduce(FakeProducer):
    """A destination outage during a transaction can leave the producer fatal; the next produce() raises only
    "Local: Fatal error", its fatal flag unset, and no cause reaches the error callback within the wait."""

    broken = False

    def produce(self, topic: str, *args: Any) -> None:
        if self.broken:
            raise KafkaException(KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error"))
        super().produce(topic, *args)


@pytest.mark.parametrize("unusable", [DesynchronisedOnCommit, FatalOnProduce])
def test_a_producer_made_unusable_is_replaced_and_the_range_produced_once(unusable: type[FakeProducer]) -> None:
    """Not a fence (no other process owns the partition) and nothing was committed: a new producer may write the
    range again, once."""
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)
    producers: list[FakeProducer] = []

    def new_producer(on_error: Any = None) -> FakeProducer:
        producer = unusable(destination, True)
        producer.broken = not producers  # type: ignore[attr-defined]
        producers.append(producer)
        return producer

    clients = FakeClients(source, destination, transactional=True)
    clients.producer = new_producer  # type: ignore[method-assign]
    produced = produce_range(
        source.reader(), TaskRange(0, 0, 10), destination.target("renumber"), clients, sleep=lambda _: None
    )
    assert (produced.retries, len(producers)) == (1, 2)
    assert [parse_source_offset(r.headers) for r in destination.log] == list(range(10))
    assert destination.committed["mirror-v3.copy"] == 10


def test_a_fatal_authorization_error_is_not_retried() -> None:
    source, destination = FakePartitionSource(), FakeDestination()
    source.append(10)

    class Unauthorised(FakeProducer):
        def init_transactions(self, timeout: float) -> None:
            raise KafkaException(
                KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "not authorised", fatal=True)
            )

    clients = FakeClients(source, destination, transactional=True)
    clients.producer = lambda on_error=None: Unauthorised(destination, True)  # type: ignore[method-assign]
    with pytest.raises(DestinationTaskError) as caught:
        produce_range(source.reader(), TaskRange(0, 0, 10), destination.target("renumber"), clients)
    assert "not authorised" in caught.value.problem


def test_the_pinned_client_takes_produce_arguments_in_the_order_the_loop_passes_them() -> None:
    """`_produce_all` calls confluent-kafka's produce() positionally (`PRODUCE_ARGUMENTS`): the real client, no broker
    needed (a purge reports each queued message with its fields, the timestamp apart), and the fake above, take the
    same order."""
    import inspect

    from confluent_kafka import Producer

    reported: list[Any] = []
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0})
    producer.produce(
        "t", b"v", b"k", 3, lambda error, message: reported.append(message), None, 1_600_000_000_123, [("h", b"x")]
    )
    producer.produce("t", b"w", None, 4, None, None, 1_600_000_000_456, None)  # no callback: no report
    producer.purge()
    producer.poll(0)
    (message,) = reported
    assert (message.value(), message.key(), message.partition()) == (b"v", b"k", 3)
    # An undelivered message reports neither timestamp nor headers (e2e reads both back); their slots take only them:
    with pytest.raises(TypeError, match="integer"):
        producer.produce("t", b"v", None, 0, None, None, [("h", b"x")], None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="headers"):
        producer.produce("t", b"v", None, 0, None, None, 123, 456)  # type: ignore[arg-type]
    assert tuple(inspect.signature(FakeProducer.produce).parameters)[1:] == PRODUCE_ARGUMENTS
