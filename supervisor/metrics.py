"""Prometheus metrics (SPEC §6). Every mirror's series carries `cluster` (the source cluster's name),
`topic`, `partition` (the source's, so joins with kafka_exporter on topic and partition work) and
`destination` (the destination topic, directory or key segment): two mirrors of one process never
share a series, not even the same topic and partition of two clusters."""

from __future__ import annotations

import bisect
import contextlib
import platform
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.core import REGISTRY, HistogramMetricFamily
from prometheus_client.registry import Collector

from core.record_times import RecordTimes
from supervisor.version import installed_version

# Counters would each carry a `_created` series as well: twice the series for no use on a dashboard.
disable_created_metrics()  # type: ignore[no-untyped-call]

LABELS = ("cluster", "topic", "partition", "destination")
CLUSTER_LABELS = ("cluster",)
# Histograms are per source topic, not per partition: a histogram is a dozen series, and an estate of
# thousands of partitions would pay that per partition for a distribution nobody reads per partition.
TOPIC_LABELS = ("cluster", "topic")
LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900, 1800, 3600, 21600, 86400)
READ_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FLUSH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class CountedHistogram(Collector):
    """A histogram that takes many equal observations at once (`observe(value, count)`).

    Replication latency arrives as a summary of a whole blob's records (`RecordTimes`), not one call per
    record; prometheus_client's Histogram observes one value at a time. Exposed exactly as a histogram.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: tuple[str, ...],
        buckets: tuple[float, ...],
        registry: CollectorRegistry,
    ) -> None:
        self._name, self._doc, self._labelnames, self._bounds = name, documentation, labelnames, list(buckets)
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}  # per-bucket counts, [sum]
        self._lock = threading.Lock()  # scrapes run in a worker thread
        registry.register(self)

    def labels(self, labels: tuple[str, ...]) -> None:
        """Create the series with zero counts (as prometheus_client does for a labelled child)."""
        with self._lock:
            self._series.setdefault(labels, ([0] * (len(self._bounds) + 1), [0.0]))

    def observe(self, labels: tuple[str, ...], value: float, count: int = 1) -> None:
        with self._lock:
            counts, total = self._series.setdefault(labels, ([0] * (len(self._bounds) + 1), [0.0]))
            counts[bisect.bisect_left(self._bounds, value)] += count
            total[0] += value * count

    def remove(self, labels: tuple[str, ...]) -> None:
        with self._lock:
            self._series.pop(labels, None)

    def describe(self) -> Iterable[HistogramMetricFamily]:
        return [HistogramMetricFamily(self._name, self._doc, labels=self._labelnames)]

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self._name, self._doc, labels=self._labelnames)
        with self._lock:
            for labels, (counts, total) in self._series.items():
                cumulative, buckets = 0, []
                for bound, count in zip([*self._bounds, float("inf")], counts, strict=True):
                    cumulative += count
                    buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), cumulative))
                family.add_metric(list(labels), buckets, total[0])
        yield family


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
        self.high_watermark_lag = gauge(
            "mirror_v3_source_high_watermark_lag_offsets",
            "Source high watermark minus mirror_v3_destination_offset_verified: includes records an open "
            "transaction holds back (and transaction markers).",
        )
        self.transaction_held = gauge(
            "mirror_v3_source_transaction_held_seconds",
            "How long the mirror has waited at the source's last stable offset for an open transaction to end "
            "(0 when not held).",
        )
        self.transaction_hold_alert = gauge(
            "mirror_v3_source_transaction_hold_alert_seconds",
            "The configured source.transaction-hold-alert-ms, in seconds (the alert compares the hold with it).",
        )
        self.pending_age = gauge(
            "mirror_v3_oldest_pending_age_seconds",
            "Age of the oldest source record not yet durable at the destination (0 when caught up).",
        )
        self.read_next = gauge(
            "mirror_v3_read_next_offset", "Next source offset to read: the end of what is read or being read."
        )
        self.reading = gauge(
            "mirror_v3_read_inflight_offsets", "Source offsets the Spark job in flight is reading and staging."
        )
        self.staged_records = gauge(
            "mirror_v3_staged_records", "Records written by the Spark job and not yet committed (durable)."
        )
        self.staged_bytes = gauge(
            "mirror_v3_staged_bytes", "Record bytes written by the Spark job and not yet committed (durable)."
        )
        self.source_retries = counter(
            "mirror_v3_source_retries",
            "Source offset and metadata queries asked again because the source did not answer (outage ridden out).",
        )
        self.families = [
            self.source_retries,
            self.high_watermark_lag,
            self.transaction_held,
            self.transaction_hold_alert,
            self.pending_age,
            self.read_next,
            self.reading,
            self.staged_records,
            self.staged_bytes,
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
        # Per source topic: distributions.
        self.latency = CountedHistogram(
            "mirror_v3_replication_latency_seconds",
            "Record timestamp to durable commit at the destination, per record (within 19 %).",
            TOPIC_LABELS,
            LATENCY_BUCKETS,
            registry,
        )
        self.read_seconds = Histogram(
            "mirror_v3_read_duration_seconds",
            "Time a Spark job took to read its offset ranges and stage (or produce) them.",
            TOPIC_LABELS,
            buckets=READ_BUCKETS,
            registry=registry,
        )
        self.flush_seconds = Histogram(
            "mirror_v3_flush_duration_seconds",
            "Time from the start of a flush's Spark job to the durable commit of each of its blobs or ranges.",
            TOPIC_LABELS,
            buckets=FLUSH_BUCKETS,
            registry=registry,
        )
        self.build = Info("mirror_v3_build", "The running version of mirror-v3 and its runtimes.", registry=registry)
        self.build.info(build_labels())

        # The process's Spark jobs (supervisor.flush_scheduler): whether the estate fits its machine.
        self.spark_jobs = Counter(
            "mirror_v3_spark_jobs",
            "Spark jobs run for flushes: lane=shared (small flushes of many partitions in one job) or own (a "
            "backlog's flush, a job of its own).",
            ["lane"],
            registry=registry,
        )
        self.job_partitions = Histogram(
            "mirror_v3_spark_job_partitions",
            "Partitions (flushes) one Spark job carries.",
            ["lane"],
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
            registry=registry,
        )
        self.flush_wait = Histogram(
            "mirror_v3_flush_wait_seconds",
            "Time from a flush falling due to its Spark job starting: grows when the estate outgrows the machine.",
            ["lane"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )

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
        self.source_cluster_up = Gauge(
            "mirror_v3_source_cluster_up",
            "1 while the source cluster answers, 0 from its first unanswered request until one is answered again.",
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

        # Per source cluster: the mirrors' positions committed to source groups (source.commit-source-offsets).
        self.source_commits = Counter(
            "mirror_v3_source_offset_commits",
            "Mirror positions (one per partition) committed to their group on the source cluster.",
            CLUSTER_LABELS,
            registry=registry,
        )
        self.source_commit_failures = Counter(
            "mirror_v3_source_offset_commit_failures",
            "Failed commits of mirror positions to a source group (retried; informational only).",
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

    def forget(self, labels: dict[str, str], topic_too: bool = False) -> None:
        """Drop one mirror's series (its source topic is gone): no stale values linger on dashboards.
        `topic_too`: it was the topic's last mirror, so its histograms go as well."""
        for family in self.families:
            with contextlib.suppress(KeyError):
                family.remove(*(labels[name] for name in LABELS))
        if topic_too:
            topic = tuple(labels[name] for name in TOPIC_LABELS)
            self.latency.remove(topic)
            for histogram in (self.read_seconds, self.flush_seconds):
                with contextlib.suppress(KeyError):
                    histogram.remove(*topic)


