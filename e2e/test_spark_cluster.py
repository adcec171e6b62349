"""The data plane on a real Spark standalone cluster (master + worker on 127.0.0.1, from the pyspark install):
the executors read the source and stage the blobs, the mirrors' drivers only plan and commit. The worker and
then the mirrors are killed with SIGKILL mid-run; each archive must still hold every record exactly once."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from e2e.harness import assert_exactly_once, backlog, one_mirror, start
from sinks.blob.chain import is_temp_name
from testkit.kafka_broker import KafkaBroker
from testkit.mirror_run import MirrorRun
from testkit.spark_cluster import SparkCluster
from testkit.targets import FilesystemTarget, S3Target, Target

RECORDS = 16_000  # generated records: values of 0 to ~10 KiB, about 80 MB


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with SparkCluster(tmp_path_factory.mktemp("spark-cluster"), cores=2) as running:
        yield running


def more_flushes(run: MirrorRun, than: int) -> bool:
    return len(run.events("flushed")) > than


def test_the_archives_survive_losing_the_worker_and_the_mirrors(
    kafka: KafkaBroker, cluster: SparkCluster, fs: FilesystemTarget, s3: S3Target, topic_name: str, tmp_path: Path
) -> None:
    """A filesystem mirror and an S3 mirror, two processes sharing the cluster (one core each). Driver and executors
    share this machine, so they see the same filesystem path (in Kubernetes: a volume mounted at the same path)."""
    backlog(kafka.bootstrap, topic_name, [RECORDS], seed=31)
    conf = {**cluster.driver_conf(), "spark.cores.max": "1"}
    # Small jobs (64 blobs of 250 offsets, two per job): the backlog lasts well beyond the kills below.
    spark = {"master": cluster.master_url, "max-offsets-per-job": 500, "conf": conf}
    flush = {"max-time-ms": 500, "max-offsets": 250}
    targets: list[Target] = [fs, s3]
    configs = [
        one_mirror(tmp_path, kafka.bootstrap, target, topic_name, flush=flush, spark=spark, name=f"mirror{i}.yaml")
        for i, target in enumerate(targets)
    ]
    with contextlib.ExitStack() as stack:
        runs = [
            stack.enter_context(start(config, tmp_path / f"run{i}.log", target))
            for i, (config, target) in enumerate(zip(configs, targets, strict=True))
        ]
        for run in runs:
            run.wait_for_log(r"msg=flushed")
        cluster.kill_worker()  # the jobs in flight lose their executors and wait for new ones
        time.sleep(2)
        cluster.start_worker()
        for run in runs:
            flushed = len(run.events("flushed"))
            run.wait_until(partial(more_flushes, run, flushed + 1), 120, "flushes on the new worker")
        for run in runs:
            run.kill9()
    for target in targets:
        stopped_at = target.next_offset(topic_name, 0)
        assert stopped_at is not None and 0 < stopped_at < RECORDS, "the mirror was meant to die mid-backlog"
    # The rest in big jobs (the small ones were for the kills; 32 jobs took 18 s): the chains go on in bigger blobs.
    spark = {**spark, "max-offsets-per-job": RECORDS}
    flush = {"max-time-ms": 500, "max-offsets": 4_000}
    configs = [
        one_mirror(tmp_path, kafka.bootstrap, target, topic_name, flush=flush, spark=spark, name=f"final{i}.yaml")
        for i, target in enumerate(targets)
    ]
    with contextlib.ExitStack() as stack:
        runs = [
            stack.enter_context(start(config, tmp_path / f"final{i}.log", target))
            for i, (config, target) in enumerate(zip(configs, targets, strict=True))
        ]
        for run, target in zip(runs, targets, strict=True):
            run.wait_for_offsets(partial(target.next_offset, topic_name), {0: RECORDS})
        for run in runs:
            run.drain()
    for target in targets:
        assert_exactly_once(kafka.bootstrap, target, topic_name)
    assert not any(is_temp_name(name) for name in fs.names(topic_name, 0))  # staged leftovers cleaned on start
