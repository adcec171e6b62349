"""deploy/: every kustomization builds (kubectl kustomize) into objects that validate against Kubernetes' own
schemas, the manifests say what SPEC §7 and the adoption checklist ask, and only use metrics the code exports."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from config import parse_config
from telemetry.metrics import MetricFamilies, MirrorMetrics
from testkit.tools import helm, promtool

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
# Every YAML file under deploy/kubernetes but the mirror's own config (a ConfigMap's source, not a manifest).
MANIFESTS = sorted(p for p in (DEPLOY / "kubernetes").rglob("*.yaml") if p.name != "config.yaml")
DASHBOARD = DEPLOY / "grafana" / "mirror-v3-dashboard.json"
METRIC_NAME = re.compile(r"\b((?:mirror_v3|process)_[a-z0-9_]+)\b")


KUSTOMIZATIONS = sorted(path.parent for path in (DEPLOY / "kubernetes").rglob("kustomization.yaml"))
# What `kubectl apply -k` is pointed at (base is only ever part of them).
APPLIED = [DEPLOY / "kubernetes", DEPLOY / "kubernetes" / "sharded", DEPLOY / "kubernetes" / "spark-cluster"]
# Prometheus Operator's kinds: not in Kubernetes' schemas (their own checks are below).
CUSTOM_KINDS = {"PodMonitor", "PrometheusRule"}
KUBERNETES_VERSION = "1.32.0"  # the oldest release still maintained upstream when this was written


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text()) if d is not None]


def built(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize` of a directory: the objects `kubectl apply -k` would send."""
    if shutil.which("kubectl") is None:
        pytest.fail("kubectl (with its built-in kustomize v5) is part of this machine image and is needed here")
    done = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def exported_metric_names() -> set[str]:
    """Every sample name a running mirror exposes on /metrics (one mirror's label children created)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    families = MetricFamilies(registry)
    MirrorMetrics.for_mirror(families, "c", "t", 0, "t").configure(1.0, 300.0)
    per_cluster = (families.mirrors, families.unassigned, families.discovery_errors, families.removed)
    for family in (*per_cluster, families.source_cluster_up, families.group_sync_failures):
        family.labels(source_cluster="c")
    families.schema_registry_up.labels(registry="http://registry:8081")  # an entry with `schemas`
    families.group_sync_groups.labels(source_cluster="c")  # a Kafka destination with sync-groups
    families.destination_up.labels(location="/data")
    families.flush_wait.labels(lane="shared").observe(0.1)  # a flush's Spark job
    families.restarts.labels("c", "t", "t").inc()  # a mirror restarted after a failure
    for per_table in (families.table_up, families.table_commit_failures, families.table_commit):
        per_table.labels(table="archive.t")  # a mirror whose archive keeps a table (destination.table)
    for per_task in (families.archive_upkeep_failures, families.archive_upkeep_blobs, families.archive_upkeep_last):
        per_task.labels(task="compaction")  # a mirror that keeps its archive in shape (archive_upkeep)
    from prometheus_client import generate_latest

    text = generate_latest(registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_manifests_parse(path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs and all({"apiVersion", "kind"} <= d.keys() or d.get("kind") == "Kustomization" for d in docs)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=[str(p.relative_to(DEPLOY)) for p in KUSTOMIZATIONS])
def test_every_kustomization_builds_into_objects_kubernetes_schemas_accept(directory: Path) -> None:
    import kubernetes_validate

    objects = built(directory)
    assert objects
    for manifest in objects:
        if manifest["kind"] in CUSTOM_KINDS:
            continue
        # Strict: an unknown or misspelt field is an error, as the API server's field validation would say.
        kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_pods_identity_budget_and_network_policy() -> None:
    for directory in APPLIED[:2]:
        objects = {(o["kind"], o["metadata"]["name"]): o for o in built(directory)}
        workload = next(o for (kind, _), o in objects.items() if kind in ("Deployment", "StatefulSet"))
        pod = workload["spec"]["template"]["spec"]
        labels = workload["spec"]["template"]["metadata"]["labels"]
        account = objects[("ServiceAccount", pod["serviceAccountName"])]
        assert account["automountServiceAccountToken"] is False and pod["automountServiceAccountToken"] is False
        budget = objects[("PodDisruptionBudget", "mirror-v3")]
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert budget["spec"]["maxUnavailable"] == 1
        policy = objects[("NetworkPolicy", "mirror-v3")]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        (container,) = pod["containers"]
        metrics = next(p["containerPort"] for p in container["ports"] if p["name"] == "metrics")
        assert [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]] == [metrics]
        egress = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert {53, 9092, 443} <= egress
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["capabilities"]["drop"] == ["ALL"]
        assert pod["securityContext"]["runAsNonRoot"] is True


def test_a_config_change_rolls_the_pods() -> None:
    # The ConfigMap is generated from base/config.yaml: its name carries a hash of the file, and the pods' volume
    # names it, so an edited config changes the pod template.
    for directory in APPLIED[:2]:
        objects = built(directory)
        (configmap,) = [o for o in objects if o["kind"] == "ConfigMap"]
        name = configmap["metadata"]["name"]
        assert re.fullmatch(r"mirror-v3-config-[a-z0-9]{10}", name), name
        workload = next(o for o in objects if o["kind"] in ("Deployment", "StatefulSet"))
        volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
        assert volumes["config"]["configMap"]["name"] == name


def test_the_cluster_overlay_exposes_the_drivers_fixed_ports_to_the_executors() -> None:
    overlay = DEPLOY / "kubernetes" / "spark-cluster"
    (kustomization,) = [d for d in yaml.safe_load_all((overlay / "kustomization.yaml").read_text()) if d]
    for resource in kustomization["resources"]:
        assert (overlay / resource).is_file(), resource
    (service,) = [d for d in yaml.safe_load_all((overlay / "driver-service.yaml").read_text()) if d]
    (deployment,) = documents("deployment.yaml")
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    # Never a shard: each is a driver of its own, and executors must reach the one that runs their job.
    (statefulset,) = documents("sharded/statefulset.yaml")
    assert not service["spec"]["selector"].items() <= statefulset["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["port"] for p in service["spec"]["ports"]}
    text = (overlay / "kustomization.yaml").read_text()
    for setting in ("spark.driver.port", "spark.blockManager.port"):
        port = int(re.search(rf'{re.escape(setting)}: "(\d+)"', text).group(1))  # type: ignore[union-attr]
        assert port in ports, setting


def test_deployment_runs_one_non_root_replica_with_probes() -> None:
    (deployment,) = documents("deployment.yaml")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["args"][:1] == ["run"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e.get("value") for e in container["env"]}
    port = next(p for p in container["ports"] if p["name"] == "metrics")
    assert str(port["containerPort"]) == env["MIRROR_V3_METRICS_PORT"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["envFrom"] == [{"secretRef": {"name": "mirror-v3-secrets"}}]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == "mirror-v3-config"


def test_the_config_is_valid_and_holds_no_secrets() -> None:
    text = (DEPLOY / "kubernetes" / "base" / "config.yaml").read_text()
    config = parse_config(text, source="config.yaml", env={})
    assert config.mirrors
    (secret,) = documents("secret.example.yaml")
    for variable in secret["stringData"]:
        assert variable not in text or f"-env: {variable}" in text, f"{variable} appears in the config itself"


def test_alerts_cover_what_operators_need() -> None:
    (rule,) = documents("base/prometheusrule.yaml")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert {
        "MirrorV3DestinationRetrying",
        "MirrorV3LagGrowing",
        "MirrorV3Failed",
        "MirrorV3Stalled",
        "MirrorV3Restarting",
        "MirrorV3RecordsWaitingTooLong",
        "MirrorV3TransactionHeld",
        "MirrorV3DataLossAccepted",
        "MirrorV3TargetDown",
        "MirrorV3Absent",
        "MirrorV3ArchiveUpkeepFailing",
        "MirrorV3SourceClusterDown",
        "MirrorV3SchemaRegistryDown",
        "MirrorV3GroupSyncFailing",
        "MirrorV3RetentionOvertaking",
    } <= set(alerts)
    assert alerts["MirrorV3DestinationRetrying"]["for"] == "5m"
    assert "mirror_v3_destination_offset_inflight_retry" in alerts["MirrorV3DestinationRetrying"]["expr"]
    assert "2 * mirror_v3_destination_flush_max_time_seconds" in alerts["MirrorV3Stalled"]["expr"]
    held = alerts["MirrorV3TransactionHeld"]["expr"]
    assert "mirror_v3_source_transaction_hold_alert_seconds" in held  # the configured time, not a fixed one
    assert "mirror_v3_source_lost_records_total" in alerts["MirrorV3DataLossAccepted"]["expr"]
    assert alerts["MirrorV3TargetDown"]["expr"].startswith("up{") and "absent(up{" in alerts["MirrorV3Absent"]["expr"]
    for name, alert in alerts.items():
        assert alert["labels"]["severity"] in ("warning", "critical"), name
        assert alert["annotations"]["summary"], name
    # Each alert links its runbook: a section of docs/runbooks.md, and that page has a section for every alert only.
    runbooks = (DEPLOY.parent / "docs" / "runbooks.md").read_text()
    sections = re.findall(r"^## (MirrorV3\w+)$", runbooks, re.MULTILINE)
    assert sorted(sections) == sorted(alerts)
    metrics_page = (DEPLOY.parent / "docs" / "metrics.md").read_text()
    for name, alert in alerts.items():
        assert alert["annotations"]["runbook_url"] == RUNBOOKS + "#" + name.lower(), name
        assert f"| [`{name}`](runbooks.md#{name.lower()}) |" in metrics_page, (
            f"docs/metrics.md's alert table lacks {name}"
        )
    for name in ("MirrorV3Failed", "MirrorV3Stalled"):
        section = runbooks.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        assert "`status --" in section, name


RUNBOOKS = "https://github.com/mirror-v3/mirror-v3/blob/main/docs/runbooks.md"


# Series of one pod as Prometheus would scrape them (labels of the pod and of mirror-v3), for `promtool test rules`.
POD = 'namespace="mirror-v3", pod="mirror-v3-0", job="mirror-v3/mirror-v3"'
PARTITION = POD + ', source_cluster="prod", topic="orders", destination="orders"'


def _promtool_test(directory: Path, series: list[dict[str, str]], checks: list[dict[str, Any]]) -> None:
    """`promtool test rules` over `directory/rules.yaml`: minute samples of `series`, then each alert check
    (`alert_rule_test` entries): Prometheus' own rule engine must agree."""
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": checks}],
    }
    (directory / "tests.yaml").write_text(yaml.safe_dump(tests))
    checked = subprocess.run(
        [promtool(), "test", "rules", "tests.yaml"], cwd=directory, capture_output=True, text=True, timeout=60
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_failed_and_stalled_alerts_fire_on_series_that_mean_it(tmp_path: Path) -> None:
    """Prometheus' own rule engine (`promtool test rules`) over the rules as shipped: a partition failed for five
    minutes fires MirrorV3Failed and not MirrorV3Stalled; one whose flushes stop while records wait fires
    MirrorV3Stalled after twice its topic's max-time plus the rule's `for`; a healthy one fires neither."""
    (rule,) = documents("base/prometheusrule.yaml")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    failed, stalled, healthy = (f'{{{PARTITION}, partition="{p}"}}' for p in (0, 1, 2))
    # Minute samples from t=0: the last flush of partition 1 is at 60 s and never again; partition 2 flushes
    # every minute; partition 0 flushed at 60 s and has been failed since minute 2.
    series = [
        {"series": f"mirror_v3_destination_flush_max_time_seconds{{{PARTITION}}}", "values": "10x20"},
        {"series": f"mirror_v3_destination_last_flush_timestamp_seconds{failed}", "values": "0 60x19"},
        {"series": f"mirror_v3_destination_last_flush_timestamp_seconds{stalled}", "values": "0 60x19"},
        {"series": f"mirror_v3_destination_last_flush_timestamp_seconds{healthy}", "values": "0+60x20"},
        {"series": f"mirror_v3_source_lag_offsets{failed}", "values": "500x20"},
        {"series": f"mirror_v3_source_lag_offsets{stalled}", "values": "500x20"},
        {"series": f"mirror_v3_source_lag_offsets{healthy}", "values": "500x20"},
        {"series": f"mirror_v3_mirror_failed{failed}", "values": "0 0 1x18"},
        {"series": f"mirror_v3_mirror_failed{stalled}", "values": "0x20"},
        {"series": f"mirror_v3_mirror_failed{healthy}", "values": "0x20"},
    ]
    labels = {"namespace": "mirror-v3", "pod": "mirror-v3-0", "source_cluster": "prod", "topic": "orders"}
    rules = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}

    def alert(name: str, **extra: str) -> dict[str, Any]:
        """The alert as it should fire: its labels, and its annotations with the labels filled in."""
        fired = {**labels, **extra}
        annotations = {
            key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: fired[m.group(1)], text)
            for key, text in rules[name]["annotations"].items()
        }
        return {"exp_labels": {**fired, **rules[name]["labels"]}, "exp_annotations": annotations}

    checks: list[dict[str, Any]] = [
        # Failed from minute 2: pending until minute 7.
        {"eval_time": "6m", "alertname": "MirrorV3Failed", "exp_alerts": []},
        {
            "eval_time": "8m",
            "alertname": "MirrorV3Failed",
            "exp_alerts": [alert("MirrorV3Failed", partition="0")],
        },
        # Partition 1's last flush is 60 s old at minute 2 (> 2 x 10 s): firing after its 2 min `for`.
        {"eval_time": "3m", "alertname": "MirrorV3Stalled", "exp_alerts": []},
        {
            "eval_time": "8m",
            "alertname": "MirrorV3Stalled",
            "exp_alerts": [alert("MirrorV3Stalled", job="mirror-v3/mirror-v3", destination="orders", partition="1")],
        },
    ]
    _promtool_test(tmp_path, series, checks)


