"""/metrics, /healthz, /readyz and /mirrors, served from the event loop."""

from __future__ import annotations

import json

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Gauge

from sinks.destination_health import DestinationHealth
from telemetry.http import HttpEndpoint, PlainMirror, Readiness
from testkit.ports import free_port


@pytest.fixture
def port() -> int:
    return free_port()


async def get(port: int, path: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


async def test_endpoints(port: int) -> None:
    registry = CollectorRegistry()
    Gauge("mirror_v3_test_gauge", "a test gauge", registry=registry).set(7)
    a = PlainMirror("a", source_cluster="west", lag_offsets=0.0, pending_age_s=0.0)  # failed below: no age shown
    b = PlainMirror("b", source_cluster="east", lag_offsets=500.0, held_since_at=1_700_000_000.0, pending_age_s=2.5)
    readiness = Readiness(mirrors=lambda: [a, b], max_lag=100)
    endpoint = HttpEndpoint(registry, readiness, port)
    assert await endpoint.start() == port
    try:
        status, body = await get(port, "/metrics")
        assert status == 200 and "mirror_v3_test_gauge 7.0" in body
        assert await get(port, "/healthz") == (200, "ok\n")

        readiness.spark_ready = False
        status, body = await get(port, "/readyz")
        assert status == 503 and "a: not started" in body and "b: not started" in body
        a.started = b.started = True
        status, body = await get(port, "/readyz")
        assert status == 503 and body == "not ready: spark: session starting; b: lag 500 > 100\n"
        readiness.spark_ready = True
        status, body = await get(port, "/readyz")
        assert status == 503 and "b: lag 500 > 100" in body
        b.lag_offsets = 3.0
        assert await get(port, "/readyz") == (200, "ready\n")
        # A source cluster down: degraded (not ready), and its mirrors say so.
        readiness.unreachable["east"] = "offset query failed: refused"  # b's source cluster
        assert await get(port, "/readyz") == (
            503,
            "not ready: source cluster east unreachable: offset query failed: refused\n",
        )
        states = json.loads((await get(port, "/mirrors"))[1])["mirrors"]
        assert [(m["state"], m["error"]) for m in states] == [
            ("running", None),
            ("source-unreachable", "offset query failed: refused"),
        ]
        readiness.unreachable.clear()
        assert await get(port, "/readyz") == (200, "ready\n")
        # The destination failing b's writes: degraded, and b says so.
        readiness.destination = DestinationHealth("kafka://dest:9092")
        readiness.destination.failing("b", "produce timed out")
        assert await get(port, "/readyz") == (
            503,
            "not ready: destination unreachable: produce timed out (mirrors retrying: 1)\n",
        )
        states = json.loads((await get(port, "/mirrors"))[1])["mirrors"]
        assert [(m["state"], m["error"]) for m in states] == [
            ("running", None),
            ("destination-unreachable", "produce timed out"),
        ]
        readiness.destination.ended("b", succeeded=True)
        assert await get(port, "/readyz") == (200, "ready\n")
        readiness.draining = True
        assert (await get(port, "/readyz"))[0] == 503

        a.failure, a.restart_at = "destination /x: not a directory", 1234.5
        status, body = await get(port, "/mirrors")
        assert status == 200 and json.loads(body) == {
            "draining": True,
            "mirrors": [
                {
                    "name": "a",
                    "state": "restarting",
                    "error": "destination /x: not a directory",
                    "restart-at": 1234.5,
                    "held-since": None,
                    "pending-age": None,
                },
                {
                    "name": "b",
                    "state": "running",
                    "error": None,
                    "restart-at": None,
                    "held-since": 1_700_000_000.0,
                    "pending-age": 2.5,
                },
            ],
            "spark": None,
        }
        a.restart_at = None
        assert json.loads((await get(port, "/mirrors"))[1])["mirrors"][0]["state"] == "failed"

        endpoint.loop_lag_s = 60.0
        assert (await get(port, "/healthz"))[0] == 503
    finally:
        await endpoint.stop()


async def test_port_zero_disables() -> None:
    assert await HttpEndpoint(CollectorRegistry(), Readiness(mirrors=list), 0).start() is None


async def test_port_in_use_is_a_warning_not_fatal(port: int, caplog: pytest.LogCaptureFixture) -> None:
    first = HttpEndpoint(CollectorRegistry(), Readiness(mirrors=list), port)
    assert await first.start() == port
    try:
        second = HttpEndpoint(CollectorRegistry(), Readiness(mirrors=list), port)
        assert await second.start() is None
        assert any(r.levelname == "WARNING" and "not started" in r.getMessage() for r in caplog.records)
    finally:
        await first.stop()


def test_a_mirror_whose_flush_waits_on_a_shared_jobs_other_reads_is_held_by_job_and_not_ready() -> None:
    waits_on = "its flush has waited 3.2s for a shared Spark job of 2 flushes still reading (source clusters a, b)"
    held = PlainMirror("a.t-0", started=True, source_cluster="a", pending_age_s=4.0, waits_on=waits_on)
    other = PlainMirror("b.t-0", started=True, source_cluster="b", pending_age_s=0.5)
    readiness = Readiness(mirrors=lambda: [held, other], unreachable={"b": "no broker answers"})
    states = {m.name: (m.state, m.error) for m in readiness.state().mirrors}
    assert states == {"a.t-0": ("held-by-job", waits_on), "b.t-0": ("source-unreachable", "no broker answers")}
    assert readiness.problems() == ["source cluster b unreachable: no broker answers", f"a.t-0: held: {waits_on}"]
