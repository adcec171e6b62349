"""One security block, two kinds of client: aiokafka keyword arguments and librdkafka properties (the consumers
inside Spark tasks)."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import anyio
import pytest
from confluent_kafka import KafkaError, KafkaException

from config import ConfigError, parse_config
from config.errors import format_path
from config.model import KafkaSecurity, SaslConfig, SourceConfig, TlsConfig
from config.secrets import ConfigReferenceError, MissingSecretError
from kafka_clients.admin import AdminRequestError, ClusterAdmin
from kafka_clients.settings import aiokafka_settings, cluster_access, librdkafka_properties

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def test_plaintext_is_the_default() -> None:
    assert aiokafka_settings(KafkaSecurity(), "f") == {"security_protocol": "PLAINTEXT"}
    assert librdkafka_properties(KafkaSecurity(), "f") == {"security.protocol": "plaintext"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_reaches_both_clients(mechanism: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PASSWORD", 'p"a\\ss')
    security = KafkaSecurity(
        protocol="SASL_PLAINTEXT",
        sasl=SaslConfig(mechanism=mechanism, username="svc", password_env="KAFKA_PASSWORD"),  # type: ignore[arg-type]
    )
    assert aiokafka_settings(security, "f") == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "svc",
        "sasl_plain_password": 'p"a\\ss',
    }
    assert librdkafka_properties(security, "f") == {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": mechanism,
        "sasl.username": "svc",
        "sasl.password": 'p"a\\ss',
    }


def test_a_cluster_is_resolved_once_for_every_client_and_again_when_its_secret_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every partition and client of a cluster gets one value (a thousand TLS partitions load the files once)."""
    sasl = SaslConfig(mechanism="PLAIN", username="u", password_env="ACCESS_TEST_PASSWORD")
    cluster = SourceConfig(bootstrap_servers="k:9092", security=KafkaSecurity(protocol="SASL_PLAINTEXT", sasl=sasl))
    monkeypatch.setenv("ACCESS_TEST_PASSWORD", "one")
    first = cluster_access(cluster, "clusters.a")
    assert cluster_access(SourceConfig(bootstrap_servers="k:9092", security=cluster.security), "clusters.a") is first
    assert first.aiokafka()["sasl_plain_password"] == "one" and first.librdkafka()["sasl.password"] == "one"
    first.librdkafka()["sasl.password"] = "changed by a caller"  # each caller gets a copy
    assert first.librdkafka()["sasl.password"] == "one"
    assert cluster_access(cluster, "clusters.b") is not first  # another block, whose errors name its own field
    monkeypatch.setenv("ACCESS_TEST_PASSWORD", "two")
    assert cluster_access(cluster, "clusters.a").librdkafka()["sasl.password"] == "two"


def test_sasl_password_must_be_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_THERE", raising=False)
    security = KafkaSecurity(
        protocol="SASL_SSL", sasl=SaslConfig(mechanism="PLAIN", username="svc", password_env="NOT_THERE")
    )
    for build in (aiokafka_settings, librdkafka_properties):
        with pytest.raises(MissingSecretError) as caught:
            build(security, "destination.security")
        assert (caught.value.field, caught.value.variable) == ("destination.security.sasl.password-env", "NOT_THERE")


def test_tls_material_is_passed_inline_to_the_task_consumers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_PASSWORD", "kp")
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text(PEM.replace("CERTIFICATE", name))
    tls = TlsConfig(
        ca_file=str(tmp_path / "ca.pem"),
        cert_file=str(tmp_path / "cert.pem"),
        key_file=str(tmp_path / "key.pem"),
        key_password_env="KEY_PASSWORD",
        check_hostname=False,
    )
    properties = librdkafka_properties(KafkaSecurity(protocol="SSL", tls=tls), "f")
    assert properties == {
        "security.protocol": "ssl",
        "ssl.ca.pem": PEM.replace("CERTIFICATE", "ca.pem"),
        "ssl.certificate.pem": PEM.replace("CERTIFICATE", "cert.pem"),
        "ssl.key.pem": PEM.replace("CERTIFICATE", "key.pem"),
        "ssl.key.password": "kp",
        "ssl.endpoint.identification.algorithm": "none",
    }


