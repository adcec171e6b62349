"""No secret ever reaches a log line, an error or command output, at any log level or format."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.conftest import SASL_PASSWORD, SASL_USER
from e2e.destinations import S3DestinationUnderTest
from e2e.harness import MirrorProcess, cli_env, run_cli, wait_until, write_config
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce
from testkit.s3_servers import MotoServer

S3_KEY_ID = "AKIA-SECRET-KEY-ID-0042"
S3_SECRET = "s3-secret-access-key-do-not-log-7781"
SPARK_SECRET = "spark-conf-token-do-not-log-5523"
WRONG_PASSWORD = "wrong-kafka-password-do-not-log-9911"
SECRETS = (S3_KEY_ID, S3_SECRET, SASL_PASSWORD, SPARK_SECRET, WRONG_PASSWORD)


@pytest.mark.parametrize("log_format", ["kv", "json"])
def test_secrets_never_appear_in_any_output(
    kafka_destination_broker: KafkaBroker, moto: MotoServer, topic_name: str, tmp_path: Path, log_format: str
) -> None:
    broker = kafka_destination_broker
    assert broker.sasl_bootstrap is not None
    create_topic(broker.bootstrap, topic_name)
    produce(broker.bootstrap, topic_name, 0, generate_records(2_000, seed=120))
    destination = S3DestinationUnderTest(moto.endpoint, S3_KEY_ID, S3_SECRET, moto.region)
    security = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {"mechanism": "PLAIN", "username": SASL_USER, "password-env": "E2E_KAFKA_PASSWORD"},
    }
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=broker.sasl_bootstrap,
        destination=destination,
        mirrors=[{"topic": topic_name, "partition": 0, "source": {"security": security}}],
        spark={"conf": {"spark.mirror.e2e.token": "${E2E_SPARK_TOKEN}"}},
    )
    env = cli_env(
        LOG_LEVEL="DEBUG",
        LOG_FORMAT=log_format,
        MIRROR_V3_HEARTBEAT_SECS="0.5",
        E2E_KAFKA_PASSWORD=SASL_PASSWORD,
        E2E_SPARK_TOKEN=SPARK_SECRET,
        **destination.env(),
    )
    outputs: dict[str, str] = {}

    mirror = MirrorProcess(config, tmp_path / "run.log", env=env)
    try:
        mirror.wait_for_log("flushed", timeout=180)
        wait_until(lambda: "heartbeat" in mirror.log_text(), 30, "no heartbeat")
        mirror.terminate()
        assert mirror.wait(60) == 0, mirror.tail()
    finally:
        mirror.stop()
    outputs["run"] = mirror.log_text()

    for fmt in ("table", "json"):
        status = run_cli("status", "--config", str(config), "--format", fmt, env=env)
        assert status.returncode == 0, status.stderr
        outputs[f"status {fmt}"] = status.stdout + status.stderr
    validate = run_cli("validate", "--config", str(config), env=env)
    outputs["validate"] = validate.stdout + validate.stderr

    # Failure paths print the most: a rejected login, at DEBUG (which adds exception details).
    failing = run_cli("run", "--config", str(config), env={**env, "E2E_KAFKA_PASSWORD": WRONG_PASSWORD}, timeout=180)
    assert failing.returncode == 1, failing.stderr
    outputs["failed run"] = failing.stdout + failing.stderr
    failing_status = run_cli("status", "--config", str(config), env={**env, "E2E_KAFKA_PASSWORD": WRONG_PASSWORD})
    assert failing_status.returncode == 1
    outputs["failed status"] = failing_status.stdout + failing_status.stderr

    assert "level=DEBUG" in outputs["run"] or '"level": "DEBUG"' in outputs["run"]
    for name, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{name} output contains a secret ({secret[:8]}...)"
