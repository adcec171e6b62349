"""Put data into a test broker and read it back, using confluent-kafka.

Every helper takes a bootstrap string and opens (and closes) its own client, so
tests stay independent of each other. Failures raise `KafkaDataError` (or
`TimeoutError`) with a readable message.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import OFFSET_STORED, NewPartitions, NewTopic

Headers = list[tuple[str, bytes | None]]
Isolation = Literal["read_committed", "read_uncommitted"]

# Fixed base so generate_records() is reproducible. It lies in the past, which
# matters: time-based retention would delete such data, so KafkaBroker turns
# broker-wide retention off (log.retention.ms=-1).
BASE_TIMESTAMP_MS = 1_700_000_000_000

# Key of the filler records wait_for_compaction() appends to roll segments.
ROLL_KEY = b"__testkit_roll__"

# librdkafka writes its logs to stderr unless given a logger; route them to
# Python logging, where pytest captures them and shows them on failure.
RDKAFKA_LOGGER = logging.getLogger("testkit.rdkafka")
RDKAFKA_LOGGER.addHandler(logging.NullHandler())  # no "last resort" printing to stderr

# Tuned for throughput: big batches, short linger. Not idempotent: librdkafka
# spends ~0.5 s getting a producer id for every new idempotent producer. One
# request in flight keeps records in order even when a batch is retried.
_PRODUCER_CONFIG: dict[str, Any] = {
    "logger": RDKAFKA_LOGGER,
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 1,
    "acks": "all",
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
}


class KafkaDataError(RuntimeError):
    """A produce, consume or admin operation failed."""


@dataclass(slots=True)
class Record:
    """A record to produce. timestamp_ms None (or 0) means the producer's current time."""

    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)
    timestamp_ms: int | None = None


@dataclass(slots=True)
class ConsumedRecord:
    """A record as read back; timestamp_type is confluent_kafka.TIMESTAMP_*."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int
    timestamp_type: int


# --------------------------------------------------------------------------- topics


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    *,
    timeout: float = 30.0,
) -> None:
    """Create a topic (replication factor 1) and wait until every partition has a leader."""
    admin = admin_client(bootstrap)
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config or {}))
    futures = admin.create_topics([topic], operation_timeout=timeout, request_timeout=timeout)
    _result(futures[name], f"create topic {name!r}", timeout)
    _wait_until(
        lambda: _leaders_ready(admin, name, partitions),
        timeout,
        f"topic {name!r} did not get leaders for all {partitions} partition(s)",
    )


def add_partitions(bootstrap: str, name: str, total: int, *, timeout: float = 30.0) -> None:
    """Grow a topic to `total` partitions and wait until every one has a leader."""
    admin = admin_client(bootstrap)
    futures = admin.create_partitions([NewPartitions(name, total)], operation_timeout=timeout, request_timeout=timeout)
    _result(futures[name], f"add partitions to {name!r}", timeout)
    _wait_until(
        lambda: _leaders_ready(admin, name, total),
        timeout,
        f"topic {name!r} did not get leaders for all {total} partition(s)",
    )


def partition_count(bootstrap: str, name: str, *, timeout: float = 10.0) -> int | None:
    """How many partitions the topic has; None if it does not exist."""
    admin = admin_client(bootstrap)
    found = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
    return None if found is None or found.error is not None else len(found.partitions)


def topic_configs(bootstrap: str, name: str, *, timeout: float = 10.0) -> dict[str, str]:
    """The configs set on the topic itself (not the broker's defaults)."""
    admin = admin_client(bootstrap)  # kept until the answer is in: a collected client fails its requests
    resource = ConfigResource(ResourceType.TOPIC, name)
    entries = _result(admin.describe_configs([resource])[resource], f"configs of {name!r}", timeout)
    return {
        key: entry.value
        for key, entry in entries.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value and entry.value is not None
    }


def set_topic_config(bootstrap: str, name: str, key: str, value: str, *, timeout: float = 10.0) -> None:
    """Set one config of the topic, leaving the others as they are."""
    admin = admin_client(bootstrap)
    change = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[change])
    _result(admin.incremental_alter_configs([resource])[resource], f"set {key} of {name!r}", timeout)


