"""Kafka client settings derived from a `security` block, for both kinds of client the process runs.

The asyncio clients (aiokafka: offset queries, the destination producer) take keyword arguments and an
`ssl.SSLContext`; the librdkafka consumers inside Spark tasks take properties (`librdkafka_properties`).
Both are built from the same config so a cluster is reached the same way by every client. PEM material
goes to the task consumers inline (not as a path) so Spark executors on other hosts need no copy of the
files.
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import msgspec
from aiokafka.abc import AbstractTokenProvider

from config.client_properties import ClientPropertyValue, as_librdkafka
from config.model import (
    KafkaDestination,
    KafkaSecurity,
    OAuthBearerConfig,
    OAuthClientCredentials,
    SchemaRegistryConfig,
    SourceConfig,
    TlsConfig,
)
from config.secrets import ConfigReferenceError, env_secret
from kafka_clients.oauth_tokens import Token, fetch_client_credentials, token_properties, token_source
from kafka_clients.schema_registry import RegistryAccess
from kafka_clients.tls import tls_context


@dataclass(frozen=True)
class ClusterAccess:
    """How every client of this process reaches one Kafka cluster: its `security` block and `client-properties`
    resolved once (secrets read, PEM files loaded, the TLS context and the token provider made), for both kinds of
    client, so each reaches it the same way. Each call hands out a copy the caller may change."""

    bootstrap_servers: str
    _aiokafka: Mapping[str, Any]
    _librdkafka: Mapping[str, str]

    def aiokafka(self) -> dict[str, Any]:
        """Keyword arguments of aiokafka's clients (an SSLContext, a token provider: the driver's, not picklable)."""
        return dict(self._aiokafka)

    def librdkafka(self) -> dict[str, str]:
        """librdkafka's properties, PEM material inline (Spark executors on other hosts need no copy of a file)."""
        return dict(self._librdkafka)


# Resolved clusters by their block as written (and the secrets it names, as set): every partition and client of a
# cluster gets one value, so an estate of a thousand TLS partitions loads the files and builds the context once.
_resolved: dict[bytes, ClusterAccess] = {}


def cluster_access(cluster: SourceConfig | KafkaDestination, field: str) -> ClusterAccess:
    """The access of `cluster` (a source cluster's block or the Kafka destination), resolved on first use; `field` is
    the config path of the block (`destination`, `clusters.prod`), for errors. Raises ConfigReferenceError (a secret
    that is not set, TLS files that cannot be loaded)."""
    security = cluster.security
    key = msgspec.json.encode(
        [field, cluster.bootstrap_servers, security, cluster.client_properties, _named_secrets(security)]
    )
    found = _resolved.get(key)
    if found is None:
        found = ClusterAccess(
            cluster.bootstrap_servers,
            aiokafka_settings(security, f"{field}.security"),
            librdkafka_properties(security, f"{field}.security", cluster.client_properties),
        )
        _resolved[key] = found
    return found


def _named_secrets(security: KafkaSecurity) -> list[str | None]:
    """The values of the environment variables the block names: a secret set anew is resolved anew."""
    names = [security.sasl.password_env if security.sasl is not None else None]
    oauth = security.sasl.oauthbearer if security.sasl is not None else None
    names.append(oauth.client_secret_env if isinstance(oauth, OAuthClientCredentials) else None)
    names.append(security.tls.key_password_env if security.tls is not None else None)
    return [None if name is None else os.environ.get(name) for name in names]


def aiokafka_settings(security: KafkaSecurity, field: str) -> dict[str, Any]:
    """Keyword arguments for AIOKafkaProducer / AIOKafkaConsumer / AIOKafkaAdminClient.

    `field` is the config path of the security block (e.g. `destination.security`), for errors.
    """
    settings: dict[str, Any] = {"security_protocol": security.protocol}
    sasl = security.sasl
    if sasl is not None and sasl.oauthbearer is not None:
        settings.update(
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=token_provider(sasl.oauthbearer, f"{field}.sasl.oauthbearer"),
        )
    elif sasl is not None:
        assert sasl.password_env is not None  # the loader checked (config.loader.security_problem)
        settings.update(
            sasl_mechanism=sasl.mechanism,
            sasl_plain_username=sasl.username,
            sasl_plain_password=env_secret(sasl.password_env, f"{field}.sasl.password-env"),
        )
    if security.protocol in ("SSL", "SASL_SSL"):
        settings["ssl_context"] = ssl_context(security.tls or TlsConfig(), f"{field}.tls")
    return settings


def ssl_context(tls: TlsConfig, field: str) -> ssl.SSLContext:
    password = None
    if tls.key_password_env is not None and tls.cert_file is not None and tls.key_file is not None:
        password = env_secret(tls.key_password_env, f"{field}.key-password-env")
    try:
        return tls_context(tls.ca_file, tls.cert_file, tls.key_file, password, tls.check_hostname)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigReferenceError(field, f"cannot load the TLS files: {_reason(exc)}") from None


