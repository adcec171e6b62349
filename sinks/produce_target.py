"""What a Spark task needs to produce a source range into the Kafka destination, and what it reports.

For the Kafka destination the tasks write the records themselves, so none reaches the driver:
- preserve: an idempotent producer appends the range; every delivered offset must equal its source
  offset, so a range with a hole or a partition another producer writes to fails instead of landing
  misaligned;
- renumber: one transaction per range, by a producer with the partition's fixed `transactional.id`,
  that also commits the range's end as the position of consumer group `group_id`. Who may write is
  recorded apart, as the committed offset of group `owner_group` for the same partition: the id of
  the process that took the partition over last (`writer`). A task writes only when its process is
  that owner and the position is the one its driver expects. (The id is an offset, not offset
  metadata: confluent-kafka reads committed metadata past its end.)

The driver's sink decides the target per job (`KafkaSink.staging`) and records each reported range as
committed (`KafkaSink.commit`). The target is a small frozen value: it travels to the executors inside
the job's closure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from core.record_times import RecordTimes

if TYPE_CHECKING:  # sinks.retry's sink wrapper names the types of this module
    from sinks.retry import RetryPolicy


@dataclass(frozen=True)
class KafkaProduceTarget:
    bootstrap_servers: str
    topic: str
    partition: int
    offsets: Literal["preserve", "renumber"]
    source_name: str  # "<topic>-<partition>" of the source, for messages and the position's metadata
    transactional_id: str  # renumber: fixed per destination partition, so a newer producer fences an older one
    group_id: str  # renumber: the group whose committed offset is the position
    owner_group: str  # renumber: the group whose committed offset names the process that owns the partition
    writer: int  # renumber: this process's id, committed in `owner_group` when it took the partition over
    expected: int | None  # renumber: the position the driver knows (None: the group holds none)
    compression: str | None
    max_batch_bytes: int
    request_timeout_ms: int
    retry: RetryPolicy  # transient failures: a transaction is aborted and run again until the deadline
    client_properties: Mapping[str, str] = field(default_factory=dict, repr=False)  # security, credentials
    # renumber: the source cluster's id, written on every record; records copied from `skip_cluster` (the
    # destination's id) are not written back to it. None: no such header (a restore's archive has no cluster).
    source_cluster: str | None = None
    skip_cluster: str | None = None

    @property
    def name(self) -> str:
        return f"destination {self.topic}-{self.partition}"


@dataclass(frozen=True)
class ProducedRange:
    """Source offsets [first, last] are at the destination, durably (renumber: committed with the position).
    Offsets of the range with no record were holes at the source."""

    first: int
    last: int
    records: int
    record_bytes: int  # keys, values and headers as read from the source
    destination_first: int | None  # offsets the records got at the destination (None: no records)
    destination_last: int | None
    retries: int = 0  # transactions the task aborted and ran again after a transient failure
    skipped: int = 0  # renumber: records copied from the destination cluster, left out (they came from there)
    times: RecordTimes | None = None  # the records' timestamps, for latency metrics (None: not measured)
