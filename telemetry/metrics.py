"""Prometheus metrics (SPEC §6). Every mirror's series carries `source_cluster` (the source cluster's name:
not `cluster`, which multi-cluster Prometheus set-ups put on every series of the cluster that scrapes it),
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
from core.version import installed_version

# Counters would each carry a `_created` series as well: twice the series for no use on a dashboard.
disable_created_metrics()  # type: ignore[no-untyped-call]

LABELS = ("source_cluster", "topic", "partition", "destination")
CLUSTER_LABELS = ("source_cluster",)
# Totals and sums over a topic's partitions, per destination (a topic may be mirrored to two destinations).
TOPIC_SERIES_LABELS = ("source_cluster", "topic", "destination")
TABLE_LABELS = ("table",)
# Histograms are per source topic, not per partition: a histogram is a dozen series, and an estate of
# thousands of partitions would pay that per partition for a distribution nobody reads per partition.
TOPIC_LABELS = ("source_cluster", "topic")
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


class GaugeShare:
    """One mirror's part of a gauge summed per topic (`SummedGauge`): the actor sets its own value."""

    def __init__(self, family: SummedGauge, mirror: tuple[str, ...]) -> None:
        self._family, self._mirror = family, mirror

    def set(self, value: float) -> None:
        self._family.set(self._mirror, value)

    def inc(self, amount: float = 1) -> None:
        self._family.set(self._mirror, self._family.share_of(self._mirror) + amount)

    def dec(self, amount: float = 1) -> None:
        self.inc(-amount)


class SummedGauge:
    """A gauge per (source_cluster, topic, destination) that is the sum of its mirrors' own values: the work in
    flight of a topic's partitions, exported once per topic rather than once per partition. Each mirror keeps
    its share (by its LABELS values), so a restarted mirror's `set(0)` takes its predecessor's part back out."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.gauge = Gauge(name, documentation, TOPIC_SERIES_LABELS, registry=registry)
        self._shares: dict[tuple[str, ...], float] = {}

    def share(self, mirror: tuple[str, ...]) -> GaugeShare:
        self.gauge.labels(*topic_of(mirror))
        return GaugeShare(self, mirror)

    def share_of(self, mirror: tuple[str, ...]) -> float:
        return self._shares.get(mirror, 0.0)

    def set(self, mirror: tuple[str, ...], value: float) -> None:
        before = self._shares.get(mirror, 0.0)
        self._shares[mirror] = value
        self.gauge.labels(*topic_of(mirror)).inc(value - before)

    def drop(self, mirror: tuple[str, ...]) -> None:
        """The mirror is gone: its share leaves the sum."""
        before = self._shares.pop(mirror, 0.0)
        with contextlib.suppress(KeyError):
            if before:
                self.gauge.labels(*topic_of(mirror)).inc(-before)


class TopicSetting:
    """A configured value per topic (max-time, the transaction-hold alert), for alerts to compare with: a topic's
    mirrors normally share one entry, and where entries differ the largest value is exported (an alert on that
    topic waits for its most patient mirror)."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.gauge = Gauge(name, documentation, TOPIC_SERIES_LABELS, registry=registry)
        self._values: dict[tuple[str, ...], float] = {}

    def set(self, mirror: tuple[str, ...], value: float) -> None:
        topic = topic_of(mirror)
        largest = max(value, self._values.get(topic, value))
        self._values[topic] = largest
        self.gauge.labels(*topic).set(largest)

    def drop_topic(self, topic: tuple[str, ...]) -> None:
        self._values.pop(topic, None)


def topic_of(mirror: tuple[str, ...]) -> tuple[str, str, str]:
    """A mirror's LABELS values → its TOPIC_SERIES_LABELS values."""
    cluster, topic, _partition, destination = mirror
    return cluster, topic, destination


