"""Jars that the tests and the benchmarks load into pyspark's JVM, of the versions that fit the installed pyspark
(fetched from Maven Central by testkit.maven_jars). The mirror needs none of them.

- Spark's own Kafka source (`spark-sql-kafka-0-10`): the benchmark's reference, a Spark Structured Streaming query
  reading Kafka (bench.streaming).
- The table readers: Iceberg's Spark runtime, Delta's `delta-spark` and SQLite's JDBC driver (Iceberg's JDBC catalog
  reads the mirror's embedded SQLite catalog), so that Spark SQL opens the archive's tables by name (e2e).

    python -m testkit.spark_jars     # fetch (or find) them; prints one jar per line
"""

from __future__ import annotations

import sys
from pathlib import Path

from testkit.maven_jars import JarSet, pyspark_version

SCALA_VERSION = "2.13"
KAFKA_CONNECTOR = f"spark-sql-kafka-0-10_{SCALA_VERSION}"
ICEBERG_VERSION = "1.10.0"  # the first Iceberg with a runtime for Spark 4.0
# Delta's releases are built for one Spark minor each: delta-spark 4.0.x is Spark 4.0's.
DELTA_FOR_SPARK = {"4.0": "4.0.0"}
SQLITE_JDBC_VERSION = "3.50.3.0"


def spark_minor(version: str) -> str:
    """`4.0.1` -> `4.0`."""
    return ".".join(version.split(".")[:2])


def spark_kafka_jar_set(version: str | None = None) -> JarSet:
    version = version or pyspark_version()
    return JarSet(
        name=f"spark-sql-kafka-{version}",
        artifacts=(f"org.apache.spark:{KAFKA_CONNECTOR}:{version}",),
        marker=f"{KAFKA_CONNECTOR}-{version}.jar",
        beside_spark=True,
    )


def spark_table_jar_set(version: str | None = None) -> JarSet:
    minor = spark_minor(version or pyspark_version())
    if minor not in DELTA_FOR_SPARK:
        raise ValueError(f"no Delta release is known to fit Spark {minor}: add it to DELTA_FOR_SPARK")
    runtime = f"iceberg-spark-runtime-{minor}_{SCALA_VERSION}"
    delta = DELTA_FOR_SPARK[minor]
    return JarSet(
        name=f"spark-tables-{minor}-iceberg-{ICEBERG_VERSION}-delta-{delta}",
        artifacts=(
            f"org.apache.iceberg:{runtime}:{ICEBERG_VERSION}",
            f"io.delta:delta-spark_{SCALA_VERSION}:{delta}",
            f"org.xerial:sqlite-jdbc:{SQLITE_JDBC_VERSION}",
        ),
        marker=f"{runtime}-{ICEBERG_VERSION}.jar",
        beside_spark=True,
    )


def spark_kafka_jars(version: str | None = None) -> list[Path]:
    """Spark's Kafka source for `version` (default: the installed pyspark's), fetched once and cached."""
    return spark_kafka_jar_set(version).jars()


def spark_table_jars(version: str | None = None) -> list[Path]:
    """Iceberg's and Delta's Spark readers for `version` (default: the installed pyspark's), fetched once."""
    return spark_table_jar_set(version).jars()


def main() -> int:
    for jar in spark_kafka_jars() + spark_table_jars():
        print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