def delete_topic(bootstrap: str, name: str, *, timeout: float = 30.0) -> None:
    """Delete a topic and wait until it is gone from the metadata."""
    admin = admin_client(bootstrap)
    futures = admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)
    _result(futures[name], f"delete topic {name!r}", timeout)
    _wait_until(
        lambda: name not in admin.list_topics(timeout=5).topics,
        timeout,
        f"topic {name!r} still listed after deletion",
    )


def compacted_topic_config() -> dict[str, str]:
    """Topic config under which a single test broker compacts within seconds.

    The active segment is never compacted, so segments must roll quickly:
    segment.ms=100 rolls on the next append whose timestamp is >100 ms past the
    segment's first timestamp (Kafka compares record timestamps, not wall
    time). The broker's log.cleaner.backoff.ms decides how soon the cleaner
    then notices; KafkaBroker sets it to 100 ms.
    """
    return {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "0",
        "file.delete.delay.ms": "0",
    }


# -------------------------------------------------------------------------- produce


def produce(
    bootstrap: str,
    topic: str,
    partition: int,
    records: Iterable[Record],
    *,
    config: Mapping[str, Any] | None = None,
    timeout: float = 60.0,
) -> None:
    """Produce records in order to one partition; raise if any delivery fails."""
    producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER_CONFIG, **(config or {})})
    try:
        errors: list[str] = []
        _send_all(producer, topic, partition, records, errors)
        _flush(producer, timeout, errors)
    finally:
        producer.close()


def produce_transactional(
    bootstrap: str,
    topic: str,
    partition: int,
    batches: Sequence[tuple[Sequence[Record], bool]],
    *,
    transactional_id: str | None = None,
    timeout: float = 60.0,
) -> None:
    """Produce each batch in its own transaction; True commits it, False aborts it.

    Aborted batches are flushed first, so their records really land in the log
    (followed by an abort marker) instead of being purged client-side.
    """
    producer = _transactional_producer(bootstrap, transactional_id or f"testkit-txn-{uuid.uuid4().hex}")
    try:
        producer.init_transactions(timeout)
        for records, commit in batches:
            producer.begin_transaction()
            errors: list[str] = []
            _send_all(producer, topic, partition, records, errors)
            _flush(producer, timeout, errors)
            if commit:
                producer.commit_transaction(timeout)
            else:
                producer.abort_transaction(timeout)
    except KafkaException as exc:
        raise KafkaDataError(f"transactional produce to {topic}[{partition}] failed: {exc}") from None
    finally:
        producer.close()
    # The coordinator writes the last commit/abort marker after EndTxn has returned; until it lands the high
    # watermark is still moving and read_committed readers stop short. Return once the log is final.
    _wait_until(
        lambda: _stable_end(bootstrap, topic, partition),
        timeout,
        f"the last transaction marker of {topic}[{partition}] did not land",
    )


@contextlib.contextmanager
def open_transaction(
    bootstrap: str, topic: str, partition: int, records: Sequence[Record], *, timeout: float = 60.0
) -> Iterator[None]:
    """`records` produced inside a transaction that stays open (a hung producer) until the block ends, then
    aborted (returning once the abort marker has landed): meanwhile the partition's last stable offset stays
    where the transaction began."""
    producer = _transactional_producer(bootstrap, f"testkit-open-txn-{uuid.uuid4().hex}")
    try:
        producer.init_transactions(timeout)
        producer.begin_transaction()
        errors: list[str] = []
        _send_all(producer, topic, partition, records, errors)
        _flush(producer, timeout, errors)
        yield
        producer.abort_transaction(timeout)
    except KafkaException as exc:
        raise KafkaDataError(f"open transaction on {topic}[{partition}] failed: {exc}") from None
    finally:
        producer.close()
    # The abort marker lands after EndTxn has returned: until then the high watermark still moves.
    _wait_until(
        lambda: _stable_end(bootstrap, topic, partition),
        timeout,
        f"the abort marker of {topic}[{partition}] did not land",
    )


