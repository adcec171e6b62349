"""The /metrics exposition: Prometheus' linter accepts it, latency histograms count every record once."""

from __future__ import annotations

import subprocess

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from core.record_times import RecordTimes
from telemetry.metrics import MetricFamilies, MirrorMetrics
from testkit.tools import promtool


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_latency_of_a_committed_blob_counts_each_record_in_its_bucket() -> None:
    registry = CollectorRegistry()
    families = MetricFamilies(registry)
    metrics = MirrorMetrics.for_mirror(families, "prod", "orders", 3, "orders")
    now_ms = 1_700_000_000_000
    ages_ms = np.array([50] * 7 + [4_000] * 2 + [7_200_000], dtype=np.int64)
    metrics.observe_latency(RecordTimes.measure(now_ms - ages_ms, now_ms), committed_at_ms=now_ms + 100)
    found = samples(registry)

    def bucket(le: str) -> float:
        return found[
            (
                "mirror_v3_replication_latency_seconds_bucket",
                (("le", le), ("source_cluster", "prod"), ("topic", "orders")),
            )
        ]

    assert bucket("0.25") == 7  # 50 ms old, committed 100 ms later
    assert bucket("5.0") == 9
    assert bucket("3600.0") == 9 and bucket("21600.0") == 10 and bucket("+Inf") == 10
    total = found[("mirror_v3_replication_latency_seconds_sum", (("source_cluster", "prod"), ("topic", "orders")))]
    assert abs(total - (7 * 0.15 + 2 * 4.1 + 7200.1)) < 0.1 * 7200


def test_the_exposition_passes_promtool_and_has_no_created_series() -> None:
    registry = CollectorRegistry()
    families = MetricFamilies(registry)
    metrics = MirrorMetrics.for_mirror(families, "prod", "orders", 0, "orders")
    metrics.records.inc(5)
    metrics.read_seconds.observe(0.3)
    metrics.flush_seconds.observe(0.4)
    metrics.transaction_held.set_function(lambda: 12.0)
    for family in (families.mirrors, families.unassigned, families.discovery_errors, families.group_sync_offsets):
        family.labels(source_cluster="prod")
    text = generate_latest(registry).decode()
    lint = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    assert "_created" not in text
    found = samples(registry)
    build = [labels for name, labels in found if name == "mirror_v3_build_info"]
    assert len(build) == 1 and {"version", "python", "pyspark"} <= {key for key, _ in build[0]}
    held = ("destination", "orders"), ("partition", "0"), ("source_cluster", "prod"), ("topic", "orders")
    assert found[("mirror_v3_source_transaction_held_seconds", held)] == 12.0


def test_forgetting_the_last_mirror_of_a_topic_drops_its_histograms() -> None:
    registry = CollectorRegistry()
    families = MetricFamilies(registry)
    metrics = MirrorMetrics.for_mirror(families, "prod", "orders", 0, "orders")
    metrics.read_seconds.observe(1.0)
    families.forget(metrics.labels, topic_too=True)
    names = {name for name, _ in samples(registry)}
    assert not {n for n in names if n.startswith(("mirror_v3_read_duration", "mirror_v3_replication_latency"))}
    assert "mirror_v3_destination_records_total" not in names


def test_a_partition_costs_at_most_twelve_series_and_its_topic_carries_the_rest() -> None:
    registry = CollectorRegistry()
    families = MetricFamilies(registry)
    MirrorMetrics.for_mirror(families, "prod", "orders", 0, "orders").configure(1.0, 300.0)
    one = len(samples(registry))
    MirrorMetrics.for_mirror(families, "prod", "orders", 1, "orders").configure(1.0, 300.0)
    assert len(samples(registry)) - one <= 12
    per_partition = {name for name, labels in samples(registry) if dict(labels).get("partition") == "1"}
    assert "mirror_v3_destination_bytes_total" not in per_partition and len(per_partition) <= 12
    topic = (("destination", "orders"), ("source_cluster", "prod"), ("topic", "orders"))
    assert samples(registry)[("mirror_v3_destination_flush_max_time_seconds", topic)] == 1.0


def test_a_topics_sums_follow_each_partitions_own_value_across_restarts_and_removal() -> None:
    registry = CollectorRegistry()
    families = MetricFamilies(registry)
    first = MirrorMetrics.for_mirror(families, "prod", "orders", 0, "orders")
    second = MirrorMetrics.for_mirror(families, "prod", "orders", 1, "orders")
    topic = (("destination", "orders"), ("source_cluster", "prod"), ("topic", "orders"))

    def staged() -> float:
        return samples(registry)[("mirror_v3_staged_records", topic)]

    first.staged_records.set(100)
    second.staged_records.set(30)
    second.staged_records.dec(10)
    assert staged() == 120
    # A restarted mirror gets new children; its start sets 0, which takes its predecessor's share out.
    MirrorMetrics.for_mirror(families, "prod", "orders", 0, "orders").staged_records.set(0)
    assert staged() == 20
    first.staged_records.set(7)  # (the same mirror's share, whichever object sets it)
    families.forget(second.labels)
    assert staged() == 7
    families.forget(first.labels, topic_too=True)
    assert ("mirror_v3_staged_records", topic) not in samples(registry)


def test_a_topics_setting_is_the_largest_of_its_mirrors() -> None:
    registry = CollectorRegistry()
    families = MetricFamilies(registry)
    MirrorMetrics.for_mirror(families, "prod", "orders", 0, "orders").configure(10.0, 300.0)
    MirrorMetrics.for_mirror(families, "prod", "orders", 1, "orders").configure(1.0, 600.0)
    topic = (("destination", "orders"), ("source_cluster", "prod"), ("topic", "orders"))
    assert samples(registry)[("mirror_v3_destination_flush_max_time_seconds", topic)] == 10.0
    assert samples(registry)[("mirror_v3_source_transaction_hold_alert_seconds", topic)] == 600.0
