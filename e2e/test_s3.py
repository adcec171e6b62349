"""What only the S3 destination has: the retry layer under injected faults, conditional creates
against a second writer, and a restart whose cost does not grow with the chain's history."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e.destinations import S3DestinationUnderTest, chain, next_offset
from e2e.harness import (
    MirrorProcess,
    assert_same_records,
    cli_env,
    read_archive,
    run_cli,
    scrape_metric,
    source_records,
    wait_until,
    write_config,
)
from sinks.blob_chain import blob_name
from testkit.http_fault_proxy import FaultProxy, RequestInfo
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import create_topic, generate_records, produce
from testkit.ports import free_port
from testkit.s3_servers import MotoServer, S3rverServer, s3_server_skip_reason


def _is_put(info: RequestInfo) -> bool:
    return info.method == "PUT"


@pytest.fixture
def s3(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> S3DestinationUnderTest:
    dest = S3DestinationUnderTest(moto.endpoint, moto.access_key, moto.secret_key, moto.region)
    for name, value in dest.env().items():
        monkeypatch.setenv(name, value)
    return dest


def _through(dest: S3DestinationUnderTest, proxy: FaultProxy) -> S3DestinationUnderTest:
    """The same bucket, with the mirror talking to it through the proxy."""
    routed = S3DestinationUnderTest.__new__(S3DestinationUnderTest)
    routed.__dict__.update(dest.__dict__)
    routed.endpoint = proxy.endpoint
    return routed


def test_faults_are_retried_and_the_chain_equals_the_source(
    kafka: KafkaBroker, s3: S3DestinationUnderTest, moto: MotoServer, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(30_000, seed=41))
    port = free_port()
    with FaultProxy(moto.endpoint) as proxy:
        config = write_config(
            tmp_path / "mirror.yaml",
            bootstrap=kafka.bootstrap,
            destination=_through(s3, proxy),
            mirrors=[{"topic": topic_name, "partition": 0}],
            flush={"max-time-ms": 500, "max-offsets": 3_000},
            spark={"max-offsets-per-read": 1_500},
        )
        mirror = MirrorProcess(config, tmp_path / "run.log", env=cli_env(MIRROR_V3_METRICS_PORT=str(port)))
        try:
            mirror.wait_for_log(r"msg=flushed", timeout=180)
            # Several 503s in a row, then uploads cut mid-body, then a write whose answer is lost.
            proxy.fail_next(6, status=503, match=_is_put)
            proxy.reset_next(2, after_bytes=2_000, match=_is_put)
            proxy.lose_response_next(1, match=_is_put)
            seen_retry = 0.0
            deadline = time.monotonic() + 60
            while proxy.pending_faults and time.monotonic() < deadline:
                value = scrape_metric(port, "mirror_v3_destination_offset_inflight_retry", topic_name, 0) or 0.0
                seen_retry = max(seen_retry, value)
                time.sleep(0.05)
            assert proxy.pending_faults == 0, "the mirror stopped writing"
            assert seen_retry > 0, "the retry gauge never showed the retries"
            wait_until(lambda: next_offset(s3, topic_name, 0) == 30_000, 180, "did not catch up after the faults")
            assert scrape_metric(port, "mirror_v3_destination_offset_inflight_retry", topic_name, 0) == 0
            mirror.terminate()
            assert mirror.wait(60) == 0, mirror.tail()
        finally:
            mirror.stop()
    assert "destination operation failed, retrying" in mirror.log_text()
    assert_same_records(read_archive(s3, topic_name, 0), source_records(kafka.bootstrap, topic_name, 0))


def _same_mirror_twice(
    kafka: KafkaBroker, topic: str, tmp_path: Path, configs: list[Path]
) -> tuple[list[MirrorProcess], list[int]]:
    """Start one process per config at the same moment; return them once one has failed."""
    mirrors = [MirrorProcess(config, tmp_path / f"writer{i}.log") for i, config in enumerate(configs)]
    try:
        wait_until(lambda: any(m.proc.poll() is not None for m in mirrors), 180, "neither writer failed")
        failed = [m.proc.returncode for m in mirrors]
        for m in mirrors:
            if m.proc.poll() is None:
                m.terminate()
                m.wait(60)
        return mirrors, failed
    finally:
        for m in mirrors:
            m.stop()


def test_second_writer_loses_on_412(
    kafka: KafkaBroker, s3: S3DestinationUnderTest, topic_name: str, tmp_path: Path
) -> None:
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(40_000, seed=42))
    # Fixed-size blobs (no time-based flushes): both writers choose the same names, so the
    # conditional create decides between them.
    config = write_config(
        tmp_path / "mirror.yaml",
        bootstrap=kafka.bootstrap,
        destination=s3,
        mirrors=[{"topic": topic_name, "partition": 0}],
        flush={"max-time-ms": 600_000, "max-offsets": 2_000},
        spark={"max-offsets-per-read": 2_000},
    )
    mirrors, codes = _same_mirror_twice(kafka, topic_name, tmp_path, [config, config])
    loser = next(m for m, code in zip(mirrors, codes, strict=True) if code == 1)
    line = next(line for line in loser.log_text().splitlines() if "level=ERROR" in line)
    assert "another writer owns this chain" in line and f"s3://{s3.bucket}/" in line, line
    # Whatever landed is still one valid chain of the source's records.
    landed = read_archive(s3, topic_name, 0)
    source = source_records(kafka.bootstrap, topic_name, 0)
    assert_same_records(landed, source[: len(landed)])


def test_second_writer_on_a_store_that_ignores_if_none_match(
    kafka: KafkaBroker, topic_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = s3_server_skip_reason("s3rver")
    if reason:
        pytest.fail(f"s3rver is part of the test set-up (scripts/setup.sh): {reason}")
    with S3rverServer() as server:
        dest = S3DestinationUnderTest(server.endpoint, server.access_key, server.secret_key, server.region)
        for name, value in dest.env().items():
            monkeypatch.setenv(name, value)
        create_topic(kafka.bootstrap, topic_name)
        produce(kafka.bootstrap, topic_name, 0, generate_records(40_000, seed=43))
        # Different blob sizes: on a store that lets both creates succeed, the writers' names
        # interleave, and the listing right after each write shows the other one.
        configs = [
            write_config(
                tmp_path / f"mirror{i}.yaml",
                bootstrap=kafka.bootstrap,
                destination=dest,
                mirrors=[{"topic": topic_name, "partition": 0}],
                flush={"max-time-ms": 1_000, "max-offsets": size},
                spark={"max-offsets-per-read": size},
            )
            for i, size in enumerate([1_500, 2_000])
        ]
        mirrors, codes = _same_mirror_twice(kafka, topic_name, tmp_path, configs)
        assert 1 in codes, codes
        loser = mirrors[codes.index(1)]
        errors = [line for line in loser.log_text().splitlines() if "level=ERROR" in line]
        assert errors and "another writer" in errors[0], loser.tail()
        # Detected within one flush interval of the foreign blob: the loser's flushes before
        # the failure are few.
        status = run_cli("status", "--config", str(configs[0]), "--deep")
        assert status.returncode == 1 and "corrupt chain" in status.stdout, status.stdout + status.stderr


def test_restart_lists_a_bounded_number_of_times(
    kafka: KafkaBroker, s3: S3DestinationUnderTest, moto: MotoServer, topic_name: str, tmp_path: Path
) -> None:
    """10 000 blobs already in the chain: start-up uses at most 20 LIST calls and reads no body."""
    blobs = 10_000
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, generate_records(blobs + 500, seed=44))
    names = [blob_name(offset, offset) for offset in range(blobs)]  # one offset per blob
    local = threading.local()

    def put(name: str) -> None:
        if not hasattr(local, "client"):
            local.client = moto.client()
        local.client.put_object(Bucket=s3.bucket, Key=s3.key_prefix(topic_name, 0) + name, Body=b"x")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, names))
    assert len(s3.names(topic_name, 0)) == blobs

    with FaultProxy(moto.endpoint) as proxy:
        config = write_config(
            tmp_path / "mirror.yaml",
            bootstrap=kafka.bootstrap,
            destination=_through(s3, proxy),
            mirrors=[{"topic": topic_name, "partition": 0}],
        )
        proxy.reset_counters()
        mirror = MirrorProcess(config, tmp_path / "run.log")
        try:
            start = mirror.wait_for_log(r'msg="mirror starting" .*start_offset=(\d+)', timeout=180)
            counts = proxy.counts
            uploads_listings = sum(1 for r in proxy.requests if "uploads" in r.query)
            assert int(start.group(1)) == blobs
            assert counts.lists + uploads_listings <= 20, (counts, uploads_listings)
            assert counts.get_objects == 0, counts
            wait_until(lambda: next_offset(s3, topic_name, 0) == blobs + 500, 180, "did not continue")
            mirror.terminate()
            assert mirror.wait(60) == 0
        finally:
            mirror.stop()
    assert chain(s3, topic_name, 0)[-1].last == blobs + 499
    log = mirror.log_text()
    assert re.search(r"msg=flushed .*from=10000 ", log), log


def test_round_trip_with_restart_on_seaweedfs(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    """A second, real S3 implementation (checks signatures, honours If-None-Match)."""
    from testkit.s3_servers import SeaweedServer

    reason = s3_server_skip_reason("seaweedfs")
    if reason:
        pytest.fail(f"SeaweedFS is part of the test set-up (pyproject dev extras): {reason}")
    with SeaweedServer() as server:
        dest = S3DestinationUnderTest(server.endpoint, server.access_key, server.secret_key, server.region)
        env = cli_env(**dest.env())
        create_topic(kafka.bootstrap, topic_name, partitions=2)
        for partition in range(2):
            produce(kafka.bootstrap, topic_name, partition, generate_records(30_000, seed=50 + partition))
        config = write_config(
            tmp_path / "mirror.yaml",
            bootstrap=kafka.bootstrap,
            destination=dest,
            mirrors=[{"topic": topic_name, "partition": p} for p in range(2)],
            flush={"max-time-ms": 1_000, "max-offsets": 4_000},
            spark={"max-offsets-per-read": 2_000},
        )
        first = MirrorProcess(config, tmp_path / "run1.log", env=env)
        try:
            first.wait_for_log(r"msg=flushed", timeout=180, count=3)
            first.kill9()
            first.wait(30)
        finally:
            first.stop()
        second = MirrorProcess(config, tmp_path / "run2.log", env=env)
        try:
            for partition in range(2):
                wait_until(
                    lambda p=partition: next_offset(dest, topic_name, p) == 30_000, 180, f"partition {partition}"
                )
            second.terminate()
            assert second.wait(60) == 0, second.tail()
        finally:
            second.stop()
        for partition in range(2):
            assert_same_records(
                read_archive(dest, topic_name, partition), source_records(kafka.bootstrap, topic_name, partition)
            )
        # Wrong credentials are refused by this store: one clear line, exit 1.
        bad = cli_env(E2E_S3_KEY=server.access_key, E2E_S3_SECRET="not-the-secret")
        denied = run_cli("status", "--config", str(config), env=bad)
        assert denied.returncode == 1 and "access denied" in denied.stdout, denied.stdout + denied.stderr
        assert "not-the-secret" not in denied.stdout + denied.stderr


def test_large_blobs_go_as_conditional_multipart_uploads(
    kafka: KafkaBroker, s3: S3DestinationUnderTest, moto: MotoServer, topic_name: str, tmp_path: Path
) -> None:
    import os

    from testkit.kafka_data import Record

    create_topic(kafka.bootstrap, topic_name)
    # Incompressible 1 KiB values: ~8 MB blobs, above a 5 MiB multipart threshold.
    produce(kafka.bootstrap, topic_name, 0, [Record(b"k%d" % i, os.urandom(1024)) for i in range(24_000)])
    with FaultProxy(moto.endpoint) as proxy:
        routed = _through(s3, proxy)
        config_path = write_config(
            tmp_path / "mirror.yaml",
            bootstrap=kafka.bootstrap,
            destination=routed,
            mirrors=[{"topic": topic_name, "partition": 0}],
            flush={"max-time-ms": 60_000, "max-offsets": 8_000},
            spark={"max-offsets-per-read": 4_000},
        )
        import yaml

        config = yaml.safe_load(config_path.read_text())
        config["destination"].update({"multipart-threshold-bytes": 5 * 1024 * 1024, "part-size-bytes": 5 * 1024 * 1024})
        config_path.write_text(yaml.safe_dump(config))
        mirror = MirrorProcess(config_path, tmp_path / "run.log")
        try:
            wait_until(lambda: next_offset(s3, topic_name, 0) == 24_000, 180, "not mirrored")
            mirror.terminate()
            assert mirror.wait(60) == 0, mirror.tail()
        finally:
            mirror.stop()
        completes = [r for r in proxy.requests if r.method == "POST" and "uploadId" in r.query]
    assert len(completes) >= 3, [(r.method, r.query) for r in proxy.requests][:20]
    assert all(r.header("If-None-Match") == "*" for r in completes)
    assert_same_records(read_archive(s3, topic_name, 0), source_records(kafka.bootstrap, topic_name, 0))
