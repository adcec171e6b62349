"""What only S3 has, through the real CLI: the retry layer under injected faults (with status of the running
mirror), a second process refused by the lease, a store that ignores If-None-Match, multipart uploads and a restart
whose LIST count does not grow with the chain, and SeaweedFS as a second real implementation.

The store-level rules S3 shares with the other stores (put-if-absent, the lost-answer retry, listings, leftovers,
the tail search) are proven in tests/test_blob_store_contract.py against moto in-process.
"""

from __future__ import annotations

import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from e2e.harness import (
    assert_exactly_once,
    backlog,
    mirror_config,
    one_mirror,
    partitions_of,
    refused_beside,
    start,
    status_json,
    status_rows,
)
from sinks.blob.chain import blob_name
from testkit.http_fault_proxy import FaultProxy, RequestInfo
from testkit.kafka_broker import KafkaBroker
from testkit.kafka_data import Record, create_topic, produce
from testkit.mirror_run import MirrorRun, run_cli
from testkit.ports import free_port
from testkit.s3_servers import MotoServer, S3rverServer, SeaweedServer, s3_server_skip_reason
from testkit.targets import S3Target, assert_same_records, chain, source_records


def _is_part_upload(info: RequestInfo) -> bool:
    return info.method == "PUT" and "partNumber" in info.query


def _is_claim(info: RequestInfo) -> bool:
    return info.method == "PUT" and "/_claims/" in info.path


def _is_complete(info: RequestInfo) -> bool:
    return info.method == "POST" and "uploadId" in info.query


def test_faults_are_retried_and_the_chain_equals_the_source(
    kafka: KafkaBroker, s3: S3Target, moto: MotoServer, topic_name: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic_name, [15_000, 2_000], seed=41)
    port = free_port()
    with FaultProxy(moto.endpoint) as proxy:
        routed = s3.routed(proxy.endpoint)
        config = mirror_config(
            tmp_path / "mirror.yaml",
            kafka.bootstrap,
            routed,
            partitions_of(topic_name, 2),
            flush={"max-time-ms": 500, "max-offsets": 1_500},
            spark={"max-offsets-per-job": 1_500},
        )
        with MirrorRun(config, tmp_path / "run.log", env=s3.env(), metrics_port=port) as run:
            run.wait_for_log(r"msg=flushed .*mirror=\S+-0 ")
            # Part uploads (Spark tasks): several 503s in a row, then uploads cut mid-body, then a part whose answer
            # is lost. Commits (the driver): a claim whose answer is lost, 503s, then a completion whose answer is lost.
            proxy.fail_next(6, status=503, match=_is_part_upload)
            proxy.reset_next(2, after_bytes=2_000, match=_is_part_upload)
            proxy.lose_response_next(1, match=_is_part_upload)
            proxy.lose_response_next(1, match=_is_claim)
            proxy.fail_next(3, status=503, match=_is_complete)
            proxy.lose_response_next(1, match=_is_complete)
            seen_retry = 0.0
            deadline = time.monotonic() + 60
            # Sampled until the faults are spent and a retry was seen: the last fault (a lost completion) is spent the
            # moment the proxy drops its answer, and the gauge rises only then, while the driver backs off to retry it
            # (a run that stopped sampling at the last fault, on a busy machine, saw none).
            while (proxy.pending_faults or not seen_retry) and time.monotonic() < deadline:
                for partition in range(2):
                    value = run.metric(
                        "mirror_v3_destination_offset_inflight_retry", topic=topic_name, partition=partition
                    )
                    seen_retry = max(seen_retry, value or 0.0)
                time.sleep(0.05)
            assert proxy.pending_faults == 0, "the mirror stopped writing"
            assert seen_retry > 0, "the retry gauge never showed the commit's retries"
            run.wait_for_offsets(lambda p: s3.next_offset(topic_name, p), {0: 15_000, 1: 2_000})
            staging_retries = run.metric("mirror_v3_destination_staging_retries_total", topic=topic_name) or 0.0
            assert staging_retries >= 9, "the tasks' retries of part uploads were not counted"
            assert run.metric("mirror_v3_destination_offset_inflight_retry", topic=topic_name, partition=0) == 0
            assert run.metric("mirror_v3_destination_up") == 1  # the commits' retries are over
            # Each spell of retried commits: one WARN when the destination stopped taking them, one INFO when it
            # took them again.
            down, back = run.events("destination unreachable"), run.events("destination reachable again")
            assert down and len(back) == len(down), run.tail()
            assert all(float(event["down_s"]) >= 0 for event in back)
            # Status of the running mirrors, through the same proxy.
            assert status_rows(config, env=s3.env()) == [(15_000, 15_000, 0, None), (2_000, 2_000, 0, None)]
            for row in status_json(config, env=s3.env())[1]["mirrors"]:
                assert row["last-flush"] is not None
            table = run_cli("status", "--config", str(config), "--wide", env=s3.env())
            assert table.returncode == 0 and re.search(
                rf"{re.escape(topic_name)}\s+0\s+0\s+15000\s+15000\s+-\s+0\s", table.stdout
            )
            run.drain()
    assert "destination operation failed, retrying" in run.log_text()  # the driver's, on commits
    assert "destination writes retried by the tasks" in run.log_text()
    assert_exactly_once(kafka.bootstrap, s3, topic_name, partitions=2)


