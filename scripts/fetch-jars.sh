#!/usr/bin/env bash
# Fetch the JVM jars from Maven Central into the jar cache (skips what is already there):
#   - Spark's Kafka connector at the exact version of the installed pyspark, with its dependencies;
#   - the Apache Kafka broker used by the tests, the benchmarks and the quickstart.
# MIRROR_V3_JARS_DIR overrides the cache (default ~/.cache/mirror-v3/jars).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python}"
jars_dir="${MIRROR_V3_JARS_DIR:-$HOME/.cache/mirror-v3/jars}"
spark_version="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
kafka_version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/jars/kafka-broker/pom.xml")"

fetch() {  # fetch <pom dir> <output dir> <marker jar> [maven -D args...]
  local pom_dir="$1" out="$2" marker="$3"; shift 3
  if [[ -f "$out/$marker" ]]; then
    echo "jars present: $out"
    return
  fi
  echo "fetching jars into $out"
  local staging="$out.partial"
  rm -rf "$staging"
  (cd "$here/jars/$pom_dir" && mvn -q -B -s "$here/jars/maven-settings.xml" package \
      -Djars.output="$staging" "$@" && rm -rf target)
  rm -rf "$out"
  mv "$staging" "$out"
}

fetch spark-kafka "$jars_dir/spark-kafka-$spark_version" "spark-sql-kafka-0-10_2.13-$spark_version.jar" \
  -Dspark.version="$spark_version"
fetch kafka-broker "$jars_dir/kafka-broker-$kafka_version" "kafka_2.13-$kafka_version.jar"