def test_the_archive_upkeep_alert_fires_on_failures_that_persist_not_on_one(tmp_path: Path) -> None:
    """A compaction failing every minute fires MirrorV3ArchiveUpkeepFailing once failures have kept coming for its
    `for`; a prune that failed once (an S3 hiccup, tried again next round) never does."""
    (rule,) = documents("base/prometheusrule.yaml")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    rules = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    failing = rules["MirrorV3ArchiveUpkeepFailing"]
    fired = {"namespace": "mirror-v3", "pod": "mirror-v3-0", "job": "mirror-v3/mirror-v3", "task": "compaction"}
    annotations = {
        key: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: fired[m.group(1)], text)
        for key, text in failing["annotations"].items()
    }
    series = [
        {"series": f'mirror_v3_archive_upkeep_failures_total{{{POD}, task="compaction"}}', "values": "0+1x60"},
        {"series": f'mirror_v3_archive_upkeep_failures_total{{{POD}, task="prune"}}', "values": "0 1x59"},
    ]
    expected = [{"exp_labels": {**fired, **failing["labels"]}, "exp_annotations": annotations}]
    checks: list[dict[str, Any]] = [
        {"eval_time": "20m", "alertname": "MirrorV3ArchiveUpkeepFailing", "exp_alerts": []},
        {"eval_time": "40m", "alertname": "MirrorV3ArchiveUpkeepFailing", "exp_alerts": expected},
    ]
    _promtool_test(tmp_path, series, checks)