def _same_mirror_twice(configs: list[Path], env: dict[str, str], tmp_path: Path) -> tuple[list[MirrorRun], list[int]]:
    """One process per config, started at the same moment; returned once one has failed."""
    runs = [MirrorRun(config, tmp_path / f"writer{i}.log", env=env) for i, config in enumerate(configs)]
    try:
        runs[0].wait_until(lambda: any(not r.running for r in runs), 180, "either writer to fail")
        codes = [r.proc.returncode for r in runs]
        for r in runs:
            if r.running:
                # The survivor drains; on a store that ignores If-None-Match it may see the other's blobs too.
                r.terminate()
                code = r.wait(60)
                assert code == 0 or (code == 1 and "another writer" in r.errors()[0]), r.tail()
        return runs, codes
    finally:
        for r in runs:
            r.stop()


def test_a_second_process_is_refused_by_the_lease_and_the_live_one_goes_on(
    kafka: KafkaBroker, s3: S3Target, topic_name: str, tmp_path: Path
) -> None:
    """A newcomer on a live writer's chain exits 1 within seconds, naming the holder, and touches nothing: the live
    writer's uploads in flight are neither aborted nor raced, and it mirrors to the end. (Two writers that do reach
    the chain, as on a store that ignores If-None-Match below, are fenced by the claims: the store contract test.)"""
    backlog(kafka.bootstrap, topic_name, [20_000], seed=42)
    flush, spark = {"max-time-ms": 300, "max-offsets": 1_000}, {"max-offsets-per-job": 1_000}
    config = one_mirror(tmp_path, kafka.bootstrap, s3, topic_name, flush=flush, spark=spark)
    with start(config, tmp_path / "active.log", s3) as active:
        active.wait_for_log(r"msg=flushed")
        line = refused_beside(active, config, tmp_path / "second.log", s3)
        assert f'error="s3://{s3.bucket}/{s3.prefix}/{topic_name}/_leases/0/: ' in line, line
        active.wait_for_offsets(lambda p: s3.next_offset(topic_name, p), {0: 20_000})
        assert active.errors() == [], active.tail()
        active.drain()
    assert_exactly_once(kafka.bootstrap, s3, topic_name)


def test_a_second_writer_on_a_store_that_ignores_if_none_match(
    kafka: KafkaBroker, topic_name: str, tmp_path: Path
) -> None:
    reason = s3_server_skip_reason("s3rver")
    if reason:
        pytest.fail(f"s3rver is part of the test set-up (scripts/setup.sh): {reason}")
    with S3rverServer() as server:
        target = S3Target(server.endpoint, server.access_key, server.secret_key, server.region)
        backlog(kafka.bootstrap, topic_name, [15_000], seed=43)
        # Different blob sizes: on a store that lets both creates succeed, the writers' names interleave, and the
        # listing right after each write shows the other one.
        configs = [
            mirror_config(
                tmp_path / f"mirror{i}.yaml",
                kafka.bootstrap,
                target,
                partitions_of(topic_name, 1),
                flush={"max-time-ms": 1_000, "max-offsets": size},
                spark={"max-offsets-per-job": size},
            )
            for i, size in enumerate([1_500, 2_000])
        ]
        runs, codes = _same_mirror_twice(configs, target.env(), tmp_path)
        assert 1 in codes, codes
        errors = runs[codes.index(1)].errors()
        assert errors and "another writer" in errors[0], runs[codes.index(1)].tail()
        status = run_cli("status", "--config", str(configs[0]), "--deep", env=target.env())
        if status.returncode == 0:
            # The loser noticed the other writer before a blob of its own landed among the winner's (a race the
            # claims made likelier): then the chain must be whole and hold exactly the source's records.
            landed = target.records(topic_name, 0)
            assert_same_records(landed, source_records(kafka.bootstrap, topic_name, 0)[: len(landed)])
        else:
            assert status.returncode == 1 and "corrupt chain" in status.stdout, status.stdout + status.stderr


