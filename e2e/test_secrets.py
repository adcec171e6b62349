"""No secret ever reaches a log line, an error or command output, at any log level or format."""

from __future__ import annotations

from pathlib import Path

from e2e.conftest import SASL_PASSWORD, SASL_USER
from e2e.harness import assert_exactly_once, backlog, mirror_config
from testkit.kafka_broker import KafkaBroker
from testkit.mirror_run import MirrorRun, run_cli
from testkit.s3_servers import MotoServer
from testkit.targets import FilesystemTarget, S3Target
from testkit.token_server import TokenServer

S3_KEY_ID = "AKIA-SECRET-KEY-ID-0042"
S3_SECRET = "s3-secret-access-key-do-not-log-7781"
SPARK_SECRET = "spark-conf-token-do-not-log-5523"
WRONG_PASSWORD = "wrong-kafka-password-do-not-log-9911"
OAUTH_CLIENT = "mirror-v3-e2e"
OAUTH_SECRET = "oauth-client-secret-do-not-log-6047"
SECRETS = (S3_KEY_ID, S3_SECRET, SASL_PASSWORD, SPARK_SECRET, WRONG_PASSWORD)


def test_secrets_never_appear_in_any_output(
    kafka_destination_broker: KafkaBroker, moto: MotoServer, topic_name: str, tmp_path: Path
) -> None:
    """A run at DEBUG in JSON, a failing run at DEBUG in key=value (failures print the most), status and validate."""
    broker = kafka_destination_broker
    assert broker.sasl_bootstrap is not None
    backlog(broker.bootstrap, topic_name, [2_000], seed=120)
    destination = S3Target(moto.endpoint, S3_KEY_ID, S3_SECRET, moto.region)
    security = {
        "protocol": "SASL_PLAINTEXT",
        "sasl": {"mechanism": "PLAIN", "username": SASL_USER, "password-env": "E2E_KAFKA_PASSWORD"},
    }
    config = mirror_config(
        tmp_path / "mirror.yaml",
        broker.sasl_bootstrap,
        destination,
        [{"topic": topic_name, "partition": 0, "source": {"security": security}}],
        spark={"conf": {"spark.mirror.e2e.token": "${E2E_SPARK_TOKEN}"}},
    )
    env = {
        "LOG_LEVEL": "DEBUG",
        "MIRROR_V3_HEARTBEAT_SECS": "0.5",
        "E2E_KAFKA_PASSWORD": SASL_PASSWORD,
        "E2E_SPARK_TOKEN": SPARK_SECRET,
        **destination.env(),
    }
    outputs: dict[str, str] = {}

    with MirrorRun(config, tmp_path / "run.log", env={**env, "LOG_FORMAT": "json"}) as run:
        run.wait_for_log("flushed")
        run.wait_for_log("heartbeat", timeout=30)
        run.drain()
    outputs["run"] = run.log_text()
    assert '"level": "DEBUG"' in outputs["run"]

    for fmt in ("table", "json"):
        status = run_cli("status", "--config", str(config), "--format", fmt, env=env)
        assert status.returncode == 0, status.stderr
        outputs[f"status {fmt}"] = status.stdout + status.stderr
    validate = run_cli("validate", "--config", str(config), env=env)
    outputs["validate"] = validate.stdout + validate.stderr

    wrong = {**env, "E2E_KAFKA_PASSWORD": WRONG_PASSWORD, "LOG_FORMAT": "kv"}
    with MirrorRun(config, tmp_path / "failed.log", env=wrong) as failing:
        assert failing.wait() == 1, failing.tail()
    outputs["failed run"] = failing.log_text()
    assert "level=DEBUG" in outputs["failed run"]
    failing_status = run_cli("status", "--config", str(config), env=wrong)
    assert failing_status.returncode == 1
    outputs["failed status"] = failing_status.stdout + failing_status.stderr

    for name, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{name} output contains a secret ({secret[:8]}...)"


def test_oauthbearer_with_client_credentials_and_unsigned_jwts(
    kafka_destination_broker: KafkaBroker, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """Two mirrors over the broker's OAUTHBEARER listener: partition 0 with tokens from a client-credentials token
    endpoint (librdkafka's own oidc method in the Spark tasks, mirror-v3's provider in aiokafka), partition 1 with
    unsigned JWTs (the oauth_cb made inside each task, as for MSK IAM). Both land record for record; the client
    secret appears in no output, even at DEBUG."""
    broker = kafka_destination_broker
    assert broker.oauth_bootstrap is not None
    backlog(broker.bootstrap, topic_name, [700, 500], seed=170)
    with TokenServer({OAUTH_CLIENT: OAUTH_SECRET}) as tokens:
        client_credentials: dict[str, object] = {
            "method": "client-credentials",
            "token-endpoint-url": tokens.url,
            "client-id": OAUTH_CLIENT,
            "client-secret-env": "E2E_OAUTH_SECRET",
            "scope": "kafka",
        }
        unsigned: dict[str, object] = {"method": "unsecured-jwt", "principal": "mirror-v3-jwt", "lifetime-ms": 600_000}
        config = mirror_config(
            tmp_path / "mirror.yaml",
            broker.oauth_bootstrap,
            fs,
            [
                {"topic": topic_name, "partition": partition, "source": {"security": _oauthbearer(oauth)}}
                for partition, oauth in enumerate((client_credentials, unsigned))
            ],
        )
        env = {"LOG_LEVEL": "DEBUG", "E2E_OAUTH_SECRET": OAUTH_SECRET, **fs.env()}
        with MirrorRun(config, tmp_path / "run.log", env=env) as run:
            run.wait_for_offsets(lambda p: fs.next_offset(topic_name, p), {0: 700, 1: 500})
            run.drain()
        plan = run_cli("plan", "--config", str(config), "--format", "json", env=env)
        assert plan.returncode == 0, plan.stderr
        granted = tokens.granted()

    assert_exactly_once(broker.bootstrap, fs, topic_name, partitions=2)
    # The driver's aiokafka clients and the tasks' librdkafka clients each fetched their tokens.
    assert {(r.client_id, r.scope) for r in granted} == {(OAUTH_CLIENT, "kafka")}
    assert len(granted) >= 2
    for name, text in (("run", run.log_text()), ("plan", plan.stdout + plan.stderr)):
        assert OAUTH_SECRET not in text, f"{name} output contains the client secret"


def _oauthbearer(oauth: dict[str, object]) -> dict[str, object]:
    return {"protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": oauth}}
