"""The data plane on a real Spark standalone cluster (master + worker on 127.0.0.1, from the pyspark install):
the executors read the source and stage the blobs, the mirror's driver only plans and commits. The worker and
then the mirror are killed with SIGKILL mid-run; the archive must still hold every record exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.harness import assert_exactly_once, backlog, one_mirror, run_until, start
from sinks.blob_chain import is_temp_name
from testkit.kafka_broker import KafkaBroker
from testkit.spark_cluster import SparkCluster
from testkit.targets import FilesystemTarget, S3Target, Target

RECORDS = 40_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), cores=2) as running:
        yield running


def kill_worker_then_mirror(
    kafka: KafkaBroker, cluster: SparkCluster, target: Target, topic: str, tmp_path: Path
) -> None:
    backlog(kafka.bootstrap, topic, [RECORDS], seed=31)
    spark = {"master": cluster.master_url, "max-offsets-per-job": 4_000, "conf": cluster.driver_conf()}
    flush = {"max-time-ms": 500, "max-offsets": 2_000}
    config = one_mirror(tmp_path, kafka.bootstrap, target, topic, flush=flush, spark=spark)
    with start(config, tmp_path / "run1.log", target) as run:
        run.wait_for_log(r"msg=flushed")
        cluster.kill_worker()  # the job in flight loses its executors and waits for new ones
        time.sleep(2)
        cluster.start_worker()
        flushed = len(run.events("flushed"))
        run.wait_until(lambda: len(run.events("flushed")) > flushed + 2, 120, "flushes after the worker came back")
        run.kill9()
    stopped_at = target.next_offset(topic, 0)
    assert stopped_at is not None and 0 < stopped_at < RECORDS, "the mirror was meant to die mid-backlog"
    run_until(config, tmp_path / "run2.log", target, topic, {0: RECORDS})
    assert_exactly_once(kafka.bootstrap, target, topic)


def test_filesystem_on_a_cluster_survives_losing_the_worker_and_the_mirror(
    kafka: KafkaBroker, cluster: SparkCluster, fs: FilesystemTarget, topic_name: str, tmp_path: Path
) -> None:
    """Driver and executors share the machine, so they see the same path (in Kubernetes: a shared volume)."""
    kill_worker_then_mirror(kafka, cluster, fs, topic_name, tmp_path)
    assert not any(is_temp_name(name) for name in fs.names(topic_name, 0))  # staged leftovers cleaned on start


def test_s3_on_a_cluster_survives_losing_the_worker_and_the_mirror(
    kafka: KafkaBroker, cluster: SparkCluster, s3: S3Target, topic_name: str, tmp_path: Path
) -> None:
    kill_worker_then_mirror(kafka, cluster, s3, topic_name, tmp_path)