def test_every_alert_fires_on_series_that_mean_it_and_not_before(tmp_path: Path) -> None:
    """Each rule as shipped, through Prometheus' own rule engine (`promtool test rules`): series that mean the
    alert's condition make it fire with the labels it routes on, once its `for` has passed and not before. (The
    annotations are left out of this copy: `promtool check rules` checks their templates.)"""
    (rule,) = documents("base/prometheusrule.yaml")
    spec = copy.deepcopy(rule["spec"])
    for group in spec["groups"]:
        for each in group["rules"]:
            each.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    severity = {r["alert"]: r["labels"]["severity"] for group in spec["groups"] for r in group["rules"]}
    pod = {"namespace": "mirror-v3", "pod": "mirror-v3-0", "job": "mirror-v3/mirror-v3"}
    cluster = {**pod, "source_cluster": "prod"}
    topic = {**cluster, "topic": "orders", "destination": "orders"}
    part = {**topic, "partition": "0"}
    by_partition = {k: part[k] for k in ("namespace", "pod", "source_cluster", "topic", "partition")}

    def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
        inner = ", ".join(f'{key}="{value}"' for key, value in labels.items())
        return {"series": f"{name}{{{inner}}}", "values": values}

    # alert: (its series, a time it must not fire yet, a time it must, the labels it fires with)
    cases: dict[str, tuple[list[dict[str, str]], str, str, dict[str, str]]] = {
        "MirrorV3DestinationRetrying": (
            [series("mirror_v3_destination_offset_inflight_retry", part, "0 3x30")],
            "4m",
            "8m",
            by_partition,
        ),
        "MirrorV3LagGrowing": (
            [series("mirror_v3_source_lag_offsets", part, "20000x10 20000+1000x30")],
            "20m",
            "32m",
            part,
        ),
        "MirrorV3NeverFlushed": (
            [
                series("mirror_v3_destination_last_flush_timestamp_seconds", part, "0x30"),
                series("mirror_v3_source_lag_offsets", part, "5x30"),
            ],
            "10m",
            "20m",
            part,
        ),
        "MirrorV3UnassignedPartitions": (
            [series("mirror_v3_discovery_unassigned_partitions", cluster, "3x30")],
            "5m",
            "15m",
            {"namespace": "mirror-v3", "source_cluster": "prod"},
        ),
        "MirrorV3DiscoveryFailing": (
            [series("mirror_v3_discovery_errors_total", cluster, "0 0 0 0 0 0+1x30")],
            "7m",
            "20m",
            cluster,
        ),
        "MirrorV3Restarting": (
            [series("process_start_time_seconds", pod, "0 60 120 180 240x30")],
            "2m",
            "10m",
            pod,
        ),
        "MirrorV3RecordsWaitingTooLong": (
            [
                series("mirror_v3_oldest_pending_age_seconds", part, "400x30"),
                series("mirror_v3_destination_flush_max_time_seconds", topic, "10x30"),
            ],
            "3m",
            "10m",
            part,
        ),
        "MirrorV3TransactionHeld": (
            [
                series("mirror_v3_source_transaction_held_seconds", part, "0 0 0 100x30"),
                series("mirror_v3_source_transaction_hold_alert_seconds", topic, "60x30"),
            ],
            "2m",
            "5m",
            part,
        ),
        "MirrorV3DataLossAccepted": (
            [series("mirror_v3_source_lost_records_total", topic, "0 0 0 0 0 5x30")],
            "3m",
            "10m",
            topic,
        ),
        "MirrorV3TableNotUpdated": (
            [series("mirror_v3_table_up", {**pod, "table": "archive.orders"}, "1 1 0x30")],
            "10m",
            "20m",
            {**pod, "table": "archive.orders"},
        ),
        "MirrorV3SourceClusterDown": (
            [series("mirror_v3_source_cluster_up", cluster, "1 0x30")],
            "4m",
            "10m",
            {"namespace": "mirror-v3", "pod": "mirror-v3-0", "source_cluster": "prod"},
        ),
        "MirrorV3SchemaRegistryDown": (
            [series("mirror_v3_schema_registry_up", {**pod, "registry": "http://registry:8081"}, "1 0x30")],
            "4m",
            "10m",
            {**pod, "registry": "http://registry:8081"},
        ),
        "MirrorV3GroupSyncFailing": (
            [series("mirror_v3_group_sync_failures_total", cluster, "0+1x60")],
            "10m",
            "40m",
            cluster,
        ),
        # Retention deletes 15 offsets a minute, the mirror copies 10: the headroom (1 000 offsets, 4 000 s at that
        # rate) shrinks below an hour after 20 minutes, and the alert fires 10 minutes later. A partition with
        # headroom for days beside it never fires.
        "MirrorV3RetentionOvertaking": (
            [
                series("mirror_v3_destination_offset_verified", part, "1000+10x60"),
                series("mirror_v3_source_log_start_offset", part, "0+15x60"),
                series("mirror_v3_source_lag_offsets", part, "100x60"),
                series("mirror_v3_destination_offset_verified", {**part, "partition": "1"}, "1000000+10x60"),
                series("mirror_v3_source_log_start_offset", {**part, "partition": "1"}, "0+15x60"),
                series("mirror_v3_source_lag_offsets", {**part, "partition": "1"}, "100x60"),
            ],
            "25m",
            "35m",
            part,
        ),
        "MirrorV3TargetDown": ([series("up", pod, "1 0x30")], "4m", "10m", pod),
    }
    for name, (given, quiet, firing, labels) in cases.items():  # each alone: its series are all there is
        fired = {"exp_labels": {**labels, "severity": severity[name]}}
        checks: list[dict[str, Any]] = [
            {"eval_time": quiet, "alertname": name, "exp_alerts": []},
            {"eval_time": firing, "alertname": name, "exp_alerts": [fired]},
        ]
        _promtool_test(tmp_path, given, checks)
    # Without any target (nothing scraped at all): only MirrorV3Absent, after its 10 minutes.
    absent = [{"exp_labels": {"severity": severity["MirrorV3Absent"]}}]
    alone = [series("mirror_v3_build_info", pod, "1x30")]  # a series of another job: not a mirror-v3 target
    _promtool_test(
        tmp_path,
        alone,
        [
            {"eval_time": "5m", "alertname": "MirrorV3Absent", "exp_alerts": []},
            {"eval_time": "15m", "alertname": "MirrorV3Absent", "exp_alerts": absent},
        ],
    )
    tested = {*cases, "MirrorV3Absent", "MirrorV3Failed", "MirrorV3Stalled", "MirrorV3ArchiveUpkeepFailing"}
    assert tested == set(severity), "every alert has a promtool test"


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    """Every expression parses as PromQL and every rule is well formed, as Prometheus itself would load them."""
    (rule,) = documents("base/prometheusrule.yaml")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(rule["spec"]))
    checked = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_rules_and_dashboard_use_only_exported_metrics() -> None:
    exported = exported_metric_names()
    (rule,) = documents("base/prometheusrule.yaml")
    expressions = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    expressions += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    expressions += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in expressions for name in METRIC_NAME.findall(expr)}
    assert used, "no metric names found"
    unknown = used - exported
    assert not unknown, f"not exported by mirror-v3: {sorted(unknown)}"
    # The dashboard shows what an operator needs per topic/partition.
    for needed in (
        "mirror_v3_destination_records_total",
        "mirror_v3_source_lag_offsets",
        "mirror_v3_destination_offset_verified",
        "mirror_v3_destination_last_flush_timestamp_seconds",
        "mirror_v3_destination_offset_inflight_retry",
        "mirror_v3_source_offset_gap_records_total",
        "mirror_v3_oldest_pending_age_seconds",
        "mirror_v3_replication_latency_seconds_bucket",
        "mirror_v3_source_transaction_held_seconds",
        "mirror_v3_source_high_watermark_lag_offsets",
        "mirror_v3_read_inflight_offsets",
        "mirror_v3_staged_records",
        "mirror_v3_read_duration_seconds_bucket",
        "mirror_v3_flush_duration_seconds_bucket",
    ):
        assert needed in used, needed