def _transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            **_PRODUCER_CONFIG,
            "enable.idempotence": True,  # required by transactions
            "max.in.flight.requests.per.connection": 5,
            "transactional.id": transactional_id,
        }
    )


def _stable_end(bootstrap: str, topic: str, partition: int) -> bool:
    """Is the last stable offset (read_committed end) the high watermark: no transaction open or unmarked?"""
    ends = []
    isolations: tuple[Isolation, ...] = ("read_committed", "read_uncommitted")
    for isolation in isolations:
        consumer = _consumer(bootstrap, isolation)
        try:
            ends.append(_watermarks(consumer, topic, partition, 10.0)[1])
        finally:
            consumer.close()
    return ends[0] == ends[1]


def generate_records(
    n: int,
    seed: int,
    *,
    key_space: int | None = None,
    null_key_ratio: float = 0.05,
    null_value_ratio: float = 0.05,
    base_timestamp_ms: int = BASE_TIMESTAMP_MS,
) -> list[Record]:
    """Make `n` deterministic, varied records (same seed => same records).

    - keys: b"key-<k>" for k < key_space (default n // 4, so keys repeat),
      b"" for k == 0, None with probability null_key_ratio. Compacted topics
      reject null keys: pass null_key_ratio=0 for them.
    - values: None (tombstone) with probability null_value_ratio, else random
      bytes of 0 bytes to ~10 KiB.
    - headers: 0-3 per record, duplicate keys, None and empty values, a
      non-ASCII key; record 0 always has a None-valued and a duplicated header.
    - timestamps: explicit, mostly increasing from base_timestamp_ms with
      occasional out-of-order ones.
    """
    rng = random.Random(seed)
    space = key_space if key_space is not None else max(1, n // 4)
    header_keys = ["trace-id", "content-type", "dup", "empty", "héader-ü"]
    ts = base_timestamp_ms
    records: list[Record] = []
    for i in range(n):
        key: bytes | None = None
        if rng.random() >= null_key_ratio:
            k = rng.randrange(space)
            key = b"" if k == 0 else b"key-%d" % k

        value: bytes | None = None
        if rng.random() >= null_value_ratio:
            value = rng.randbytes(_value_size(rng))

        headers: Headers
        if i == 0:
            headers = [("dup", b"1"), ("null", None), ("dup", b"2")]
        else:
            headers = [(rng.choice(header_keys), _header_value(rng)) for _ in range(rng.randint(0, 3))]

        ts += rng.randint(0, 50)
        timestamp = ts - rng.randint(1, 5_000) if rng.random() < 0.05 else ts
        records.append(Record(key, value, headers, timestamp))
    return records


# -------------------------------------------------------------------- offsets / admin


def watermarks(bootstrap: str, topic: str, partition: int, *, timeout: float = 10.0) -> tuple[int, int]:
    """Return (log start offset, high watermark) as seen by a read_uncommitted consumer."""
    consumer = _consumer(bootstrap, "read_uncommitted")
    try:
        return _watermarks(consumer, topic, partition, timeout)
    finally:
        consumer.close()


def offset_for_time(bootstrap: str, topic: str, partition: int, time_ms: int, *, timeout: float = 10.0) -> int | None:
    """The broker's answer to offsets-for-times: the first offset stamped at or after `time_ms` (None: none is)."""
    consumer = _consumer(bootstrap, "read_uncommitted")
    try:
        (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, time_ms)], timeout=timeout)
        if found.error is not None:
            raise KafkaDataError(f"offsets for times of {topic}[{partition}]: {found.error}")
        return None if found.offset < 0 else int(found.offset)
    finally:
        consumer.close()


_COORDINATOR_ERRORS = frozenset(
    {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE}
)


