"""Jars from Maven Central for the tests and the benchmarks, fetched once into the jar cache.

A `JarSet` names the artifacts of one tool (Spark's Kafka source, Iceberg's and Delta's Spark readers, an Iceberg
REST catalog server). They are fetched like the broker jars (scripts/fetch-jars.sh: Maven with
jars/maven-settings.xml, a `copy-dependencies` into a staging directory that is moved into place whole, so a fetch
cut short leaves nothing that looks complete) into `${MIRROR_V3_JARS_DIR:-~/.cache/mirror-v3/jars}/<name>`.
A set loaded into pyspark's own JVM keeps only the jars whose artifact pyspark's `jars/` lacks: a second copy of a
jar Spark already loads (Hadoop's client, zstd, Scala's library) could shadow it with another version.

    python -m testkit.maven_jars     # fetch (or find) the sets the e2e tests use; prints one directory per line
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = REPO / "jars" / "maven-settings.xml"  # blocks the mirror Spark's parent POM lists before Central
# `<artifact>-<version>.jar`: the version is the last `-<digits>.<digits>...` (`zstd-jni-1.5.6-9.jar`), so an artifact
# with digits of its own keeps them (`spark-sql-kafka-0-10_2.13-4.0.0.jar`, `iceberg-spark-runtime-4.0_2.13-1.10.0.jar`:
# `iceberg-spark-runtime-4.0_2.13`).
_JAR = re.compile(r"^(?P<artifact>.+)-(?P<version>\d+\.\d+[^/]*)\.jar$")

POM = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by testkit/maven_jars.py: {name} and its runtime dependencies. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.mirrorv3</groupId>
  <artifactId>{name}</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
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


class MavenJarsError(RuntimeError):
    """A jar set could not be fetched (no Maven, not served, no network)."""


@dataclass(frozen=True)
class JarSet:
    """`artifacts` are `group:artifact:version[:classifier]`; `marker` is a jar file name the set holds once fetched;
    `beside_spark` keeps only what pyspark's own jars lack (the set is loaded into pyspark's JVM)."""

    name: str
    artifacts: tuple[str, ...]
    marker: str
    beside_spark: bool = False

    def directory(self) -> Path:
        base = os.environ.get("MIRROR_V3_JARS_DIR") or "~/.cache/mirror-v3/jars"
        return Path(base).expanduser() / self.name

    def jars(self) -> list[Path]:
        """The set's jars, fetched on first use."""
        out = self.directory()
        if not (out / self.marker).is_file():
            _fetch(self, out)
        return sorted(out.glob("*.jar"))


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


def missing_from(fetched: Iterable[str], present: Iterable[str]) -> list[str]:
    """The fetched jars whose artifact pyspark's jars do not already hold (in any version)."""
    have = {artifact_of(name) for name in present}
    return sorted(name for name in fetched if artifact_of(name) not in have)


def dependency_xml(artifact: str) -> str:
    """One `<dependency>` of a `group:artifact:version[:classifier]` coordinate."""
    group, name, version, *classifier = artifact.split(":")
    extra = f"<classifier>{classifier[0]}</classifier>" if classifier else ""
    return (
        f"    <dependency><groupId>{group}</groupId><artifactId>{name}</artifactId>"
        f"<version>{version}</version>{extra}</dependency>"
    )


def _fetch(jar_set: JarSet, out: Path) -> None:
    if shutil.which("mvn") is None:
        raise MavenJarsError(f"mvn is needed to fetch {jar_set.name} from Maven Central")
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=f"mirror-v3-{jar_set.name}-") as project:
        everything = Path(project) / "jars"
        dependencies = "\n".join(dependency_xml(artifact) for artifact in jar_set.artifacts)
        pom = POM.format(name=jar_set.name, dependencies=dependencies, output=everything)
        (Path(project) / "pom.xml").write_text(pom)
        done = subprocess.run(
            ["mvn", "-q", "-B", "-s", str(SETTINGS), "package"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if done.returncode != 0:
            raise MavenJarsError(
                f"mvn could not fetch {', '.join(jar_set.artifacts)} (exit {done.returncode}):\n"
                + (done.stdout + done.stderr)[-2000:]
            )
        fetched = [jar.name for jar in everything.glob("*.jar")]
        if jar_set.beside_spark:
            fetched = missing_from(fetched, [jar.name for jar in pyspark_jar_dir().glob("*.jar")])
        staging.mkdir(parents=True)
        for name in fetched:
            shutil.copy2(everything / name, staging / name)
    if not (staging / jar_set.marker).is_file():
        raise MavenJarsError(f"{jar_set.name}: the fetch did not yield {jar_set.marker}")
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)


def main() -> int:
    """The sets the end-to-end tests use (the benchmark's Kafka source is fetched when a benchmark first needs it)."""
    from testkit.iceberg_rest import REST_SERVER_JARS
    from testkit.spark_jars import spark_table_jar_set

    for jar_set in (spark_table_jar_set(), REST_SERVER_JARS):
        jar_set.jars()
        print(jar_set.directory())
    return 0


if __name__ == "__main__":
    sys.exit(main())