def test_tls_without_files_uses_the_system_trust_store() -> None:
    settings = aiokafka_settings(KafkaSecurity(protocol="SSL"), "f")
    context = settings["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert librdkafka_properties(KafkaSecurity(protocol="SSL"), "f") == {
        "security.protocol": "ssl",
        "ssl.ca.location": "probe",
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_unusable_tls_files_name_the_field(tmp_path: Path) -> None:
    missing = KafkaSecurity(protocol="SSL", tls=TlsConfig(ca_file=str(tmp_path / "nope.pem")))
    with pytest.raises(ConfigReferenceError) as caught:
        librdkafka_properties(missing, "destination.security")
    assert caught.value.field == "destination.security.tls.ca-file"
    assert caught.value.problem.startswith(f"cannot read {tmp_path / 'nope.pem'}")
    with pytest.raises(ConfigReferenceError) as caught:
        aiokafka_settings(missing, "destination.security")
    assert caught.value.field == "destination.security.tls"
    assert caught.value.problem.startswith("cannot load the TLS files")
    (tmp_path / "junk.pem").write_text("not a certificate")
    junk = KafkaSecurity(protocol="SSL", tls=TlsConfig(ca_file=str(tmp_path / "junk.pem")))
    with pytest.raises(ConfigReferenceError) as caught:
        librdkafka_properties(junk, "mirrors[0].source.security")
    assert caught.value.field == "mirrors[0].source.security.tls.ca-file"
    assert caught.value.problem == f"{tmp_path / 'junk.pem'} is not a PEM file"


KAFKA_CONFIG = """
destination:
  type: kafka
  bootstrap-servers: dest:9092
  security: {security}
mirrors:
  - name: m
    source: {{bootstrap-servers: "src:9092"}}
    topic: t
    partition: 0
"""


@pytest.mark.parametrize(
    ("security", "field", "problem"),
    [
        ("{protocol: SASL_SSL}", "sasl", "protocol SASL_SSL needs a sasl block"),
        ("{sasl: {mechanism: PLAIN, username: u, password-env: P}}", "sasl", "protocol PLAINTEXT does not use SASL"),
        (
            "{protocol: SASL_PLAINTEXT, sasl: {mechanism: PLAIN, username: u, password-env: P}, tls: {}}",
            "tls",
            "protocol SASL_PLAINTEXT does not use TLS",
        ),
        ("{protocol: SSL, tls: {cert-file: c.pem}}", "tls.key-file", "mutual TLS needs both cert-file and key-file"),
        ("{protocol: SSL, tls: {key-password-env: X}}", "tls.key-password-env", "key-password-env without key-file"),
        (
            "{protocol: SASL_SSL, sasl: {mechanism: GSSAPI, username: u, password-env: P}}",
            "sasl.mechanism",
            "GSSAPI is not supported: the bundled Kafka client is built without Kerberos",
        ),
        ("{protocol: SASL_SSL, sasl: {mechanism: PLAIN, username: u, password: p}}", "sasl.password", "unknown field"),
    ],
)
def test_inconsistent_security_blocks_are_config_errors(security: str, field: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(KAFKA_CONFIG.format(security=security), env={})
    assert caught.value.path is not None and format_path(caught.value.path) == f"destination.security.{field}"
    assert caught.value.problem.startswith(problem) and caught.value.line == 5


def test_kafka_destination_defaults() -> None:
    config = parse_config(KAFKA_CONFIG.format(security="{}"), env={})
    destination = config.destination
    assert destination.__struct_config__.tag == "kafka"
    assert (destination.offsets, destination.compression, destination.max_batch_bytes) == (  # type: ignore[union-attr]
        "preserve",
        "none",
        1_000_000,
    )
    assert destination.flush.max_time_ms == 1_000


def test_source_security_errors_name_the_mirror() -> None:
    text = KAFKA_CONFIG.format(security="{}").replace(
        '{bootstrap-servers: "src:9092"}', '{bootstrap-servers: "src:9092", security: {protocol: SASL_SSL}}'
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={})
    assert caught.value.path == ("mirrors", 0, "source", "security", "sasl")
    assert caught.value.problem.startswith("protocol SASL_SSL needs a sasl block")


def test_a_group_request_is_asked_again_while_its_coordinator_moves_or_loads() -> None:
    """A fresh cluster answers the first group requests with NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS while
    it creates `__consumer_offsets`: asked again until the timeout; any other error is the answer at once."""

    def answers(*outcomes: object) -> Callable[[], Future[object]]:
        pending = list(outcomes)

        def call() -> Future[object]:
            future: Future[object] = Future()
            outcome = pending.pop(0)
            if isinstance(outcome, KafkaError):
                future.set_exception(KafkaException(outcome))
            else:
                future.set_result(outcome)
            return future

        return call

    admin = ClusterAdmin("127.0.0.1:1", {}, timeout_s=5.0)
    moving = (KafkaError(KafkaError.NOT_COORDINATOR), KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    assert anyio.run(admin._wait, "group 'g'", "describe", answers(*moving, "described")) == "described"
    refused = answers(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED), "never asked")
    with pytest.raises(AdminRequestError) as caught:
        anyio.run(admin._wait, "group 'g'", "describe", refused)
    assert caught.value.subject == "group 'g'" and "GROUP_AUTHORIZATION_FAILED" in caught.value.reason
    short = ClusterAdmin("127.0.0.1:1", {}, timeout_s=0.3)
    with pytest.raises(AdminRequestError) as caught:
        anyio.run(short._wait, "group 'g'", "describe", answers(*[moving[0]] * 20))
    assert "NOT_COORDINATOR" in caught.value.reason