def test_the_dashboard_is_well_formed_and_every_query_is_promql(tmp_path: Path) -> None:
    """The dashboard as Grafana loads it: unique panel ids, panels inside 24 columns that never overlap, each
    query on the chosen data source; and every query parses as PromQL (Prometheus' own parser, through `promtool
    check rules`, with Grafana's variables filled in). Its first row sums the estate up."""
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        covered = {
            (x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not covered & cells, f"{panel['title']} overlaps another panel"
        cells |= covered
        assert panel["targets"] and all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
    first_row = [p for p in panels if p["gridPos"]["y"] == 0]
    assert {p["type"] for p in first_row} == {"stat"} and len(first_row) == 6
    assert any(p["type"] == "table" and "topk(10" in p["targets"][0]["expr"] for p in panels)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    queries = []
    for panel in panels:
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "5m")
            for name in variables:
                expr = expr.replace(f"${name}", ".*")
            assert "$" not in expr, expr
            queries.append(expr)
    rules = {
        "groups": [
            {"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": q} for i, q in enumerate(queries)]}
        ]
    }
    (tmp_path / "dashboard-queries.yaml").write_text(yaml.safe_dump(rules))
    checked = subprocess.run(
        [promtool(), "check", "rules", str(tmp_path / "dashboard-queries.yaml")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_podmonitor_scrapes_the_metrics_port() -> None:
    (monitor,) = documents("base/podmonitor.yaml")
    (deployment,) = documents("deployment.yaml")
    assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")


def test_dockerfile_builds_with_the_ci_install_script_and_runs_as_non_root() -> None:
    dockerfile = (DEPLOY.parent / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in dockerfile.splitlines() if line and not line.startswith("#")]
    stages = [args for keyword, *args in instructions if keyword == "FROM"]
    assert len(stages) >= 2, "multi-stage build expected"
    runs = " ".join(" ".join(args) for keyword, *args in instructions if keyword == "RUN")
    assert "bash scripts/setup.sh --no-dev" in runs, "the image must install through the script CI runs"
    ci = (DEPLOY.parent / ".ci" / "run").read_text() + (DEPLOY.parent / "scripts" / "test.sh").read_text()
    assert "scripts/setup.sh" in ci
    users = [args[0] for keyword, *args in instructions if keyword == "USER"]
    assert users and not users[-1].startswith(("0", "root")), users
    assert 'ENTRYPOINT ["mirror-v3"]' in dockerfile
    # The class archive is made by the runtime stage's own JDK, where the runtime looks for it.
    final = dockerfile.rsplit("\nFROM ", 1)[1]
    assert "MIRROR_V3_JVM_CACHE=/opt/mirror-v3/jvm" in final and "RUN mirror-v3 prepare-jvm" in final
    # Everything the package build reads is copied in (its licence files included).
    copied = " ".join(" ".join(args) for keyword, *args in instructions if keyword == "COPY")
    project = (DEPLOY.parent / "pyproject.toml").read_text()
    licences = re.findall(r'"([A-Z]+)"', project.split("license-files", 1)[1].splitlines()[0])
    assert licences == ["LICENSE", "NOTICE"]
    for needed in ("pyproject.toml", "README.md", *licences):
        assert needed in copied, needed


def test_the_sharded_overlay_runs_one_shard_per_replica() -> None:
    overlay = DEPLOY / "kubernetes" / "sharded"
    (kustomization,) = [d for d in yaml.safe_load_all((overlay / "kustomization.yaml").read_text()) if d]
    for resource in kustomization["resources"]:
        assert (overlay / resource).exists(), resource
    (statefulset,) = [d for d in yaml.safe_load_all((overlay / "statefulset.yaml").read_text()) if d]
    assert statefulset["kind"] == "StatefulSet"
    spec = statefulset["spec"]
    env = {e["name"]: e for e in spec["template"]["spec"]["containers"][0]["env"]}
    index = env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert index == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["MIRROR_V3_SHARD"]["value"] == f"$(POD_INDEX)/{spec['replicas']}"
    assert list(env).index("POD_INDEX") < list(env).index("MIRROR_V3_SHARD")  # $(VAR) sees earlier entries only


CHART = DEPLOY / "helm" / "mirror-v3"


def rendered(
    *settings: str, values: dict[str, Any] | None = None, tmp_path: Path | None = None
) -> list[dict[str, Any]]:
    """`helm template` of the chart with `--set` settings (and a values file): the objects `helm install` sends."""
    command = [helm(), "template", "mirror-v3", str(CHART), "--namespace", "mirror-v3"]
    for setting in settings:
        command += ["--set", setting]
    if values is not None:
        assert tmp_path is not None
        (tmp_path / "values.yaml").write_text(yaml.safe_dump(values))
        command += ["--values", str(tmp_path / "values.yaml")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def test_the_helm_chart_lints_and_renders_objects_kubernetes_schemas_accept() -> None:
    import kubernetes_validate

    linted = subprocess.run([helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True, timeout=60)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == tomllib.loads((DEPLOY.parent / "pyproject.toml").read_text())["project"]["version"]
    for settings in ([], ["shards=3", "podMonitor.enabled=true", "prometheusRule.enabled=true"]):
        objects = rendered(*settings)
        for manifest in objects:
            if manifest["kind"] not in CUSTOM_KINDS:
                kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        (config_map,) = [o for o in objects if o["kind"] == "ConfigMap"]
        assert parse_config(config_map["data"]["config.yaml"]).mirrors


def test_the_chart_refuses_bad_values_before_anything_renders(tmp_path: Path) -> None:
    """values.schema.json: a bad value fails `helm lint` and `helm template` (so install and upgrade) naming it, as
    the config's own schema checks `config`, instead of a pod that exits 2 later."""
    for setting, named in (
        ("config.destination.type=bogus", "config.destination.type"),
        ("config.destination.compresion=zstd", "compresion"),
        ("shards=0", "shards"),
        ("shard=2", "shard"),
        ("logFormat=xml", "logFormat"),
        ("networkPolicy.kafkaPorts={http}", "networkPolicy.kafkaPorts"),
    ):
        linted = subprocess.run(
            [helm(), "lint", "--strict", str(CHART), "--set", setting], capture_output=True, text=True, timeout=60
        )
        assert linted.returncode != 0 and named in linted.stdout + linted.stderr, (setting, linted.stdout)
    old = {
        "config": {
            **yaml.safe_load((CHART / "values.yaml").read_text())["config"],
            "spark": {"max-offsets-per-read": 1},
        }
    }
    assert rendered(values=old, tmp_path=tmp_path)  # a key of an earlier release still loads (with a WARN)


def test_the_chart_mounts_certificates_labels_its_monitors_and_opens_the_ports_asked(tmp_path: Path) -> None:
    """Each optional piece renders into objects Kubernetes' schemas accept: volumes and mounts for mTLS files,
    the labels a kube-prometheus-stack selects monitors by, the NetworkPolicy's registry, object store and Spark
    ports."""
    import kubernetes_validate

    values = {
        "extraVolumes": [{"name": "kafka-tls", "secret": {"secretName": "kafka-client-tls"}}],
        "extraVolumeMounts": [{"name": "kafka-tls", "mountPath": "/etc/kafka-tls", "readOnly": True}],
        "podMonitor": {"enabled": True, "labels": {"release": "kps"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
        "networkPolicy": {"objectStorePorts": [9000], "sparkPorts": [7077], "sparkDriverPorts": [7078, 7079]},
    }
    for shards in (1, 3):
        objects = rendered(values={**values, "shards": shards}, tmp_path=tmp_path)
        for manifest in objects:
            if manifest["kind"] not in CUSTOM_KINDS:
                kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        pod = workload(objects)["spec"]["template"]["spec"]
        assert {"name": "kafka-tls", "secret": {"secretName": "kafka-client-tls"}} in pod["volumes"]
        assert {"name": "kafka-tls", "mountPath": "/etc/kafka-tls", "readOnly": True} in pod["containers"][0][
            "volumeMounts"
        ]
        for kind in CUSTOM_KINDS:
            (monitor,) = [o for o in objects if o["kind"] == kind]
            assert monitor["metadata"]["labels"]["release"] == "kps", kind
        (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
        egress = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert {8081, 9000, 7077, 443, 9092} <= egress  # the registry's default port is open by default
        ingress = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert ingress == {7780, 7078, 7079}


def workload(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")]
    return found


def test_the_chart_runs_one_replica_or_one_shard_per_pod_non_root_with_the_probes() -> None:
    single = workload(rendered())
    assert single["kind"] == "Deployment" and single["spec"]["replicas"] == 1
    assert single["spec"]["strategy"]["type"] == "Recreate"
    sharded_objects = rendered("shards=3")
    sharded = workload(sharded_objects)
    assert sharded["kind"] == "StatefulSet" and sharded["spec"]["replicas"] == 3
    (service,) = [o for o in sharded_objects if o["kind"] == "Service"]
    assert service["spec"]["clusterIP"] == "None" and sharded["spec"]["serviceName"] == service["metadata"]["name"]
    env = {e["name"]: e for e in sharded["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["MIRROR_V3_SHARD"]["value"] == "$(POD_INDEX)/3"  # N in one place: the replica count's value
    assert "pod-index" in env["POD_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"]
    for pod in (single["spec"]["template"]["spec"], sharded["spec"]["template"]["spec"]):
        (container,) = pod["containers"]
        assert pod["securityContext"]["runAsNonRoot"] and pod["automountServiceAccountToken"] is False
        assert container["securityContext"]["readOnlyRootFilesystem"]
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert container["args"] == ["run", "--config", "/etc/mirror-v3/config.yaml"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert [p["containerPort"] for p in container["ports"]] == [7780]


def test_a_config_change_through_the_chart_rolls_the_pods(tmp_path: Path) -> None:
    def checksum(objects: list[dict[str, Any]]) -> str:
        return str(workload(objects)["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    default = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    changed = {**default, "spark": {"driver-memory": "3g"}}
    assert checksum(rendered()) == checksum(rendered(values={"config": default}, tmp_path=tmp_path))
    assert checksum(rendered()) != checksum(rendered(values={"config": changed}, tmp_path=tmp_path))


def test_the_charts_alert_rules_are_the_kustomize_bases() -> None:
    (rule,) = documents("base/prometheusrule.yaml")
    (charted,) = [o for o in rendered("prometheusRule.enabled=true") if o["kind"] == "PrometheusRule"]
    assert charted["spec"] == rule["spec"]
    (monitor,) = [o for o in rendered("podMonitor.enabled=true") if o["kind"] == "PodMonitor"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
