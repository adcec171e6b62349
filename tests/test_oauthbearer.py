"""SASL/OAUTHBEARER: the config of each token method, the token each client gets (aiokafka's provider, librdkafka's
properties or callback), client credentials against a local token endpoint, unsigned JWTs, and Amazon MSK IAM's
signed handshake parameters (no MSK is reachable from a test, so the token is checked, not a login)."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from aiokafka.conn import OAuthAuthenticator

import kafka_clients.settings as kafka_clients
from config import ConfigError, parse_config
from config.errors import format_path
from config.model import KafkaSecurity, OAuthAwsMskIam, OAuthClientCredentials, OAuthUnsecuredJwt, SaslConfig
from config.secrets import MissingSecretError
from core.logs import JsonFormatter, KeyValueFormatter, log_event
from kafka_clients.oauth_tokens import (
    Token,
    TokenError,
    fetch_client_credentials,
    librdkafka_config,
    msk_iam_token,
    token_properties,
    unsecured_jwt,
)
from kafka_clients.settings import OAuthTokenProvider, aiokafka_settings, librdkafka_properties, token_provider
from testkit.ports import free_port
from testkit.token_server import TokenServer

CLIENT_SECRET = "oauth-client-secret-do-not-log-3318"


@pytest.fixture
def token_server() -> Iterator[TokenServer]:
    with TokenServer({"mirror": CLIENT_SECRET}, lifetime_s=600) as server:
        yield server


@pytest.fixture(autouse=True)
def fresh_providers() -> Iterator[None]:
    kafka_clients._providers.clear()
    yield
    kafka_clients._providers.clear()


def claims(jwt: str) -> dict[str, Any]:
    header, payload, signature = jwt.split(".")
    assert json.loads(base64.urlsafe_b64decode(header + "==")) == {"alg": "none"}
    assert signature == ""
    decoded: dict[str, Any] = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def oauth_security(oauth: Any, protocol: str = "SASL_PLAINTEXT") -> KafkaSecurity:
    return KafkaSecurity(protocol=protocol, sasl=SaslConfig(mechanism="OAUTHBEARER", oauthbearer=oauth))  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ config

CONFIG = """
destination: {{type: filesystem, root: /a}}
clusters:
  prod:
    bootstrap-servers: "k:9092"
    security: {security}
mirrors:
  - {{name: m, cluster: prod, topic: t, partition: 0}}
