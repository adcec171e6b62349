"""SASL/OAUTHBEARER tokens: where each `security.sasl.oauthbearer.method` gets its token, for both kinds of client.

- `client-credentials`: an OAuth 2 client-credentials grant against the identity provider's token endpoint.
  librdkafka does this itself (`sasl.oauthbearer.method=oidc`); the driver's aiokafka clients use
  `fetch_client_credentials` through a caching provider (kafka_clients.settings).
- `unsecured-jwt`: an unsigned JWT (`alg: none`) naming a principal, for brokers running Kafka's unsecured
  validator (development and tests only).
- `aws-msk-iam`: Amazon MSK's IAM token, a SigV4-presigned `kafka-cluster:Connect` URL made by AWS's signer
  library (aws-msk-iam-sasl-signer-python) from the standard AWS credential chain, a profile or an assumed role.

A Spark task receives its librdkafka settings as plain strings (they travel inside the job's closure), and a
callback cannot travel that way. So for the two methods librdkafka has no built-in for, `token_properties` writes
how to make the token as `mirror-v3.oauthbearer.*` strings, and `librdkafka_config`, called wherever a librdkafka
client is made (in the task, or in the driver), turns them back into an `oauth_cb`. unsecured-jwt takes this road
too, rather than librdkafka's own unsecured mode, so that both clients present the same token and the tests
against a real broker exercise the callback that MSK IAM depends on.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from config.model import OAuthAwsMskIam, OAuthUnsecuredJwt
from core.errors import MirrorV3Error, first_line

# How a task's librdkafka client makes its token: these keys are mirror-v3's, never librdkafka's.
TOKEN_PREFIX = "mirror-v3.oauthbearer."
CLIENT_LOG = logging.getLogger("librdkafka")
# A handler of its own: where logging is not set up (a Spark task), Python would otherwise print WARNING and
# above to stderr through its last-resort handler. Where it is, records still propagate to the root's.
CLIENT_LOG.addHandler(logging.NullHandler())
_METHOD = TOKEN_PREFIX + "method"


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    expires_at: float  # seconds since the epoch
    principal: str = ""


class TokenError(MirrorV3Error):
    """No token could be had; `permanent` when retrying will not help (the provider refused the credentials)."""

    def __init__(self, provider: str, problem: str, *, permanent: bool, status: int | None = None) -> None:
        self.provider, self.problem, self.permanent, self.status = provider, problem, permanent, status
        super().__init__(f"{provider} {problem}")


# ------------------------------------------------------------------------------------------ unsecured JWT


def unsecured_jwt(principal: str, scope: str | None, lifetime_s: float, now: float | None = None) -> Token:
    """An unsigned JWS compact serialization (`<header>.<claims>.`) with the claims Kafka's unsecured validator
    requires: `sub` (the principal), `iat` and `exp`, and `scope` when given (space-separated, as OAuth writes it)."""
    issued = time.time() if now is None else now
    claims: dict[str, Any] = {"sub": principal, "iat": int(issued), "exp": int(issued + lifetime_s)}
    if scope:
        claims["scope"] = scope.split()
    token = f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."
    return Token(token, float(claims["exp"]), principal)


def _b64url(document: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(document, separators=(",", ":")).encode()).decode().rstrip("=")


# ------------------------------------------------------------------------------------ client credentials


def fetch_client_credentials(
    url: str, client_id: str, client_secret: str, scope: str | None, timeout_s: float, now: float | None = None
) -> Token:
    """One OAuth 2 client-credentials grant (RFC 6749 §4.4): POST to the token endpoint with HTTP basic
    authentication, as librdkafka's oidc method sends it (id and secret not form-encoded first, so both clients
    present the same credentials), and the token with its expiry from `expires_in` (else the JWT's `exp`)."""
    form = {"grant_type": "client_credentials"}
    if scope:
        form["scope"] = scope
    basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
    request = urllib.request.Request(
        url,
        data=urllib.parse.urlencode(form).encode(),
        headers={
            "Authorization": f"Basic {basic}",
            "Content-Type": "application/x-www-form-urlencoded",
            "Accept": "application/json",
        },
        method="POST",
    )
    started = time.time() if now is None else now
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            answer = response.read()
    except urllib.error.HTTPError as exc:
        raise TokenError(
            f"token endpoint {url}",
            f"answered HTTP {exc.code}{_oauth_error(exc)}",
            permanent=exc.code in (400, 401, 403),
            status=exc.code,
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise TokenError(f"token endpoint {url}", f"unreachable: {reason}", permanent=False) from None
    try:
        document = json.loads(answer)
        token = document["access_token"]
        if not isinstance(token, str) or not token:
            raise ValueError("empty access_token")
    except (ValueError, KeyError, TypeError):
        raise TokenError(f"token endpoint {url}", "answered without an access_token", permanent=True) from None
    expires_in = document.get("expires_in")
    if isinstance(expires_in, (int, float)) and expires_in > 0:
        expires_at = started + float(expires_in)
    else:
        expires_at = _jwt_expiry(token) or started + 300.0  # an opaque token without expires_in: ask again soon
    return Token(token, expires_at)


def _oauth_error(exc: urllib.error.HTTPError) -> str:
    """`: invalid_client (description)` from an RFC 6749 §5.2 error answer, when it is one."""
    try:
        document = json.loads(exc.read(4096))
    except (ValueError, OSError):
        return ""
    if not isinstance(document, dict) or not isinstance(document.get("error"), str):
        return ""
    description = document.get("error_description")
    return f": {document['error']}" + (f" ({description})" if isinstance(description, str) and description else "")


def _jwt_expiry(token: str) -> float | None:
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except ValueError:
        return None
    expiry = claims.get("exp") if isinstance(claims, dict) else None
    return float(expiry) if isinstance(expiry, (int, float)) else None


# ------------------------------------------------------------------------------------------- AWS MSK IAM


def msk_iam_token(
    region: str, role_arn: str | None = None, role_session_name: str | None = None, profile: str | None = None
) -> Token:
    """Amazon MSK's IAM token (valid 15 minutes) from AWS's signer: an assumed role, a named profile, or the
    default credential chain (environment, web identity / IRSA, instance profile)."""
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    try:
        if role_arn is not None:
            if role_session_name is not None:
                value, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(
                    region, role_arn, role_session_name
                )
            else:
                value, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_role_arn(region, role_arn)
        elif profile is not None:
            value, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_profile(region, profile)
        else:
            value, expiry_ms = MSKAuthTokenProvider.generate_auth_token(region)
    except Exception as exc:  # botocore raises many kinds; every one means "no IAM credentials"
        raise TokenError(
            f"AWS MSK IAM for region {region}", f"made no token: {first_line(exc, named=True)}", permanent=False
        ) from None
    return Token(str(value), expiry_ms / 1000)


# ------------------------------------------------------------------------ plain settings for Spark tasks


def token_properties(oauth: OAuthUnsecuredJwt | OAuthAwsMskIam) -> dict[str, str]:
    """How to make the token, as plain strings that can travel to a Spark task with the librdkafka settings."""
    if isinstance(oauth, OAuthUnsecuredJwt):
        properties = {
            _METHOD: "unsecured-jwt",
            TOKEN_PREFIX + "principal": oauth.principal,
            TOKEN_PREFIX + "lifetime-ms": str(oauth.lifetime_ms),
        }
        if oauth.scope is not None:
            properties[TOKEN_PREFIX + "scope"] = oauth.scope
        return properties
    properties = {_METHOD: "aws-msk-iam", TOKEN_PREFIX + "region": oauth.region}
    for key, value in (
        ("role-arn", oauth.role_arn),
        ("role-session-name", oauth.role_session_name),
        ("profile", oauth.profile),
    ):
        if value is not None:
            properties[TOKEN_PREFIX + key] = value
    return properties


def token_source(properties: Mapping[str, str]) -> Callable[[], Token] | None:
    """What makes a token anew, from `token_properties`; None when the settings need no callback."""
    method = properties.get(_METHOD)
    if method is None:
        return None

    def setting(name: str) -> str | None:
        return properties.get(TOKEN_PREFIX + name)

    if method == "unsecured-jwt":
        principal, scope = properties[TOKEN_PREFIX + "principal"], setting("scope")
        lifetime_s = int(properties[TOKEN_PREFIX + "lifetime-ms"]) / 1000
        return lambda: unsecured_jwt(principal, scope, lifetime_s)
    if method == "aws-msk-iam":
        region = properties[TOKEN_PREFIX + "region"]
        role_arn, session, profile = setting("role-arn"), setting("role-session-name"), setting("profile")
        return lambda: msk_iam_token(region, role_arn, session, profile)
    raise ValueError(f"unknown {_METHOD}: {method!r}")


def librdkafka_config(properties: Mapping[str, str]) -> dict[str, Any]:
    """The configuration to make a librdkafka (confluent-kafka) client with: `properties` without mirror-v3's own
    keys, plus an `oauth_cb` when they say how to make a token. librdkafka calls it before the first connection
    and again at 80 % of each token's lifetime."""
    config: dict[str, Any] = {key: value for key, value in properties.items() if not key.startswith(TOKEN_PREFIX)}
    # librdkafka's own log lines (a refused connection every backoff, ...) go to Python's logging, not to raw
    # stderr: the process's LOG_LEVEL and format apply, and in Spark tasks they go nowhere (the errors that
    # matter reach the task as error events).
    config["logger"] = CLIENT_LOG
    make = token_source(properties)
    if make is not None:

        def oauth_cb(_oauthbearer_config: str) -> tuple[str, float] | tuple[str, float, str]:
            token = make()
            if token.principal:
                return token.value, token.expires_at, token.principal
            return token.value, token.expires_at

        config["oauth_cb"] = oauth_cb
    return config
