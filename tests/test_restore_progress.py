"""A restore's series: `run`'s families, labelled by the archived chain and the topic restored into, moved by
each produced range; no flush-timer series, since a restore has no timer."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from commands.restore_progress import RestoreMetrics
from sinks.kafka.produce import ProducedRange
from telemetry.metrics import MetricFamilies

TOPIC = {"source_cluster": "archive", "topic": "orders", "destination": "orders-back"}
LABELS = {**TOPIC, "partition": "2"}


@dataclass
class Part:
    archived: str = "orders"
    partition: int = 2
    topic: str = "orders-back"
    first: int = 100
    end: int = 1_100
    position: int | None = 400  # a rerun: the destination already holds 100-399
    records: int = 0
    record_bytes: int = 0

    @property
    def name(self) -> str:
        return f"{self.archived}/{self.partition}"


def sample(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name, LABELS)


def topic_sample(registry: CollectorRegistry, name: str) -> float | None:
    return registry.get_sample_value(name, TOPIC)


def test_the_series_follow_the_archived_range_and_what_was_produced() -> None:
    registry = CollectorRegistry()
    metrics, part = RestoreMetrics(MetricFamilies(registry)), Part()
    metrics.opened(part)
    assert sample(registry, "mirror_v3_source_log_start_offset") == 100
    assert sample(registry, "mirror_v3_destination_offset_verified") == 400
    assert sample(registry, "mirror_v3_source_lag_offsets") == 700

    part.position = 600
    metrics.produced(
        part,
        ProducedRange(
            first=400,
            last=599,
            records=190,
            record_bytes=19_000,
            destination_first=None,
            destination_last=None,
            retries=1,
        ),
    )
    assert sample(registry, "mirror_v3_destination_records_total") == 190
    assert topic_sample(registry, "mirror_v3_destination_bytes_total") == 19_000
    assert topic_sample(registry, "mirror_v3_destination_flushes_total") == 1
    assert topic_sample(registry, "mirror_v3_source_offset_gap_records_total") == 10  # 200 offsets, 190 records
    assert topic_sample(registry, "mirror_v3_destination_staging_retries_total") == 1
    assert sample(registry, "mirror_v3_source_lag_offsets") == 500
    assert (sample(registry, "mirror_v3_destination_last_flush_timestamp_seconds") or 0) > 0
    assert topic_sample(registry, "mirror_v3_destination_flush_max_time_seconds") is None