def librdkafka_properties(
    security: KafkaSecurity, field: str, client_properties: Mapping[str, ClientPropertyValue] | None = None
) -> dict[str, str]:
    """librdkafka (confluent-kafka) properties for the consumers inside Spark tasks. PEM material is
    inline, so executors on other hosts need no copy of the files. `client_properties` (the cluster's
    pass-through map, checked at load against the keys mirror-v3 owns) come first; security settings win."""
    properties = as_librdkafka(client_properties or {})
    properties["security.protocol"] = security.protocol.lower()
    sasl = security.sasl
    if sasl is not None and sasl.oauthbearer is not None:
        properties["sasl.mechanism"] = "OAUTHBEARER"
        properties.update(_librdkafka_oauthbearer(sasl.oauthbearer, f"{field}.sasl.oauthbearer"))
    elif sasl is not None:
        assert sasl.username is not None and sasl.password_env is not None  # the loader checked
        properties["sasl.mechanism"] = sasl.mechanism
        properties["sasl.username"] = sasl.username
        properties["sasl.password"] = env_secret(sasl.password_env, f"{field}.sasl.password-env")
    tls = security.tls if security.protocol in ("SSL", "SASL_SSL") else None
    if security.protocol in ("SSL", "SASL_SSL"):
        tls = tls or TlsConfig()
        if tls.ca_file is not None:
            properties["ssl.ca.pem"] = _read_pem(tls.ca_file, f"{field}.tls.ca-file")
        else:
            properties["ssl.ca.location"] = "probe"  # the system's CA store, wherever this host keeps it
        if tls.cert_file is not None and tls.key_file is not None:
            properties["ssl.certificate.pem"] = _read_pem(tls.cert_file, f"{field}.tls.cert-file")
            properties["ssl.key.pem"] = _read_pem(tls.key_file, f"{field}.tls.key-file")
            if tls.key_password_env is not None:
                properties["ssl.key.password"] = env_secret(tls.key_password_env, f"{field}.tls.key-password-env")
        properties["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
    return properties


def _librdkafka_oauthbearer(oauth: OAuthBearerConfig, field: str) -> dict[str, str]:
    if isinstance(oauth, OAuthClientCredentials):
        # librdkafka's own client-credentials support fetches and refreshes the token.
        properties = {
            "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": oauth.token_endpoint_url,
            "sasl.oauthbearer.client.id": oauth.client_id,
            "sasl.oauthbearer.client.secret": env_secret(oauth.client_secret_env, f"{field}.client-secret-env"),
        }
        if oauth.scope is not None:
            properties["sasl.oauthbearer.scope"] = oauth.scope
        if oauth.extensions:
            properties["sasl.oauthbearer.extensions"] = ",".join(f"{k}={v}" for k, v in oauth.extensions.items())
        return properties
    return token_properties(oauth)  # an oauth_cb, made where the client is (oauth_tokens.librdkafka_config)


# One provider per token source: every aiokafka client of a cluster shares its token (aiokafka asks at every
# connection), so a token endpoint sees one request per token lifetime, not one per connection.
_providers: dict[OAuthBearerConfig, OAuthTokenProvider] = {}


def token_provider(oauth: OAuthBearerConfig, field: str) -> OAuthTokenProvider:
    """The aiokafka token provider of an oauthbearer block (ConfigReferenceError if its secret is not set)."""
    provider = _providers.get(oauth)
    if provider is None:
        extensions: dict[str, str] = {}
        make: Callable[[], Token]
        if isinstance(oauth, OAuthClientCredentials):
            url, client_id, scope = oauth.token_endpoint_url, oauth.client_id, oauth.scope
            secret = env_secret(oauth.client_secret_env, f"{field}.client-secret-env")
            extensions = dict(oauth.extensions)

            def make() -> Token:
                return fetch_client_credentials(url, client_id, secret, scope, _TOKEN_REQUEST_TIMEOUT_S)

        else:
            source = token_source(token_properties(oauth))
            assert source is not None
            make = source
        provider = _providers[oauth] = OAuthTokenProvider(make, extensions)
    return provider


_TOKEN_REQUEST_TIMEOUT_S = 30.0


class OAuthTokenProvider(AbstractTokenProvider):  # type: ignore[misc]  # aiokafka has no type hints
    """aiokafka's token provider: the cached token until 80 % of its lifetime has passed (librdkafka's refresh
    point too), then a new one, made in a worker thread (the signer and the HTTP request block)."""

    REFRESH_AT = 0.8

    def __init__(self, make: Callable[[], Token], extensions: Mapping[str, str] | None = None) -> None:
        self._make = make
        self._extensions = dict(extensions or {})
        self._token: Token | None = None
        self._refresh_at = 0.0
        self._lock = anyio.Lock()

    async def token(self) -> str:
        async with self._lock:  # one request for the connections opening at once
            now = time.time()
            if self._token is None or now >= self._refresh_at:
                token = await anyio.to_thread.run_sync(self._make)
                self._token = token
                self._refresh_at = now + max(0.0, token.expires_at - now) * self.REFRESH_AT
            return self._token.value

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)


def _read_pem(path: str, field: str) -> str:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigReferenceError(field, f"cannot read {path}: {_reason(exc)}") from None
    if "-----BEGIN " not in text:
        raise ConfigReferenceError(field, f"{path} is not a PEM file")
    return text


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def registry_access(registry: SchemaRegistryConfig, field: str) -> RegistryAccess:
    """How the tasks reach a schema registry, its secrets read from the environment here (MissingSecretError names
    the variable and `field`)."""
    tls = registry.tls
    key_password = None
    if tls is not None and tls.key_password_env is not None:
        key_password = env_secret(tls.key_password_env, f"{field}.tls.key-password-env")
    return RegistryAccess(
        url=registry.url,
        username=registry.username,
        password=None if registry.password_env is None else env_secret(registry.password_env, f"{field}.password-env"),
        bearer_token=None
        if registry.bearer_token_env is None
        else env_secret(registry.bearer_token_env, f"{field}.bearer-token-env"),
        ca_file=None if tls is None else tls.ca_file,
        cert_file=None if tls is None else tls.cert_file,
        key_file=None if tls is None else tls.key_file,
        key_password=key_password,
        check_hostname=True if tls is None else tls.check_hostname,
        timeout_s=registry.request_timeout_ms / 1000,
    )
