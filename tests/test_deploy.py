"""deploy/: every kustomization builds (kubectl kustomize) into objects that validate against Kubernetes' own
schemas, the manifests say what SPEC §7 and the adoption checklist ask, and only use metrics the code exports."""

from __future__ import annotations

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
    for family in (families.mirrors, families.unassigned, families.discovery_errors, families.removed):
        family.labels(source_cluster="c")
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
    for name in ("MirrorV3Failed", "MirrorV3Stalled"):
        assert "status --" in alerts[name]["annotations"]["runbook"], name


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
