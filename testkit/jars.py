"""Locate the Apache Kafka broker jars fetched by Maven, and the schema registry built from Maven Central."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

KAFKA_VERSION = "3.9.1"
SCALA_VERSION = "2.13"
FETCH_COMMAND = "bash scripts/fetch-jars.sh"


class MissingJarsError(RuntimeError):
    """The broker jars are not where we expect them."""


def kafka_broker_jar_dir() -> Path:
    """Return the directory holding the Kafka broker jars (classpath `<dir>/*`).

    MIRROR_V3_KAFKA_BROKER_JARS points straight at the directory; otherwise it is
    `${MIRROR_V3_JARS_DIR:-~/.cache/mirror-v3/jars}/kafka-broker-<version>`.
    """
    override = os.environ.get("MIRROR_V3_KAFKA_BROKER_JARS")
    if override:
        jar_dir = Path(override).expanduser()
    else:
        base = os.environ.get("MIRROR_V3_JARS_DIR") or "~/.cache/mirror-v3/jars"
        jar_dir = Path(base).expanduser() / f"kafka-broker-{KAFKA_VERSION}"

    broker_jar = f"kafka_{SCALA_VERSION}-{KAFKA_VERSION}.jar"
    if not (jar_dir / broker_jar).is_file():
        raise MissingJarsError(
            f"Kafka broker jars not found: {jar_dir / broker_jar} is missing. Fetch them with: {FETCH_COMMAND}"
        )
    return jar_dir


REGISTRY_VERSION = "2.4.2.Final"  # jars/schema-registry/pom.xml's apicurio.version
REGISTRY_BUILD_COMMAND = "bash scripts/build-registry.sh"
REGISTRY_POM = Path(__file__).resolve().parents[1] / "jars" / "schema-registry" / "pom.xml"


def schema_registry_build_name() -> str:
    """`schema-registry-<version>-<the pom's digest>`: a changed pom (an exclusion, a pinned dependency) is a new
    build, never the cached one of the pom before it. scripts/build-registry.sh names its output the same way."""
    digest = hashlib.sha256(REGISTRY_POM.read_bytes()).hexdigest()[:12]
    return f"schema-registry-{REGISTRY_VERSION}-{digest}"


def schema_registry_jar() -> Path:
    """The runnable schema registry (Apicurio Registry's runner jar, its lib/ beside it):
    `${MIRROR_V3_JARS_DIR:-~/.cache/mirror-v3/jars}/<schema_registry_build_name()>/schema-registry-1-runner.jar`."""
    base = os.environ.get("MIRROR_V3_JARS_DIR") or "~/.cache/mirror-v3/jars"
    jar = Path(base).expanduser() / schema_registry_build_name() / "schema-registry-1-runner.jar"
    if not jar.is_file():
        raise MissingJarsError(f"schema registry not built: {jar} is missing. Build it with: {REGISTRY_BUILD_COMMAND}")
    return jar
