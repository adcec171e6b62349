"""Prometheus metrics (SPEC §6). Every series carries `topic` and `partition` labels."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import REGISTRY

from supervisor.logs import log_event

LABELS = ("topic", "partition")
DEFAULT_METRICS_PORT = 9090
log = logging.getLogger("mirror_v3.metrics")


class MetricFamilies:
    """All families, registered once per registry."""

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry)

        self.registry = registry
        self.offset_verified = gauge(
            "mirror_v3_destination_offset_verified",
            "Next source offset the destination would accept; everything below is durable.",
        )
        self.inflight_retry = gauge(
            "mirror_v3_destination_offset_inflight_retry",
            "Zero-based retry count of the destination write in flight (0 when healthy).",
        )
        self.staging_retries = counter(
            "mirror_v3_destination_staging_retries",
            "Transient destination failures retried inside Spark tasks (S3 part uploads, aborted Kafka transactions).",
        )
        self.records = counter("mirror_v3_destination_records", "Records durably written to the destination.")
        self.bytes = counter("mirror_v3_destination_bytes", "Bytes durably written to the destination.")
        self.flushes = counter(
            "mirror_v3_destination_flushes", "Durable destination writes (files, objects, Kafka batches/transactions)."
        )
        self.last_flush = gauge(
            "mirror_v3_destination_last_flush_timestamp_seconds", "Unix time of the most recent durable write."
        )
        self.flush_max_time = gauge(
            "mirror_v3_destination_flush_max_time_seconds",
            "The configured flush.max-time-ms, in seconds (alerts compare the flush age with it).",
        )
        self.gap_records = counter(
            "mirror_v3_source_offset_gap_records",
            "Source offsets read that hold no record (compaction, transaction markers, aborted records).",
        )
        self.lost_records = counter(
            "mirror_v3_source_lost_records",
            "Source offsets deleted before they were mirrored and skipped (on-data-loss: skip).",
        )
        self.source_log_start = gauge(
            "mirror_v3_source_log_start_offset", "Earliest offset the source partition still holds."
        )
        self.source_end = gauge(
            "mirror_v3_source_end_offset",
            "Offset a reader may read up to (last stable offset when read_committed).",
        )
        self.source_lag = gauge(
            "mirror_v3_source_lag_offsets",
            "Source end offset minus mirror_v3_destination_offset_verified.",
        )


@dataclass
class MirrorMetrics:
    """The label children of one mirror, so the actor never deals with labels."""

    offset_verified: Gauge
    inflight_retry: Gauge
    staging_retries: Counter
    records: Counter
    bytes: Counter
    flushes: Counter
    last_flush: Gauge
    flush_max_time: Gauge
    gap_records: Counter
    lost_records: Counter
    source_log_start: Gauge
    source_end: Gauge
    source_lag: Gauge

    @classmethod
    def for_partition(cls, families: MetricFamilies, topic: str, partition: int) -> MirrorMetrics:
        labels = {"topic": topic, "partition": str(partition)}
        return cls(
            offset_verified=families.offset_verified.labels(**labels),
            inflight_retry=families.inflight_retry.labels(**labels),
            staging_retries=families.staging_retries.labels(**labels),
            records=families.records.labels(**labels),
            bytes=families.bytes.labels(**labels),
            flushes=families.flushes.labels(**labels),
            last_flush=families.last_flush.labels(**labels),
            flush_max_time=families.flush_max_time.labels(**labels),
            gap_records=families.gap_records.labels(**labels),
            lost_records=families.lost_records.labels(**labels),
            source_log_start=families.source_log_start.labels(**labels),
            source_end=families.source_end.labels(**labels),
            source_lag=families.source_lag.labels(**labels),
        )


def metrics_port() -> int:
    raw = os.environ.get("MIRROR_V3_METRICS_PORT", str(DEFAULT_METRICS_PORT))
    try:
        port = int(raw)
    except ValueError:
        log_event(
            log, logging.WARNING, "invalid MIRROR_V3_METRICS_PORT, using default", value=raw, port=DEFAULT_METRICS_PORT
        )
        return DEFAULT_METRICS_PORT
    return port
