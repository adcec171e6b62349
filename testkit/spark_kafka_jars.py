"""Spark's own Kafka source (`spark-sql-kafka-0-10`) for the installed pyspark, fetched from Maven Central.

The mirror needs none of this: only the benchmark's reference, a Spark Structured Streaming query reading Kafka, does
(bench.streaming). The connector is fetched like the broker jars (scripts/fetch-jars.sh: Maven with
jars/maven-settings.xml, a `copy-dependencies` into a staging directory moved into place whole), of the version of
the installed pyspark, and cached by that version in `${MIRROR_V3_JARS_DIR:-~/.cache/mirror-v3/jars}/
spark-sql-kafka-<version>`. Of the connector's runtime dependencies only what pyspark's own `jars/` lacks is kept
(the token provider, kafka-clients, commons-pool2, ...): a second copy of a jar Spark already loads (Hadoop's
client, zstd, lz4, snappy, slf4j) could shadow it with another version on the classpath.

    python -m testkit.spark_kafka_jars     # fetch (or find) them; prints one jar per line
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SCALA_VERSION = "2.13"
CONNECTOR = f"spark-sql-kafka-0-10_{SCALA_VERSION}"
REPO = Path(__file__).resolve().parent.parent
SETTINGS = REPO / "jars" / "maven-settings.xml"  # blocks the mirror Spark's parent POM lists before Central
# `<artifact>-<version>.jar`: the version is the last `-<digits>.<digits>...` (`zstd-jni-1.5.6-9.jar`), so an artifact
# with digits of its own keeps them (`spark-sql-kafka-0-10_2.13-4.0.0.jar`).
_JAR = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.\d+[^/]*)\.jar$")

POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by testkit/spark_kafka_jars.py: Spark's Kafka source and its runtime dependencies. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.mirrorv3</groupId>
  <artifactId>spark-kafka-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>{connector}</artifactId>
      <version>{version}</version>
    </dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
        <executions>
          <execution>
            <id>copy</id>
            <phase>package</phase>
            <goals><goal>copy-dependencies</goal></goals>
            <configuration>
              <outputDirectory>{output}</outputDirectory>
              <includeScope>runtime</includeScope>
            </configuration>
          </execution>
        </executions>
      </plugin>
    </plugins>
  </build>
</project>
"""


class SparkKafkaJarsError(RuntimeError):
    """The connector could not be fetched (no Maven, not served, no network)."""


def pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def pyspark_jar_dir() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def artifact_of(jar: str) -> str | None:
    """`kafka-clients-3.9.0.jar` -> `kafka-clients`; None for a name that is not `<artifact>-<version>.jar`."""
    found = _JAR.match(jar)
    return found.group("artifact") if found else None


def cache_dir(version: str) -> Path:
    base = os.environ.get("MIRROR_V3_JARS_DIR") or "~/.cache/mirror-v3/jars"
    return Path(base).expanduser() / f"spark-sql-kafka-{version}"


def missing_from(fetched: list[str], present: list[str]) -> list[str]:
    """The fetched jars whose artifact pyspark's jars do not already hold (in any version)."""
    have = {artifact_of(name) for name in present}
    return sorted(name for name in fetched if artifact_of(name) not in have)


def spark_kafka_jars(version: str | None = None) -> list[Path]:
    """The connector's jars for `version` (default: the installed pyspark's), fetched once and cached."""
    version = version or pyspark_version()
    out = cache_dir(version)
    marker = out / f"{CONNECTOR}-{version}.jar"
    if not marker.is_file():
        _fetch(version, out)
    return sorted(out.glob("*.jar"))


def _fetch(version: str, out: Path) -> None:
    if shutil.which("mvn") is None:
        raise SparkKafkaJarsError(f"mvn is needed to fetch {CONNECTOR} {version} from Maven Central")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="mirror-v3-spark-kafka-") as project:
        everything = Path(project) / "jars"
        (Path(project) / "pom.xml").write_text(POM.format(connector=CONNECTOR, version=version, output=everything))
        done = subprocess.run(
            ["mvn", "-q", "-B", "-s", str(SETTINGS), "package"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise SparkKafkaJarsError(
                f"mvn could not fetch org.apache.spark:{CONNECTOR}:{version} (exit {done.returncode}):\n"
                + (done.stdout + done.stderr)[-2000:]
            )
        present = [jar.name for jar in pyspark_jar_dir().glob("*.jar")]
        staging.mkdir(parents=True)
        for name in missing_from([jar.name for jar in everything.glob("*.jar")], present):
            shutil.copy2(everything / name, staging / name)
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def main() -> int:
    for jar in spark_kafka_jars():
        print(jar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
