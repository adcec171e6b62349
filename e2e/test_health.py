"""/healthz and /readyz of a running mirror process, through start-up, steady state and shutdown."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from e2e.destinations import FilesystemDestinationUnderTest, next_offset
from e2e.harness import MirrorProcess, cli_env, wait_until, write_config
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce
from testkit.ports import free_port


def probe(port: int, path: str) -> int | None:
    """HTTP status of a probe, None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_probes_follow_the_lifecycle(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(2_000, seed=61))
    fs = FilesystemDestinationUnderTest(tmp_path / "archive")
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=fs,
        mirrors=[{"topic": topic_name, "partition": 0}],
    )
    port = free_port()
    env = cli_env(MIRROR_V3_METRICS_PORT=str(port), MIRROR_V3_READINESS_LAG="0")
    mirror = MirrorProcess(config, tmp_path / "run.log", env=env)
    try:
        # Start-up: alive at once, not ready before the mirror has started and caught up.
        wait_until(lambda: probe(port, "/healthz") == 200, 60, "/healthz never answered")
        seen_not_ready = probe(port, "/readyz") == 503
        wait_until(lambda: next_offset(fs, topic_name, 0) == 2_000, 180, "not mirrored")
        # Steady state: caught up (lag 0 <= MIRROR_V3_READINESS_LAG), alive.
        wait_until(lambda: probe(port, "/readyz") == 200, 30, "/readyz never became ready")
        assert probe(port, "/healthz") == 200
        assert (
            "mirror_v3_destination_offset_verified"
            in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        )
        # New records and a lag bound of 0: not ready until they are durable again.
        produce(kafka.bootstrap, topic_name, 0, generate_records(500, seed=62))
        wait_until(lambda: next_offset(fs, topic_name, 0) == 2_500, 60, "new records not mirrored")
        wait_until(lambda: probe(port, "/readyz") == 200, 30, "/readyz did not recover")
        # Shutdown: no longer ready (or no longer listening), then gone.
        mirror.terminate()
        after_signal = probe(port, "/readyz")
        assert after_signal in (503, None), after_signal
        assert mirror.wait(60) == 0
        assert probe(port, "/healthz") is None
    finally:
        mirror.stop()
    # Spark needs seconds to start, so right after the endpoint came up the backlog was not durable.
    assert seen_not_ready
