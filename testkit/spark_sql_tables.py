"""Spark SQL opens the archive's tables by name, as a data engineer's Spark would: Iceberg's Spark runtime and Delta's
jars from Maven Central (testkit.spark_jars) in a local Spark session of the virtualenv's pyspark, run as a child
process so that its JVM ends with the reads. Each query's rows are written to `<out>/<name>.parquet`.

    python -m testkit.spark_sql_tables --out DIR \\
        --iceberg-catalog mirror_v3 jdbc jdbc:sqlite:/archive/_catalog/iceberg.db file:///archive/_iceberg \\
        --query orders='SELECT * FROM mirror_v3.archive.orders'

    read_with_spark_sql({"orders": "SELECT ..."}, out_dir, [IcebergCatalogSpec(...)])   # the same from a test

Iceberg catalogs: `jdbc` (the mirror's embedded SQLite catalog, read through Iceberg's JDBC catalog: PyIceberg's
SQL catalog keeps its tables in the same `iceberg_tables` layout) or `rest`. Delta tables are read by path
(SELECT ... FROM delta.`<path>`). A local session takes 10-20 s to start with these jars.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from testkit.spark_jars import spark_table_jars


@dataclass(frozen=True)
class IcebergCatalogSpec:
    """A catalog as Spark names it: `name` (the SQL catalog prefix), `kind` (jdbc or rest), its `uri`, and its
    `warehouse` ("" for none)."""

    name: str
    kind: str
    uri: str
    warehouse: str = ""


class SparkSqlError(AssertionError):
    """Spark SQL could not read a table."""


def read_with_spark_sql(
    queries: Mapping[str, str], out: Path, catalogs: Sequence[IcebergCatalogSpec] = (), timeout: float = 300
) -> dict[str, pa.Table]:
    """Run each query in one fresh local Spark session (Iceberg's and Delta's readers loaded); its rows by name."""
    spark_table_jars()  # fetched here, not inside the child's timeout
    out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "testkit.spark_sql_tables", "--out", str(out)]
    for catalog in catalogs:
        argv += ["--iceberg-catalog", catalog.name, catalog.kind, catalog.uri, catalog.warehouse]
    for name, query in queries.items():
        argv += ["--query", f"{name}={query}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise SparkSqlError(f"spark sql exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-6000:]}")
    return {name: pq.read_table(out / f"{name}.parquet") for name in queries}


def _session(catalogs: Sequence[IcebergCatalogSpec]) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[1]")
        .appName("mirror-v3 table reader")
        .config("spark.jars", ",".join(str(jar) for jar in spark_table_jars()))
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        # One core reads a test's few files: Spark's 200 shuffle partitions and Delta's 50 for rebuilding a table's
        # state from its log are hundreds of empty tasks (the Delta read took 19 s with them).
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.databricks.delta.snapshotPartitions", "1")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,io.delta.sql.DeltaSparkSessionExtension",
        )
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    )
    for catalog in catalogs:
        prefix = f"spark.sql.catalog.{catalog.name}"
        builder = builder.config(prefix, "org.apache.iceberg.spark.SparkCatalog")
        builder = builder.config(f"{prefix}.type", catalog.kind).config(f"{prefix}.uri", catalog.uri)
        if catalog.warehouse:
            builder = builder.config(f"{prefix}.warehouse", catalog.warehouse)
    return builder.getOrCreate()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.spark_sql_tables")
    parser.add_argument("--out", required=True, type=Path, help="a directory: <name>.parquet per query")
    parser.add_argument("--query", action="append", default=[], metavar="NAME=SQL")
    parser.add_argument(
        "--iceberg-catalog", action="append", nargs=4, default=[], metavar=("NAME", "KIND", "URI", "WAREHOUSE")
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = _session([IcebergCatalogSpec(*spec) for spec in args.iceberg_catalog])
    try:
        for named in args.query:
            name, query = named.split("=", 1)
            pq.write_table(spark.sql(query).toArrow(), args.out / f"{name}.parquet")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