"""


def test_each_method_parses() -> None:
    for security, expected in [
        (
            "{protocol: SASL_SSL, sasl: {mechanism: OAUTHBEARER, oauthbearer: {method: client-credentials, "
            "token-endpoint-url: 'https://idp/token', client-id: c, client-secret-env: S, scope: kafka, "
            "extensions: {logicalCluster: lkc-1}}}}",
            OAuthClientCredentials(
                token_endpoint_url="https://idp/token",
                client_id="c",
                client_secret_env="S",
                scope="kafka",
                extensions={"logicalCluster": "lkc-1"},
            ),
        ),
        (
            "{protocol: SASL_PLAINTEXT, sasl: {mechanism: OAUTHBEARER, oauthbearer: {method: unsecured-jwt, "
            "principal: mirror}}}",
            OAuthUnsecuredJwt(principal="mirror"),
        ),
        (
            "{protocol: SASL_SSL, sasl: {mechanism: OAUTHBEARER, oauthbearer: {method: aws-msk-iam, region: eu-west-1, "
            "role-arn: 'arn:aws:iam::1:role/mirror', role-session-name: mirror-v3}}}",
            OAuthAwsMskIam(region="eu-west-1", role_arn="arn:aws:iam::1:role/mirror", role_session_name="mirror-v3"),
        ),
    ]:
        config = parse_config(CONFIG.format(security=security), env={})
        sasl = config.clusters["prod"].security.sasl
        assert sasl is not None and sasl.oauthbearer == expected
        hash(config.clusters["prod"].security)  # the driver caches its clients by security block


@pytest.mark.parametrize(
    ("sasl", "message"),
    [
        ("{mechanism: OAUTHBEARER}", "sasl.oauthbearer: mechanism OAUTHBEARER needs an oauthbearer block"),
        (
            "{mechanism: OAUTHBEARER, username: u, oauthbearer: {method: unsecured-jwt, principal: p}}",
            "sasl.username: mechanism OAUTHBEARER takes no user name or password",
        ),
        ("{mechanism: PLAIN, username: u}", "sasl.password-env: required field is missing (mechanism PLAIN)"),
        (
            "{mechanism: SCRAM-SHA-512, username: u, password-env: P, "
            "oauthbearer: {method: unsecured-jwt, principal: p}}",
            "sasl.oauthbearer: mechanism SCRAM-SHA-512 does not use tokens",
        ),
        (
            "{mechanism: OAUTHBEARER, oauthbearer: {principal: p}}",
            "sasl.oauthbearer.method: required field is missing; expected one of: client-credentials, "
            "unsecured-jwt, aws-msk-iam",
        ),
        (
            "{mechanism: OAUTHBEARER, oauthbearer: {method: aws-msk-iam, region: eu-west-1}}",
            "sasl.oauthbearer.method: aws-msk-iam needs protocol SASL_SSL (MSK's IAM port), not SASL_PLAINTEXT",
        ),
        (
            "{mechanism: OAUTHBEARER, oauthbearer: {method: client-credentials, token-endpoint-url: 'http://i/t', "
            "client-id: c, client-secret-env: S, extensions: {auth: x}}}",
            "sasl.oauthbearer.extensions.auth: an extension name is letters only, and not auth",
        ),
        (
            "{mechanism: OAUTHBEARER, oauthbearer: {method: client-credentials, token-endpoint-url: 'http://i/t', "
            "client-id: c, client-secret-env: S, extensions: {pool: 'a,b'}}}",
            "sasl.oauthbearer.extensions.pool: an extension value is printable ASCII without spaces or ','",
        ),
    ],
)
def test_inconsistent_sasl_blocks_are_config_errors(sasl: str, message: str) -> None:
    security = f"{{protocol: SASL_PLAINTEXT, sasl: {sasl}}}"
    with pytest.raises(ConfigError) as caught:
        parse_config(CONFIG.format(security=security), env={})
    field, problem = message.split(": ", 1)
    assert caught.value.path is not None and format_path(caught.value.path) == f"clusters.prod.security.{field}"
    assert caught.value.problem.startswith(problem), caught.value.problem


def test_a_secret_written_inline_is_refused() -> None:
    text = CONFIG.format(security="{}").replace(
        "{name: m, cluster: prod, topic: t, partition: 0}",
        "{name: m, topic: t, partition: 0, source: {bootstrap-servers: 'k:9092', security: {protocol: SASL_SSL, sasl: "
        "{mechanism: OAUTHBEARER, oauthbearer: {method: client-credentials, token-endpoint-url: 'http://i/t', "
        "client-id: c, client-secret: s}}}}}",
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env={})
    assert caught.value.path == ("mirrors", 0, "source", "security", "sasl", "oauthbearer", "client-secret")
    assert caught.value.problem.startswith("unknown field")


def test_msk_role_settings_must_be_consistent() -> None:
    base = "{protocol: SASL_SSL, sasl: {mechanism: OAUTHBEARER, oauthbearer: {method: aws-msk-iam, region: r, %s}}}"
    where = ("clusters", "prod", "security", "sasl", "oauthbearer")
    with pytest.raises(ConfigError) as caught:
        parse_config(CONFIG.format(security=base % "role-session-name: s"), env={})
    assert (caught.value.path, caught.value.problem) == (
        (*where, "role-session-name"),
        "role-session-name without role-arn",
    )
    with pytest.raises(ConfigError) as caught:
        parse_config(CONFIG.format(security=base % "profile: p, role-arn: 'arn:aws:iam::1:role/r'"), env={})
    assert (caught.value.path, caught.value.problem) == ((*where, "profile"), "set only one of profile and role-arn")


# ------------------------------------------------------------------------------------ client credentials


def client_credentials(server: TokenServer, **extra: Any) -> OAuthClientCredentials:
    return OAuthClientCredentials(
        token_endpoint_url=server.url, client_id="mirror", client_secret_env="E2E_OAUTH_SECRET", **extra
    )


def test_librdkafka_fetches_client_credentials_itself(
    token_server: TokenServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2E_OAUTH_SECRET", CLIENT_SECRET)
    oauth = client_credentials(token_server, scope="kafka read", extensions={"logicalCluster": "lkc-1", "pool": "p2"})
    properties = librdkafka_properties(oauth_security(oauth), "f")
    assert properties == {
        "security.protocol": "sasl_plaintext",
        "sasl.mechanism": "OAUTHBEARER",
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.token.endpoint.url": token_server.url,
        "sasl.oauthbearer.client.id": "mirror",
        "sasl.oauthbearer.client.secret": CLIENT_SECRET,
        "sasl.oauthbearer.scope": "kafka read",
        "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,pool=p2",
    }
    assert "oauth_cb" not in librdkafka_config(properties)


async def test_aiokafka_gets_one_token_per_lifetime_from_the_endpoint(
    token_server: TokenServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("E2E_OAUTH_SECRET", CLIENT_SECRET)
    oauth = client_credentials(token_server, scope="kafka", extensions={"logicalCluster": "lkc-1"})
    settings = aiokafka_settings(oauth_security(oauth), "clusters.prod.security")
    provider = settings["sasl_oauth_token_provider"]
    assert (settings["sasl_mechanism"], settings["security_protocol"]) == ("OAUTHBEARER", "SASL_PLAINTEXT")
    # Every aiokafka client of the cluster shares the provider, so connections share the token.
    assert aiokafka_settings(oauth_security(oauth), "clusters.prod.security")["sasl_oauth_token_provider"] is provider

    first = await provider.token()
    assert claims(first)["sub"] == "mirror"
    assert claims(first)["scope"] == ["kafka"]
    assert await provider.token() == first
    assert [(r.client_id, r.grant_type, r.scope) for r in token_server.requests] == [
        ("mirror", "client_credentials", "kafka")
    ]
    # What aiokafka sends as the SASL client-first message (RFC 7628): the token and the extensions.
    message = OAuthAuthenticator(sasl_oauth_token_provider=provider)._build_oauth_client_request(
        first, OAuthAuthenticator(sasl_oauth_token_provider=provider)._token_extensions()
    )
    assert message == f"n,,\x01auth=Bearer {first}\x01logicalCluster=lkc-1\x01\x01"

    # At 80 % of the token's 600 s, a new one is fetched.
    later = time.time() + 0.81 * 600
    monkeypatch.setattr("kafka_clients.settings.time.time", lambda: later)
    await provider.token()
    assert len(token_server.granted()) == 2


def test_a_refused_secret_is_a_permanent_error_naming_the_endpoint(token_server: TokenServer) -> None:
    with pytest.raises(TokenError) as caught:
        fetch_client_credentials(token_server.url, "mirror", "wrong", None, 5)
    assert str(caught.value) == (
        f"token endpoint {token_server.url} answered HTTP 401: invalid_client (unknown client or wrong secret)"
    )
    assert caught.value.permanent and caught.value.status == 401
    assert caught.value.provider == f"token endpoint {token_server.url}"
    assert "wrong" not in str(caught.value).replace("wrong secret", "")


def test_an_unreachable_endpoint_is_a_transient_error() -> None:
    url = f"http://127.0.0.1:{free_port()}/token"
    with pytest.raises(TokenError) as caught:
        fetch_client_credentials(url, "mirror", CLIENT_SECRET, None, 5)
    assert caught.value.provider == f"token endpoint {url}" and caught.value.status is None
    assert caught.value.problem.startswith("unreachable: ") and "refused" in caught.value.problem
    assert not caught.value.permanent


def test_the_client_secret_must_be_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("E2E_OAUTH_SECRET", raising=False)
    oauth = OAuthClientCredentials(token_endpoint_url="http://i/t", client_id="c", client_secret_env="E2E_OAUTH_SECRET")
    for build in (aiokafka_settings, librdkafka_properties):
        with pytest.raises(MissingSecretError) as caught:
            build(oauth_security(oauth), "m.security")
        field = "m.security.sasl.oauthbearer.client-secret-env"
        assert (caught.value.field, caught.value.variable) == (field, "E2E_OAUTH_SECRET")


def test_the_client_secret_never_reaches_a_log_line(token_server: TokenServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("E2E_OAUTH_SECRET", CLIENT_SECRET)
    properties = librdkafka_properties(oauth_security(client_credentials(token_server)), "f")
    records: list[logging.LogRecord] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.oauthbearer")
    logger.handlers[:] = [Capture()]
    logger.propagate, logger.level = False, logging.DEBUG
    # What a library might print at DEBUG: the whole configuration, or the basic-auth header it sent.
    basic = base64.b64encode(f"mirror:{CLIENT_SECRET}".encode()).decode()
    log_event(logger, logging.DEBUG, "client config", config=str(properties), header=f"Basic {basic}")
    for formatter in (KeyValueFormatter(), JsonFormatter()):
        line = formatter.format(records[0])
        assert CLIENT_SECRET not in line
        assert "***" in line


# ----------------------------------------------------------------------------------------- unsecured JWT


async def test_both_clients_present_the_same_kind_of_unsigned_jwt() -> None:
    oauth = OAuthUnsecuredJwt(principal="mirror-v3", scope="kafka read", lifetime_ms=60_000)
    before = int(time.time())
    token = unsecured_jwt("mirror-v3", "kafka read", 60)
    assert claims(token.value)["sub"] == "mirror-v3"
    assert claims(token.value)["scope"] == ["kafka", "read"]
    assert claims(token.value)["exp"] - claims(token.value)["iat"] == 60
    assert claims(token.value)["iat"] >= before

    properties = librdkafka_properties(oauth_security(oauth), "f")
    config = librdkafka_config(properties)
    assert not any(key.startswith("mirror-v3.") for key in config)  # librdkafka would refuse them
    value, expires_at, principal = config["oauth_cb"]("")
    assert (claims(value)["sub"], principal) == ("mirror-v3", "mirror-v3")
    assert 55 <= expires_at - time.time() <= 61

    provider = aiokafka_settings(oauth_security(oauth), "f")["sasl_oauth_token_provider"]
    assert claims(await provider.token())["sub"] == "mirror-v3"


# ------------------------------------------------------------------------------------------- AWS MSK IAM


@pytest.fixture
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAMSKTESTKEY000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "msk-test-secret-key")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "msk-test-session-token")


def presigned(token: str) -> tuple[str, dict[str, str]]:
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}{parsed.path}", {k: v[0] for k, v in parse_qs(parsed.query).items()}


@pytest.mark.usefixtures("aws_credentials")
def test_the_msk_iam_token_is_a_presigned_connect_request_for_the_region() -> None:
    token = msk_iam_token("eu-west-1")
    endpoint, query = presigned(token.value)
    day = datetime.now(UTC).strftime("%Y%m%d")
    assert endpoint == "https://kafka.eu-west-1.amazonaws.com/"
    assert query["Action"] == "kafka-cluster:Connect"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Credential"] == f"AKIAMSKTESTKEY000001/{day}/eu-west-1/kafka-cluster/aws4_request"
    assert query["X-Amz-Expires"] == "900"
    assert query["X-Amz-Security-Token"] == "msk-test-session-token"
    assert query["X-Amz-SignedHeaders"] == "host"
    assert len(query["X-Amz-Signature"]) == 64
    assert query["User-Agent"].startswith("aws-msk-iam-sasl-signer-python/")
    signed_at = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()
    assert token.expires_at == signed_at + 900


@pytest.mark.usefixtures("aws_credentials")
async def test_both_clients_sign_msk_iam_tokens_where_they_run(monkeypatch: pytest.MonkeyPatch) -> None:
    oauth = OAuthAwsMskIam(region="us-east-1")
    properties = librdkafka_properties(oauth_security(oauth, "SASL_SSL"), "f")
    # Plain strings travel to the Spark task; the callback is made there.
    assert properties == {
        "security.protocol": "sasl_ssl",
        "sasl.mechanism": "OAUTHBEARER",
        "mirror-v3.oauthbearer.method": "aws-msk-iam",
        "mirror-v3.oauthbearer.region": "us-east-1",
        "ssl.ca.location": "probe",
        "ssl.endpoint.identification.algorithm": "https",
    }
    signed: list[Token] = []
    real = msk_iam_token

    def spy(*args: Any) -> Token:
        signed.append(real(*args))
        return signed[-1]

    monkeypatch.setattr("kafka_clients.oauth_tokens.msk_iam_token", spy)
    from confluent_kafka import Producer

    # A librdkafka client asks its oauth_cb for the token as it is made (no broker needed for that).
    closed = f"127.0.0.1:{free_port()}"
    Producer({"bootstrap.servers": closed, "log_level": 0, **librdkafka_config(properties)})
    assert len(signed) == 1
    endpoint, query = presigned(signed[0].value)
    assert (endpoint, query["Action"]) == ("https://kafka.us-east-1.amazonaws.com/", "kafka-cluster:Connect")

    provider = aiokafka_settings(oauth_security(oauth, "SASL_SSL"), "f")["sasl_oauth_token_provider"]
    assert isinstance(provider, OAuthTokenProvider)
    assert presigned(await provider.token())[0] == "https://kafka.us-east-1.amazonaws.com/"
    assert len(signed) == 2


def test_without_aws_credentials_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(TokenError) as caught:
        msk_iam_token("eu-west-1")
    assert caught.value.provider == "AWS MSK IAM for region eu-west-1" and not caught.value.permanent
    assert caught.value.problem.startswith("made no token: ")


def test_msk_settings_travel_as_plain_strings() -> None:
    oauth = OAuthAwsMskIam(region="eu-west-1", role_arn="arn:aws:iam::1:role/r", role_session_name="s")
    assert token_properties(oauth) == {
        "mirror-v3.oauthbearer.method": "aws-msk-iam",
        "mirror-v3.oauthbearer.region": "eu-west-1",
        "mirror-v3.oauthbearer.role-arn": "arn:aws:iam::1:role/r",
        "mirror-v3.oauthbearer.role-session-name": "s",
    }


def test_a_token_provider_is_shared_per_oauth_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S", "x" * 8)
    oauth = OAuthClientCredentials(token_endpoint_url="http://i/t", client_id="c", client_secret_env="S")
    same = OAuthClientCredentials(token_endpoint_url="http://i/t", client_id="c", client_secret_env="S")
    assert token_provider(oauth, "f") is token_provider(same, "f")
    other = OAuthClientCredentials(token_endpoint_url="http://i/t", client_id="d", client_secret_env="S")
    assert token_provider(other, "f") is not token_provider(oauth, "f")


def test_an_assumed_roles_credentials_sign_the_msk_token(
    aws_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.server import ThreadedMotoServer
    from moto.sts.models import sts_backends

    port = free_port()
    sts = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    sts.start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        role = "arn:aws:iam::123456789012:role/mirror-v3"
        token = msk_iam_token("eu-west-1", role, "mirror-v3-session")
    finally:
        sts.stop()
    _, query = presigned(token.value)
    # Signed with the role's temporary credentials, not the ones in the environment.
    assumed = [r for b in sts_backends.values() for r in b["global"].assumed_roles if r.role_arn == role]
    assert [r.session_name for r in assumed][-1] == "mirror-v3-session"
    assert query["X-Amz-Credential"].split("/")[0] == assumed[-1].access_key_id
    assert query["X-Amz-Security-Token"] == assumed[-1].session_token
