"""An OAuth 2 token endpoint for tests: the client-credentials grant (RFC 6749 §4.4) on 127.0.0.1.

It accepts the clients it was given (id -> secret, HTTP basic authentication) and issues unsigned JWTs whose `sub`
is the client id: the tokens a broker with Kafka's unsecured validator accepts (testkit.kafka_broker's OAUTH
listener), so a client-credentials login can be tested end to end against a real broker. A wrong secret is an
RFC 6749 §5.2 `invalid_client` answer (401).

    with TokenServer({"mirror": "secret"}) as server:
        server.url  # http://127.0.0.1:<port>/oauth2/token
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from testkit.ports import HOST
from testkit.processes import StartStop

PATH = "/oauth2/token"


@dataclass(frozen=True)
class TokenRequest:
    client_id: str | None
    grant_type: str | None
    scope: str | None
    granted: bool


class TokenServer(StartStop):
    def __init__(self, clients: Mapping[str, str], lifetime_s: int = 3600) -> None:
        self.clients = dict(clients)
        self.lifetime_s = lifetime_s
        self.requests: list[TokenRequest] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://{HOST}:{self._server.server_address[1]}{PATH}"

    @property
    def is_running(self) -> bool:
        return self._server is not None

    def start(self) -> TokenServer:
        server = ThreadingHTTPServer((HOST, 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        # A short poll interval: stop() waits for the loop to notice, and tests stop one per case.
        self._thread = threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.05), name="token-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def granted(self) -> list[TokenRequest]:
        with self._lock:
            return [r for r in self.requests if r.granted]

    def issue(self, client_id: str, scope: str | None) -> str:
        now = int(time.time())
        claims: dict[str, object] = {"sub": client_id, "iat": now, "exp": now + self.lifetime_s}
        if scope:
            claims["scope"] = scope.split()
        return f"{_b64url({'alg': 'none'})}.{_b64url(claims)}."

    def _record(self, request: TokenRequest) -> None:
        with self._lock:
            self.requests.append(request)


def _b64url(document: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


def _handler(server: TokenServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {key: values[0] for key, values in parse_qs(body).items()}
            client_id, secret = _basic(self.headers.get("Authorization"))
            grant, scope = form.get("grant_type"), form.get("scope")
            granted = (
                self.path == PATH
                and grant == "client_credentials"
                and client_id is not None
                and server.clients.get(client_id) == secret
            )
            server._record(TokenRequest(client_id, grant, scope, granted))
            if not granted:
                self._answer(401, {"error": "invalid_client", "error_description": "unknown client or wrong secret"})
                return
            assert client_id is not None
            token = server.issue(client_id, scope)
            self._answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": server.lifetime_s})

        def _answer(self, status: int, document: dict[str, object]) -> None:
            data = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            return None  # quiet: tests read `requests` instead

    return Handler


def _basic(header: str | None) -> tuple[str | None, str | None]:
    if not header or not header.startswith("Basic "):
        return None, None
    try:
        decoded = base64.b64decode(header.removeprefix("Basic ")).decode()
    except ValueError:
        return None, None
    client_id, _, secret = decoded.partition(":")
    return client_id, secret
