"""Why no bootstrap server of a cluster answered: each address probed once more, its failure named."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import anyio

from kafka_clients.oauth_tokens import TokenError


@dataclass(frozen=True)
class BootstrapDiagnosis:
    reason: str  # one line, per address
    permanent: bool  # a credential or certificate problem: retrying will not help


async def diagnose_bootstrap(bootstrap_servers: str, settings: dict[str, Any], timeout_ms: int) -> BootstrapDiagnosis:
    """Why no bootstrap server answered, found by connecting to each once more.

    aiokafka reports only "Unable to bootstrap" and logs the cause (refused, TLS, SASL) where an
    operator never sees it; this probe runs only after that failure, to name the cause.
    """
    from aiokafka.conn import AIOKafkaConnection
    from aiokafka.errors import AuthenticationFailedError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

    reasons: list[str] = []
    permanent = False
    for address in bootstrap_servers.split(","):
        host, _, port = address.strip().rpartition(":")
        # Not aiokafka's create_conn: it leaves the connection open when the handshake fails (TLS, SASL).
        conn = AIOKafkaConnection(host, int(port), request_timeout_ms=timeout_ms, **settings)
        try:
            with anyio.fail_after(timeout_ms / 1000):
                await conn.connect()
        except TimeoutError:
            conn.close()
            reasons.append(f"{address}: timed out")
            continue
        except Exception as exc:  # any failure is the answer we are looking for
            conn.close()
            reasons.append(f"{address}: {_connection_problem(exc)}")
            permanent = (
                permanent
                or (isinstance(exc, TokenError) and exc.permanent)
                or isinstance(
                    exc,
                    (
                        AuthenticationFailedError,
                        SaslAuthenticationFailed,
                        UnsupportedSaslMechanismError,
                        ssl.SSLCertVerificationError,
                    ),
                )
            )
            continue
        conn.close()
        reasons.append(f"{address}: connects now")
    return BootstrapDiagnosis("; ".join(reasons), permanent)


def _connection_problem(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()
    name = type(exc).__name__
    return f"{name}: {text[0]}" if text and text[0] and text[0] != name else name
