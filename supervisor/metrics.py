"""Prometheus metrics (SPEC §6). Every mirror's series carries `cluster` (the source cluster's name),
`topic`, `partition` (the source's, so joins with kafka_exporter on topic and partition work) and
`destination` (the destination topic, directory or key segment): two mirrors of one process never
share a series, not even the same topic and partition of two clusters."""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import REGISTRY

from supervisor.logs import log_event

LABELS = ("cluster", "topic", "partition", "destination")
CLUSTER_LABELS = ("cluster",)
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
        self.loop_skipped = counter(
            "mirror_v3_loop_skipped_records",
            "renumber: records not copied because a mirror copied them from this destination cluster (two-way).",
        )
        self.restarts = counter(
            "mirror_v3_mirror_restarts",
            "Restarts of this mirror after a failure (on-mirror-failure: restart).",
        )
        self.failed = gauge(
            "mirror_v3_mirror_failed",
            "1 while this mirror is failed: waiting to restart, or stopped for good by a correctness error.",
        )
        self.families = [
            self.restarts,
            self.failed,
            self.offset_verified,
            self.inflight_retry,
            self.staging_retries,
            self.records,
            self.bytes,
            self.flushes,
            self.last_flush,
            self.flush_max_time,
            self.gap_records,
            self.loop_skipped,
            self.lost_records,
            self.source_log_start,
            self.source_end,
            self.source_lag,
        ]
        # Per cluster: what discovery found and runs.
        self.mirrors = Gauge(
            "mirror_v3_mirrors", "Mirrors (actors) running in this process.", CLUSTER_LABELS, registry=registry
        )
        self.unassigned = Gauge(
            "mirror_v3_discovery_unassigned_partitions",
            "Partitions a selection matches that have no running mirror in this process and belong to no other "
            "shard (not started yet, or stopped by a failure).",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.discovery_errors = Counter(
            "mirror_v3_discovery_errors",
            "Failed reads of a source cluster's topics and partitions (retried at the next interval).",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.removed = Counter(
            "mirror_v3_discovery_removed_partitions",
            "Mirrors stopped because their source topic was deleted.",
            CLUSTER_LABELS,
            registry=registry,
        )

        # Per source cluster: consumer-group offset sync (destination.sync-groups).
        self.group_sync_groups = Gauge(
            "mirror_v3_group_sync_groups",
            "Groups whose offsets the last sync wrote to the destination.",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.group_sync_offsets = Counter(
            "mirror_v3_group_sync_offsets",
            "Group offsets (one per group and partition) written to the destination.",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.group_sync_skipped = Gauge(
            "mirror_v3_group_sync_skipped_groups",
            "Groups the last sync left alone because they have members on the destination.",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.group_sync_failures = Counter(
            "mirror_v3_group_sync_failures",
            "Group offsets that could not be read, translated or written (tried again at the next sync).",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.group_sync_last = Gauge(
            "mirror_v3_group_sync_last_timestamp_seconds",
            "Unix time the last group offset sync finished.",
            CLUSTER_LABELS,
            registry=registry,
        )

    def forget(self, labels: dict[str, str]) -> None:
        """Drop one mirror's series (its source topic is gone): no stale values linger on dashboards."""
        for family in self.families:
            with contextlib.suppress(KeyError):
                family.remove(*(labels[name] for name in LABELS))


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
    loop_skipped: Counter
    lost_records: Counter
    source_log_start: Gauge
    source_end: Gauge
    source_lag: Gauge

    labels: dict[str, str]

    @classmethod
    def for_mirror(
        cls, families: MetricFamilies, cluster: str, topic: str, partition: int, destination: str
    ) -> MirrorMetrics:
        labels = {"cluster": cluster, "topic": topic, "partition": str(partition), "destination": destination}
        return cls(
            labels=labels,
            offset_verified=families.offset_verified.labels(**labels),
            inflight_retry=families.inflight_retry.labels(**labels),
            staging_retries=families.staging_retries.labels(**labels),
            records=families.records.labels(**labels),
            bytes=families.bytes.labels(**labels),
            flushes=families.flushes.labels(**labels),
            last_flush=families.last_flush.labels(**labels),
            flush_max_time=families.flush_max_time.labels(**labels),
            gap_records=families.gap_records.labels(**labels),
            loop_skipped=families.loop_skipped.labels(**labels),
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
