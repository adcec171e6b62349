"""Where Spark's Kafka connector jars live, and a clear error when they are not there."""

from __future__ import annotations

import os
from pathlib import Path

FETCH_COMMAND = "bash scripts/fetch-jars.sh"


class MissingJarsError(RuntimeError):
    """A jar directory is missing or incomplete; the message says how to fetch it."""


def jars_root() -> Path:
    return Path(os.environ.get("MIRROR_V3_JARS_DIR", "~/.cache/mirror-v3/jars")).expanduser()


def spark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def spark_kafka_jar_dir() -> Path:
    """MIRROR_V3_SPARK_JARS points at a ready directory; otherwise the cache dir for this pyspark."""
    override = os.environ.get("MIRROR_V3_SPARK_JARS")
    return Path(override).expanduser() if override else jars_root() / f"spark-kafka-{spark_version()}"


def spark_kafka_jars() -> list[Path]:
    directory = spark_kafka_jar_dir()
    connector = f"spark-sql-kafka-0-10_2.13-{spark_version()}.jar"
    if not (directory / connector).is_file():
        raise MissingJarsError(
            f"Spark Kafka connector {connector} not found in {directory}; fetch it with: {FETCH_COMMAND} "
            "(or set MIRROR_V3_SPARK_JARS to a directory that holds it and its dependencies)"
        )
    return sorted(directory.glob("*.jar"))