def build_labels() -> dict[str, str]:
    return {
        "version": installed_version("mirror-v3") or "unknown",
        "python": platform.python_version(),
        "pyspark": installed_version("pyspark") or "unknown",
    }


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
    high_watermark_lag: Gauge
    source_retries: Counter
    transaction_held: Gauge
    transaction_hold_alert: Gauge
    pending_age: Gauge
    read_next: Gauge
    reading: Gauge
    staged_records: Gauge
    staged_bytes: Gauge
    read_seconds: Histogram
    flush_seconds: Histogram
    latency_family: CountedHistogram

    labels: dict[str, str]

    def observe_latency(self, times: RecordTimes, committed_at_ms: int) -> None:
        """Every record of a committed range, by its timestamp."""
        topic = (self.labels["cluster"], self.labels["topic"])
        for seconds, records in times.latencies(committed_at_ms):
            self.latency_family.observe(topic, seconds, records)

    @classmethod
    def for_mirror(
        cls, families: MetricFamilies, cluster: str, topic: str, partition: int, destination: str
    ) -> MirrorMetrics:
        labels = {"cluster": cluster, "topic": topic, "partition": str(partition), "destination": destination}
        families.latency.labels((cluster, topic))
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
            high_watermark_lag=families.high_watermark_lag.labels(**labels),
            source_retries=families.source_retries.labels(**labels),
            transaction_held=families.transaction_held.labels(**labels),
            transaction_hold_alert=families.transaction_hold_alert.labels(**labels),
            pending_age=families.pending_age.labels(**labels),
            read_next=families.read_next.labels(**labels),
            reading=families.reading.labels(**labels),
            staged_records=families.staged_records.labels(**labels),
            staged_bytes=families.staged_bytes.labels(**labels),
            read_seconds=families.read_seconds.labels(cluster=cluster, topic=topic),
            flush_seconds=families.flush_seconds.labels(cluster=cluster, topic=topic),
            latency_family=families.latency,
        )
