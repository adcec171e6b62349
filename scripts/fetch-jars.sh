#!/usr/bin/env bash
# Fetch the Apache Kafka broker used by the tests, the benchmarks and the quickstart from Maven Central
# into the jar cache (skips it when already there). The mirror itself needs no jar beyond pyspark's.
# MIRROR_V3_JARS_DIR overrides the cache (default ~/.cache/mirror-v3/jars).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python}"
jars_dir="${MIRROR_V3_JARS_DIR:-$HOME/.cache/mirror-v3/jars}"
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

fetch kafka-broker "$jars_dir/kafka-broker-$kafka_version" "kafka_2.13-$kafka_version.jar"
