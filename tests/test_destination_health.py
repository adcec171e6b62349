"""The destination's outages as the operator sees them: down from the first retried write of any mirror until no
mirror retries, one WARN and one INFO per spell, and which mirrors are retrying."""

from __future__ import annotations

import logging

import pytest

from sinks.destination_health import DestinationHealth, DestinationOutage


def test_a_spell_lasts_while_any_mirror_retries_and_is_reported_once_each_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    health = DestinationHealth("s3://bucket/backups", clock=lambda: now[0])
    seen: list[DestinationOutage | None] = []
    health.listen(seen.append)
    assert seen == [None] and health.outage is None
    with caplog.at_level(logging.INFO, logger="mirror_v3.destination"):
        health.failing("orders-0", "HTTP 503 SlowDown")
        now[0] = 101.0
        health.failing("orders-1", "HTTP 503 SlowDown")  # a second mirror: the same outage
        health.failing("orders-0", "timed out")  # its next retry
        assert health.outage == DestinationOutage(100.0, "HTTP 503 SlowDown", 2)
        assert health.retrying("orders-0") == "timed out" and health.retrying("orders-2") is None
        health.ended("orders-0", succeeded=True)  # one mirror's success proves nothing of the other's
        assert health.outage is not None and health.outage.retrying == 1
        now[0] = 104.5
        health.ended("orders-1", succeeded=True)
        health.ended("orders-1", succeeded=True)  # (a spell ends once)
    assert health.outage is None and health.retrying("orders-1") is None
    assert seen == [None, DestinationOutage(100.0, "HTTP 503 SlowDown", 1), None]
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert lines == [("WARNING", "destination unreachable"), ("INFO", "destination reachable again")]
    assert caplog.records[1].mirror_v3_fields == {"destination": "s3://bucket/backups", "down_s": 4.5}  # type: ignore[attr-defined]
    health.failing("orders-2", "refused")  # a new spell
    assert health.outage is not None and health.outage.since == 104.5


def test_an_outage_whose_last_spell_gave_up_ends_without_saying_the_destination_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = DestinationHealth("kafka://dest:9092")
    spells = health.spells("orders-0")  # what the mirror's RetryingSink reports to
    with caplog.at_level(logging.INFO, logger="mirror_v3.destination"):
        spells.failing("produce timed out")
        spells.ended(succeeded=False)  # past retry.deadline-ms: the mirror's own ERROR line says so
    assert health.outage is None
    assert [r.getMessage() for r in caplog.records] == ["destination unreachable"]