def is_transient(exc: KafkaException) -> bool:
    """Worth asking again: librdkafka's retriable errors, and a group coordinator that is still loading or
    moving (which it does not mark retriable)."""
    error = exc.args[0]
    return bool(error.retriable()) or error.code() in _COORDINATOR_ERRORS


def committed_offset(bootstrap: str, group: str, topic: str, partition: int, *, timeout: float = 10.0) -> int | None:
    """The offset consumer group `group` committed for the partition, or None."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOGGER, "group.id": group, "enable.auto.commit": False}
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                (found,) = consumer.committed([TopicPartition(topic, partition)], timeout=timeout)
                return None if found.offset < 0 else int(found.offset)
            except KafkaException as exc:
                # The group coordinator may still be loading or moving (NOT_COORDINATOR, ...).
                if not is_transient(exc) or time.monotonic() > deadline:
                    raise KafkaDataError(
                        f"committed offset of group {group!r} for {topic}[{partition}]: {exc}"
                    ) from None
                time.sleep(0.2)
    finally:
        consumer.close()


def commit_offset(
    bootstrap: str, group: str, topic: str, partition: int, offset: int, *, timeout: float = 10.0
) -> None:
    """Commit `offset` for the partition as consumer group `group` would after reading the records below it."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOGGER, "group.id": group, "enable.auto.commit": False}
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
                return
            except KafkaException as exc:
                if not is_transient(exc) or time.monotonic() > deadline:
                    raise KafkaDataError(f"commit of group {group!r} for {topic}[{partition}]: {exc}") from None
                time.sleep(0.2)
    finally:
        consumer.close()


def consume_as_group(
    bootstrap: str, group: str, topic: str, partition: int, *, timeout: float = 60.0
) -> list[ConsumedRecord]:
    """What a read_committed consumer of group `group` reads from the partition: from the group's committed
    offset (the start when it has none) to the partition's end. Nothing is committed."""
    consumer = _consumer(bootstrap, "read_committed", group=group)
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_STORED)])
        return _read_to_end(consumer, topic, partition, timeout)
    finally:
        consumer.close()


def delete_consumer_group(bootstrap: str, group: str, *, timeout: float = 60.0) -> None:
    """Delete a consumer group (as an admin would, or as offsets.retention.minutes does); retried while its
    coordinator is loading or moving, and until its committed offsets are gone."""
    admin = admin_client(bootstrap)
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(15)
            return
        except KafkaException as exc:
            if not is_transient(exc) or time.monotonic() > deadline:
                raise KafkaDataError(f"delete consumer group {group!r}: {exc}") from None
        except TimeoutError:
            if time.monotonic() > deadline:
                raise KafkaDataError(f"delete consumer group {group!r}: no answer within {timeout}s") from None
        time.sleep(0.5)


def delete_records(bootstrap: str, topic: str, partition: int, before_offset: int, *, timeout: float = 30.0) -> int:
    """Delete records below `before_offset` (-1 = all); return the new low watermark."""
    admin = admin_client(bootstrap)
    futures = admin.delete_records(
        [TopicPartition(topic, partition, before_offset)],
        operation_timeout=timeout,
        request_timeout=timeout,
    )
    (future,) = futures.values()
    deleted = _result(future, f"delete records of {topic}[{partition}] before {before_offset}", timeout)
    return int(deleted.low_watermark)


# -------------------------------------------------------------------------- consume


def consume_all(
    bootstrap: str,
    topic: str,
    partition: int,
    isolation: Isolation = "read_committed",
    *,
    timeout: float = 60.0,
) -> list[ConsumedRecord]:
    """Read a partition from its start to its current end (LSO for read_committed).

    The end is detected with a partition-EOF event, so an empty or fully
    compacted-away partition returns [] promptly.
    """
    consumer = _consumer(bootstrap, isolation)
    try:
        _assign_at_start(consumer, topic, partition, timeout)
        return _read_to_end(consumer, topic, partition, timeout)
    finally:
        consumer.close()


