"""The Python daemon Spark starts on every executor (`spark.python.daemon.module`): pyspark's own daemon, run after
two changes that every worker it forks inherits.

1. pyspark from its installed package, not from pyspark.zip. Spark puts `$SPARK_HOME/python/lib/pyspark.zip` and
   py4j's zip first on the workers' PYTHONPATH. Python cannot cache compiled modules inside a zip, so every process
   compiled each pyspark module it imported, and `importlib.invalidate_caches()` (before every task) re-read the
   archives (see workers.python_worker). When the zips lie inside the very pyspark package the rest of sys.path
   imports (a pip install: `.../site-packages/pyspark/python/lib/pyspark.zip`), they hold the same code: they are
   taken off sys.path. Beside a Spark distribution that has no such package they stay, and nothing changes.
2. The modules the tasks import are imported once, here, before the fork: each worker starts with them instead of
   importing them on its first task. Importing them starts no Python thread and opens no connection (checked), so
   forking after them is as safe as after pyspark's own daemon, which imports numpy before it forks.
3. What they made is frozen out of the garbage collector's reach (`gc.freeze`) before the fork. pyspark's daemon
   runs a full `gc.collect()` in a reused worker after every task, and a full collection walks every tracked object:
   about 97 000 after these imports, 36 ms of CPU per collection here, so about 40 ms per task whatever the task did
   (a job of 2 empty tasks cost 75-87 ms of worker CPU, measured in 4 runs of 40 jobs). Frozen objects are
   never collected, and nothing imported here is garbage; the walk then covers only what tasks made. It also spares
   the forked workers the copy-on-write of every page the walk would touch.

Measured on this 2-core machine, the first job of a session (2 tasks): see docs/spark-tuning.md.
"""

from __future__ import annotations

import gc
import importlib
import runpy
import sys
from collections.abc import Sequence
from importlib.machinery import PathFinder
from pathlib import Path

# What the tasks of every job kind import: the job modules import pyarrow, numpy and the sinks (a job is an RDD
# of task numbers, workers.range_job: pyspark's worker needs neither its Arrow serializers nor pandas); the range
# reader imports confluent_kafka lazily, so it is named here; and each destination kind's task half (its target's
# staging or produce, its blob reader) comes with the job's pickled closure, so it is named too: otherwise every
# worker imports (and, without bytecode caches, compiles) it at its first task. Before the destinations became
# packages, verify_job imported them all through one mixed module.
TASK_MODULES = (
    "pyarrow.parquet",
    "confluent_kafka",
    "workers.range_job",
    "workers.restore_job",
    "workers.verify_job",
    "sinks.blob.writer",
    "sinks.filesystem.store",
    "sinks.filesystem.reading",
    "sinks.s3.staging",
    "sinks.s3.reading",
    "sinks.kafka.produce",
)


def installed_spark_zips(path: Sequence[str]) -> list[str]:
    """The entries of `path` that are pyspark's (or py4j's) zips from inside the pyspark package that the other
    entries import, when those entries also import py4j: the same code, importable without them."""
    zips = [entry for entry in path if entry.endswith(".zip") and Path(entry).name.startswith(("pyspark", "py4j"))]
    others = [entry for entry in path if entry not in zips]
    pyspark = PathFinder.find_spec("pyspark", others)
    if not zips or pyspark is None or not pyspark.submodule_search_locations:
        return []
    if PathFinder.find_spec("py4j", others) is None:
        return []
    package = Path(next(iter(pyspark.submodule_search_locations))).resolve()
    return [entry for entry in zips if Path(entry).resolve().parent == package / "python" / "lib"]


def prepare_process() -> None:
    """Take the installed zips off sys.path, import what the tasks need, and freeze it out of the collector's
    walks."""
    for entry in installed_spark_zips(sys.path):
        sys.path.remove(entry)
        sys.path_importer_cache.pop(entry, None)
    for module in TASK_MODULES:
        importlib.import_module(module)
    gc.collect()  # garbage of the imports goes now, not frozen for the workers' life
    gc.freeze()


if __name__ == "__main__":
    prepare_process()
    # pyspark's daemon reads its worker module from argv, as Spark passes it.
    runpy.run_module("pyspark.daemon", run_name="__main__", alter_sys=True)