@pytest.mark.parametrize(
    "blobs",
    [
        # Soak cases: what they prove is proven in CI at a cheaper level: the tail search's listing count on 10 000
        # blobs in tests/test_blob_chain.py, a two-part staged blob completed with its claim (and the options on
        # each request) against moto in tests/test_s3_write_options.py. 72 s of CI for no new property.
        pytest.param(1_000, id="1000", marks=pytest.mark.soak),
        # The volume run (-m soak): 10 000 objects put into moto take minutes.
        pytest.param(10_000, id="10000", marks=pytest.mark.soak),
    ],
)
def test_a_restart_on_a_long_chain_lists_little_and_large_blobs_go_multipart(
    kafka: KafkaBroker, s3: S3Target, moto: MotoServer, topic_name: str, tmp_path: Path, blobs: int
) -> None:
    """`blobs` one-offset blobs already in the chain: start-up uses at most 20 LIST calls and reads no object.
    Then ~6 MB blobs of incompressible records are staged in 5 MiB parts and completed with If-None-Match."""
    extra = 12_000
    create_topic(kafka.bootstrap, topic_name)
    produce(kafka.bootstrap, topic_name, 0, [Record(b"k%d" % i, b"v") for i in range(blobs)])
    produce(kafka.bootstrap, topic_name, 0, [Record(b"k%d" % i, os.urandom(1024)) for i in range(extra)])
    local = threading.local()

    def put(offset: int) -> None:
        if not hasattr(local, "client"):
            local.client = moto.client()
        local.client.put_object(
            Bucket=s3.bucket, Key=s3.key_prefix(topic_name, 0) + blob_name(offset, offset), Body=b"x"
        )

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, range(blobs)))

    with FaultProxy(moto.endpoint) as proxy:
        routed = s3.routed(proxy.endpoint)
        routed.extra = {"part-size-bytes": 5 * 1024 * 1024}
        config = mirror_config(
            tmp_path / "mirror.yaml",
            kafka.bootstrap,
            routed,
            partitions_of(topic_name, 1),
            flush={"max-time-ms": 60_000, "max-offsets": 6_000},
            spark={"max-offsets-per-job": 3_000},
        )
        proxy.reset_counters()
        with start(config, tmp_path / "run.log", s3) as run:
            run.wait_for_log(r'msg="mirror starting"')
            counts = proxy.counts
            uploads_listings = sum(1 for r in proxy.requests if "uploads" in r.query)
            (starting,) = run.events("mirror starting")
            assert int(starting["start_offset"]) == blobs
            assert counts.lists + uploads_listings <= 20, (counts, uploads_listings)
            assert counts.get_objects == 0, counts
            run.wait_for_offsets(lambda p: s3.next_offset(topic_name, p), {0: blobs + extra})
            run.drain()
        completes = [r for r in proxy.requests if r.method == "POST" and "uploadId" in r.query]
    assert len(completes) >= 2, [(r.method, r.query) for r in proxy.requests][:20]
    assert all(r.header("If-None-Match") == "*" for r in completes)
    assert any("partNumber=2" in r.query for r in proxy.requests if r.method == "PUT"), "no blob took two parts"
    assert chain(s3, topic_name, 0)[-1].last == blobs + extra - 1
    mirrored = s3.records(topic_name, 0, since=blobs)  # the prefilled blobs hold no Parquet
    assert_same_records(mirrored, source_records(kafka.bootstrap, topic_name, 0)[blobs:])


def test_kill_9_and_restart_on_seaweedfs(kafka: KafkaBroker, topic_name: str, tmp_path: Path) -> None:
    """A second, real S3 implementation (checks signatures, honours If-None-Match)."""
    reason = s3_server_skip_reason("seaweedfs")
    if reason:
        pytest.fail(f"SeaweedFS is part of the test set-up (pyproject dev extras): {reason}")
    with SeaweedServer() as server:
        target = S3Target(server.endpoint, server.access_key, server.secret_key, server.region)
        backlog(kafka.bootstrap, topic_name, [8_000, 8_000], seed=50)
        config = mirror_config(
            tmp_path / "mirror.yaml",
            kafka.bootstrap,
            target,
            partitions_of(topic_name, 2),
            flush={"max-time-ms": 1_000, "max-offsets": 1_000},
            spark={"max-offsets-per-job": 1_000},
        )
        with start(config, tmp_path / "run1.log", target) as first:
            first.wait_for_log(r"msg=flushed", count=3)
            first.kill9()
        with start(config, tmp_path / "run2.log", target) as second:
            second.wait_for_offsets(lambda p: target.next_offset(topic_name, p), {0: 8_000, 1: 8_000})
            second.drain()
        assert_exactly_once(kafka.bootstrap, target, topic_name, partitions=2)
        # Wrong credentials are refused by this store: one clear line, exit 1, the secret nowhere.
        bad = {**target.env(), S3Target.SECRET_KEY_ENV: "not-the-secret"}
        denied = run_cli("status", "--config", str(config), env=bad)
        assert denied.returncode == 1 and "access denied" in denied.stdout, denied.stdout + denied.stderr
        assert "not-the-secret" not in denied.stdout + denied.stderr