def _read_to_end(consumer: Consumer, topic: str, partition: int, timeout: float) -> list[ConsumedRecord]:
    out: list[ConsumedRecord] = []
    deadline = time.monotonic() + timeout
    while True:
        # Short timeout: consume() waits the full timeout whenever fewer
        # than num_messages are ready, which is always the case at the end.
        for msg in consumer.consume(num_messages=10_000, timeout=0.05):
            if _is_eof(msg):
                return out
            out.append(_to_consumed(msg))
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"reading {topic}[{partition}]: no end of partition after {timeout}s ({len(out)} records read)"
            )


def record_at(
    bootstrap: str,
    topic: str,
    partition: int,
    offset: int | None = None,
    isolation: Isolation = "read_committed",
    *,
    timeout: float = 30.0,
) -> ConsumedRecord | None:
    """The first record a consumer at `isolation` gets at or after `offset` (None: the partition's log start);
    None when there is none before the partition's end."""
    consumer = _consumer(bootstrap, isolation)
    deadline = time.monotonic() + timeout
    try:
        if offset is None:
            _assign_at_start(consumer, topic, partition, timeout)
        else:
            consumer.assign([TopicPartition(topic, partition, offset)])
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            return None if _is_eof(msg) else _to_consumed(msg)
    finally:
        consumer.close()
    raise TimeoutError(f"record_at({topic}[{partition}], {offset}): nothing after {timeout}s")


def first_readable_offset(bootstrap: str, topic: str, partition: int, *, timeout: float = 30.0) -> int | None:
    """Offset of the first record a read_uncommitted consumer gets, None if empty."""
    found = record_at(bootstrap, topic, partition, None, "read_uncommitted", timeout=timeout)
    return None if found is None else found.offset


def wait_for_compaction(
    bootstrap: str,
    topic: str,
    partition: int,
    timeout: float = 30.0,
    *,
    roll_interval: float = 0.5,
) -> int:
    """Wait until compaction provably removed the record at the log start offset.

    Proof: the first readable offset is greater than the low watermark
    (compaction never moves the log start offset; only retention and
    delete_records do). Returns that first readable offset.

    The active segment is never cleaned, so every `roll_interval` seconds a
    filler record (key ROLL_KEY, empty value, timestamp now) is appended; with
    compacted_topic_config() each append rolls the segment, making all earlier
    data cleanable. Requirement on the data: the record at the log start must
    have its key repeated later, otherwise compaction keeps it and this times out.
    """
    deadline = time.monotonic() + timeout
    next_roll = 0.0
    producer = Producer({"bootstrap.servers": bootstrap, **_PRODUCER_CONFIG, "linger.ms": 0})
    try:
        while True:
            low, _high = watermarks(bootstrap, topic, partition)
            first = first_readable_offset(bootstrap, topic, partition)
            if first is not None and first > low:
                return first
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"no compaction of {topic}[{partition}] within {timeout}s: log start offset {low}, "
                    f"first readable offset {first}. Is the topic compacted with fast settings "
                    "(compacted_topic_config()) and is the first record's key repeated later?"
                )
            if now >= next_roll:
                errors: list[str] = []
                _send_all(producer, topic, partition, [Record(ROLL_KEY, b"")], errors)
                _flush(producer, 10.0, errors)
                next_roll = now + roll_interval
            time.sleep(0.1)
    finally:
        producer.close()


# ------------------------------------------------------------------------- internals


def admin_client(bootstrap: str) -> AdminClient:
    """An AdminClient whose librdkafka logs go to RDKAFKA_LOGGER."""
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": RDKAFKA_LOGGER}  # stub omits logger
    return AdminClient(config)


def _consumer(bootstrap: str, isolation: Isolation, *, group: str | None = None, reset: str = "earliest") -> Consumer:
    # By default a throwaway group id: we only assign() and never commit.
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "logger": RDKAFKA_LOGGER,
            "group.id": group or f"testkit-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": reset,
            "isolation.level": isolation,
            "max.partition.fetch.bytes": 10_485_760,
            # At the end of the log the broker holds a fetch this long; keep it
            # short so the partition-EOF event (our "done" signal) comes fast.
            "fetch.wait.max.ms": 10,
        }
    )


