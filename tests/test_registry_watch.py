"""The supervisor's probe of the schema registries: down from the first unanswered probe, back at the first
answer (a refusal is an answer), one WARN and one INFO with the duration per outage, listeners at each transition;
and /readyz degraded meanwhile. Fake registry clients and clock; the real registry is e2e's."""

from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from core.reachability import Outage
from kafka_clients.schema_registry import RegistryAccess, RegistryClient, RegistryUnavailableError
from supervisor.registry_watch import RegistryWatch
from telemetry.http import Readiness


class FakeClient:
    def __init__(self, url: str) -> None:
        self.url = url
        self.down = False
        self.probes = 0

    def ping(self) -> None:
        self.probes += 1
        if self.down:
            raise RegistryUnavailableError(self.url, "GET /config", "connection refused")


async def test_an_outage_is_seen_from_the_first_unanswered_probe_to_the_first_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    clients = {url: FakeClient(url) for url in ("http://source:8081", "http://dr:8081")}
    watch = RegistryWatch(
        [RegistryAccess(url) for url in clients],
        clock=lambda: now[0],
        client=lambda access: clients[access.url],  # type: ignore[arg-type,return-value]
    )
    readiness = Readiness(mirrors=list)
    seen: list[Outage | None] = []

    def changed(outage: Outage | None) -> None:  # as the supervisor's listener does
        seen.append(outage)
        if outage is None:
            readiness.registries.pop("http://dr:8081", None)
        else:
            readiness.registries["http://dr:8081"] = outage.cause

    watch.reachability["http://dr:8081"].listen(changed)
    caplog.set_level(logging.INFO, logger="mirror_v3.schemas")

    await watch.probe()
    assert seen == [None] and readiness.problems() == []
    clients["http://dr:8081"].down = True
    await watch.probe()
    now[0] = 112.5
    await watch.probe()  # still down: no second WARN, no second transition
    outage = Outage("http://dr:8081", 100.0, "GET /config: connection refused")
    assert seen == [None, outage] and watch.reachability["http://source:8081"].outage is None
    assert readiness.problems() == ["schema registry http://dr:8081 unreachable: GET /config: connection refused"]
    clients["http://dr:8081"].down = False
    await watch.probe()
    assert seen == [None, outage, None] and readiness.problems() == []
    lines = [record.getMessage() for record in caplog.records]
    assert sum("schema registry unreachable" in line for line in lines) == 1
    back = [record for record in caplog.records if record.getMessage() == "schema registry reachable again"]
    assert [getattr(record, "mirror_v3_fields", None) for record in back] == [
        {"registry": "http://dr:8081", "down_s": 12.5}
    ]
    assert all(client.probes == 4 for client in clients.values())  # every registry asked at each round


class _Refusing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"error_code": 40101, "message": "Unauthorized"}'
        self.send_response(401)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


def test_a_refusal_is_an_answer_and_a_closed_port_is_not() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        RegistryClient(RegistryAccess(f"http://127.0.0.1:{server.server_port}")).ping()  # 401: up
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(RegistryUnavailableError):
        RegistryClient(RegistryAccess(f"http://127.0.0.1:{server.server_port}", timeout_s=2)).ping()