class MetricFamilies:
    """All families, registered once per registry.

    Per partition (LABELS) only what an operator reads per partition: where it is (verified offset, log start),
    how far behind (lag in offsets and in time, what a transaction holds back), whether it writes (last flush,
    records, the retry in flight) and whether it failed. Everything else is per topic (TOPIC_SERIES_LABELS: totals
    and sums over its partitions, the configured limits alerts compare with) or per source cluster: an estate of
    thousands of partitions pays 10 series a partition, not 25.
    """

    def __init__(self, registry: CollectorRegistry = REGISTRY) -> None:
        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, LABELS, registry=registry)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, LABELS, registry=registry)

        def topic_counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, TOPIC_SERIES_LABELS, registry=registry)

        self.registry = registry
        # Per partition.
        self.offset_verified = gauge(
            "mirror_v3_destination_offset_verified",
            "Next source offset the destination would accept; everything below is durable.",
        )
        self.inflight_retry = gauge(
            "mirror_v3_destination_offset_inflight_retry",
            "Zero-based retry count of the destination write in flight (0 when healthy).",
        )
        self.records = counter("mirror_v3_destination_records", "Records durably written to the destination.")
        self.last_flush = gauge(
            "mirror_v3_destination_last_flush_timestamp_seconds", "Unix time of the most recent durable write."
        )
        self.source_log_start = gauge(
            "mirror_v3_source_log_start_offset",
            "Earliest offset the source partition still holds (offset_verified minus this: the margin before "
            "retention deletes what the mirror has not copied yet).",
        )
        self.source_lag = gauge(
            "mirror_v3_source_lag_offsets",
            "Source end offset (last stable offset when read_committed) minus mirror_v3_destination_offset_verified.",
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
        self.pending_age = gauge(
            "mirror_v3_oldest_pending_age_seconds",
            "Age of the oldest source record not yet durable at the destination (0 when caught up).",
        )
        self.flush_job = gauge(
            "mirror_v3_flush_job_seconds",
            "How long the mirror's flush in flight has been in its Spark job (0 when none): past about a second in a "
            "shared job, the mirror waits on its neighbours' reads (its state is held-by-job).",
        )
        self.families = [
            self.offset_verified,
            self.inflight_retry,
            self.records,
            self.last_flush,
            self.source_log_start,
            self.source_lag,
            self.failed,
            self.high_watermark_lag,
            self.transaction_held,
            self.pending_age,
            self.flush_job,
        ]

        # Per source topic and destination: totals over its partitions.
        self.staging_retries = topic_counter(
            "mirror_v3_destination_staging_retries",
            "Transient destination failures retried inside Spark tasks (S3 part uploads, aborted Kafka transactions).",
        )
        self.bytes = topic_counter("mirror_v3_destination_bytes", "Bytes durably written to the destination.")
        self.flushes = topic_counter(
            "mirror_v3_destination_flushes", "Durable destination writes (files, objects, Kafka batches/transactions)."
        )
        self.gap_records = topic_counter(
            "mirror_v3_source_offset_gap_records",
            "Source offsets read that hold no record (compaction, transaction markers, aborted records).",
        )
        self.lost_records = topic_counter(
            "mirror_v3_source_lost_records",
            "Source offsets deleted before they were mirrored and skipped (on-data-loss: skip); the WARN line "
            "names the partition and offsets.",
        )
        self.loop_skipped = topic_counter(
            "mirror_v3_loop_skipped_records",
            "renumber: records not copied because a mirror copied them from this destination cluster (two-way).",
        )
        self.schema_unframed = topic_counter(
            "mirror_v3_schema_unframed_records",
            "schemas: records copied with a key or value that is not in the schema registry's wire format (as is).",
        )
        self.restarts = topic_counter(
            "mirror_v3_mirror_restarts",
            "Restarts of this topic's mirrors after a failure (on-mirror-failure: restart); mirror_v3_mirror_failed "
            "names the partition.",
        )
        self.reading = SummedGauge(
            "mirror_v3_read_inflight_offsets",
            "Source offsets the Spark jobs in flight are reading and staging, over the topic's partitions.",
            registry,
        )
        self.staged_records = SummedGauge(
            "mirror_v3_staged_records",
            "Records written by Spark jobs and not yet committed (durable), over the topic's partitions.",
            registry,
        )
        self.staged_bytes = SummedGauge(
            "mirror_v3_staged_bytes",
            "Record bytes written by Spark jobs and not yet committed (durable), over the topic's partitions.",
            registry,
        )
        self.flush_max_time = TopicSetting(
            "mirror_v3_destination_flush_max_time_seconds",
            "The configured flush.max-time-ms, in seconds (alerts compare the flush age with it).",
            registry,
        )
        self.transaction_hold_alert = TopicSetting(
            "mirror_v3_source_transaction_hold_alert_seconds",
            "The configured source.transaction-hold-alert-ms, in seconds (the alert compares the hold with it).",
            registry,
        )
        self.topic_families = [
            self.staging_retries,
            self.bytes,
            self.flushes,
            self.gap_records,
            self.lost_records,
            self.loop_skipped,
            self.schema_unframed,
            self.restarts,
        ]
        self.summed = [self.reading, self.staged_records, self.staged_bytes]
        self.settings = [self.flush_max_time, self.transaction_hold_alert]

        # The process's destination.
        self.destination_up = Gauge(
            "mirror_v3_destination_up",
            "1 while the destination takes writes, 0 while any mirror is retrying one (from the first retry of a "
            "spell until no mirror retries); `location`: the destination's root (directory, bucket and prefix, "
            "or bootstrap servers).",
            ["location"],
            registry=registry,
        )

        # Per source cluster.
        self.source_retries = Counter(
            "mirror_v3_source_retries",
            "Source offset and metadata queries asked again because the source did not answer (outage ridden out).",
            CLUSTER_LABELS,
            registry=registry,
        )

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

        # The process's Spark jobs (workers.flush_scheduler): whether the estate fits its machine.
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
        self.schema_registry_up = Gauge(
            "mirror_v3_schema_registry_up",
            "1 while the schema registry answers the supervisor's probe (every 5 s), 0 from the first unanswered one "
            "until one is answered again; only registries an entry with `schemas` uses.",
            ["registry"],
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

        # The archive's tables (destination.table): per partition where its table is, per table its commits.
        self.table_next_offset = gauge(
            "mirror_v3_table_next_offset", "The chain offset the archive's table holds up to (exclusive)."
        )
        self.table_lag = gauge("mirror_v3_table_lag_records", "Offsets durable in the chain and not yet in its table.")
        self.table_lag_seconds = gauge(
            "mirror_v3_table_lag_seconds", "How long the table has been behind the chain (0: it holds every blob)."
        )
        self.table_commit = Histogram(
            "mirror_v3_table_commit_seconds",
            "Duration of one table commit (every blob of its chains since the last).",
            TABLE_LABELS,
            buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=registry,
        )
        self.table_commit_failures = Counter(
            "mirror_v3_table_commit_failures",
            "Failed reads or commits of a table (tried again at the next interval; the mirrors go on).",
            TABLE_LABELS,
            registry=registry,
        )
        self.table_up = Gauge(
            "mirror_v3_table_up",
            "1 while the table's reads and commits work, 0 while they fail.",
            TABLE_LABELS,
            registry=registry,
        )

        # The archive's upkeep in the running mirror (destination.compaction.interval-ms, destination.retention).
        self.archive_blobs = gauge(
            "mirror_v3_archive_blobs", "Blobs of the chain (redundant ones not counted), as its last upkeep listed it."
        )
        self.archive_bytes = gauge("mirror_v3_archive_bytes", "File bytes of those blobs.")
        self.families += [self.archive_blobs, self.archive_bytes]  # forgotten with their mirror
        self.archive_upkeep_blobs = Counter(
            "mirror_v3_archive_upkeep_blobs",
            "Blobs the running mirror's upkeep merged into bigger ones (compaction) or removed (prune).",
            ("task",),
            registry=registry,
        )
        self.archive_upkeep_bytes = Counter(
            "mirror_v3_archive_upkeep_bytes",
            "Blob bytes the upkeep read to merge (compaction) or removed (prune).",
            ("task",),
            registry=registry,
        )
        self.archive_upkeep_failures = Counter(
            "mirror_v3_archive_upkeep_failures",
            "Chains (or document directories) whose compaction or prune failed in a round (tried again the next).",
            ("task",),
            registry=registry,
        )
        self.archive_upkeep_last = Gauge(
            "mirror_v3_archive_upkeep_last_timestamp_seconds",
            "Unix time the last compaction or prune round of the running mirror finished.",
            ("task",),
            registry=registry,
        )

    def forget(self, labels: dict[str, str], topic_too: bool = False) -> None:
        """Drop one mirror's series (its source topic is gone): no stale values linger on dashboards.
        `topic_too`: it was the topic's last mirror, so its per-topic series and histograms go as well."""
        mirror = tuple(labels[name] for name in LABELS)
        for family in self.families:
            with contextlib.suppress(KeyError):
                family.remove(*mirror)
        for summed in self.summed:
            summed.drop(mirror)
        if topic_too:
            series = topic_of(mirror)
            gauges = [summed.gauge for summed in self.summed] + [setting.gauge for setting in self.settings]
            for each in [*self.topic_families, *gauges]:
                with contextlib.suppress(KeyError):
                    each.remove(*series)
            for setting in self.settings:
                setting.drop_topic(series)
            topic = tuple(labels[name] for name in TOPIC_LABELS)
            self.latency.remove(topic)
            for histogram in (self.read_seconds, self.flush_seconds):
                with contextlib.suppress(KeyError):
                    histogram.remove(*topic)

    def mark_failed(self, labels: dict[str, str], failed: bool) -> None:
        self.failed.labels(**labels).set(1 if failed else 0)

    def count_restart(self, labels: dict[str, str]) -> None:
        self.restarts.labels(*topic_of(tuple(labels[name] for name in LABELS))).inc()


def build_labels() -> dict[str, str]:
    return {
        "version": installed_version("mirror-v3") or "unknown",
        "python": platform.python_version(),
        "pyspark": installed_version("pyspark") or "unknown",
    }


@dataclass
class MirrorMetrics:
    """The label children of one mirror (its own, its topic's, its cluster's), so the actor never deals with
    labels."""

    # This mirror's.
    offset_verified: Gauge
    inflight_retry: Gauge
    records: Counter
    last_flush: Gauge
    source_log_start: Gauge
    source_lag: Gauge
    high_watermark_lag: Gauge
    transaction_held: Gauge
    pending_age: Gauge
    flush_job: Gauge
    # Its topic's: totals, and its share of the sums.
    staging_retries: Counter
    bytes: Counter
    flushes: Counter
    gap_records: Counter
    loop_skipped: Counter
    schema_unframed: Counter
    lost_records: Counter
    reading: GaugeShare
    staged_records: GaugeShare
    staged_bytes: GaugeShare
    read_seconds: Histogram
    flush_seconds: Histogram
    latency_family: CountedHistogram
    # Its source cluster's.
    source_retries: Counter

    labels: dict[str, str]
    families: MetricFamilies

    def observe_latency(self, times: RecordTimes, committed_at_ms: int) -> None:
        """Every record of a committed range, by its timestamp."""
        topic = (self.labels["source_cluster"], self.labels["topic"])
        for seconds, records in times.latencies(committed_at_ms):
            self.latency_family.observe(topic, seconds, records)

    def configure(self, flush_max_time_s: float, transaction_hold_alert_s: float) -> None:
        """The mirror's configured limits, for alerts to compare with (per topic: the largest of its mirrors')."""
        mirror = tuple(self.labels[name] for name in LABELS)
        self.families.flush_max_time.set(mirror, flush_max_time_s)
        self.families.transaction_hold_alert.set(mirror, transaction_hold_alert_s)

    @classmethod
    def for_mirror(
        cls, families: MetricFamilies, cluster: str, topic: str, partition: int, destination: str
    ) -> MirrorMetrics:
        labels = {"source_cluster": cluster, "topic": topic, "partition": str(partition), "destination": destination}
        mirror = (cluster, topic, str(partition), destination)
        series = topic_of(mirror)
        families.latency.labels((cluster, topic))
        families.failed.labels(*mirror)  # 0 from the start: "not failed" is a value, not a missing series
        return cls(
            labels=labels,
            families=families,
            offset_verified=families.offset_verified.labels(*mirror),
            inflight_retry=families.inflight_retry.labels(*mirror),
            records=families.records.labels(*mirror),
            last_flush=families.last_flush.labels(*mirror),
            source_log_start=families.source_log_start.labels(*mirror),
            source_lag=families.source_lag.labels(*mirror),
            high_watermark_lag=families.high_watermark_lag.labels(*mirror),
            transaction_held=families.transaction_held.labels(*mirror),
            pending_age=families.pending_age.labels(*mirror),
            flush_job=families.flush_job.labels(*mirror),
            staging_retries=families.staging_retries.labels(*series),
            bytes=families.bytes.labels(*series),
            flushes=families.flushes.labels(*series),
            gap_records=families.gap_records.labels(*series),
            loop_skipped=families.loop_skipped.labels(*series),
            schema_unframed=families.schema_unframed.labels(*series),
            lost_records=families.lost_records.labels(*series),
            reading=families.reading.share(mirror),
            staged_records=families.staged_records.share(mirror),
            staged_bytes=families.staged_bytes.share(mirror),
            read_seconds=families.read_seconds.labels(cluster, topic),
            flush_seconds=families.flush_seconds.labels(cluster, topic),
            latency_family=families.latency,
            source_retries=families.source_retries.labels(cluster),
        )