def _watermarks(consumer: Consumer, topic: str, partition: int, timeout: float) -> tuple[int, int]:
    # Retried until the deadline: right after a broker (re)start or pause the
    # partition may briefly have no leader ("Unknown partition").
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while True:
        remaining = deadline - time.monotonic()
        try:
            marks = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(0.1, min(remaining, 5.0)), cached=False
            )
            if marks is not None:
                return int(marks[0]), int(marks[1])
        except KafkaException as exc:
            last_error = str(exc.args[0] if exc.args else exc)
        if remaining <= 0:
            raise KafkaDataError(f"watermarks of {topic}[{partition}] within {timeout}s: {last_error}")
        time.sleep(0.1)


def _assign_at_start(consumer: Consumer, topic: str, partition: int, timeout: float) -> None:
    # Assigning OFFSET_BEGINNING costs librdkafka ~0.5 s before the first fetch;
    # an explicit low watermark starts at once. Should the log start move in
    # between, auto.offset.reset=earliest recovers.
    low, _high = _watermarks(consumer, topic, partition, timeout)
    consumer.assign([TopicPartition(topic, partition, low)])


def _result(future: Future[Any], what: str, timeout: float) -> Any:
    try:
        return future.result(timeout=timeout + 5)
    except KafkaException as exc:
        raise KafkaDataError(f"{what} failed: {exc.args[0] if exc.args else exc}") from None


def _leaders_ready(admin: AdminClient, name: str, partitions: int) -> bool:
    topic = admin.list_topics(topic=name, timeout=5).topics.get(name)
    if topic is None or topic.error is not None or len(topic.partitions) != partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())


def _wait_until(check: Callable[[], bool], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if check():
                return
        except KafkaException:
            pass  # transient while the cluster settles; retried until the deadline
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message} within {timeout}s")
        time.sleep(0.05)


def _send_all(producer: Producer, topic: str, partition: int, records: Iterable[Record], errors: list[str]) -> None:
    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None and len(errors) < 10:
            errors.append(f"key={msg.key()!r}: {err.str()}")

    for i, rec in enumerate(records):
        while True:
            try:
                producer.produce(
                    topic,
                    value=rec.value,
                    key=rec.key,
                    partition=partition,
                    timestamp=rec.timestamp_ms or 0,
                    headers=list(rec.headers) if rec.headers else None,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:  # local queue full: let deliveries drain
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)


def _flush(producer: Producer, timeout: float, errors: list[str]) -> None:
    remaining = producer.flush(timeout)
    if remaining:
        errors.append(f"{remaining} record(s) still undelivered after {timeout}s")
    if errors:
        raise KafkaDataError("produce failed: " + "; ".join(errors))


def _is_eof(msg: Message) -> bool:
    err = msg.error()
    if err is None:
        return False
    if err.code() == KafkaError._PARTITION_EOF:
        return True
    raise KafkaDataError(f"consume from {msg.topic()}[{msg.partition()}] failed: {err.str()}")


def _to_consumed(msg: Message) -> ConsumedRecord:
    ts_type, ts = msg.timestamp()
    raw = msg.headers() or []
    pairs = list(raw.items()) if isinstance(raw, dict) else raw  # consumers give lists; the stub allows dicts
    headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
    offset = msg.offset()
    assert offset is not None  # data messages always carry an offset
    return ConsumedRecord(offset, msg.key(), msg.value(), headers, ts, ts_type)


def _value_size(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.05:
        return 0
    if roll < 0.70:
        return rng.randint(1, 64)
    if roll < 0.98:
        return rng.randint(65, 1_024)
    return rng.randint(1_025, 10_240)


def _header_value(rng: random.Random) -> bytes | None:
    roll = rng.random()
    if roll < 0.2:
        return None
    if roll < 0.3:
        return b""
    return rng.randbytes(rng.randint(1, 24))
