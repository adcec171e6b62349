#!/usr/bin/env bash
# Build the schema registry the tests run (Apicurio Registry, from Maven Central artifacts only; see
# jars/schema-registry/pom.xml) into the jar cache, once per version: a runner jar and its lib/ directory,
# about 130 MB, about 40 s the first time. scripts/test.sh calls it; the quickstart does not need it.
# MIRROR_V3_JARS_DIR overrides the cache (default ~/.cache/mirror-v3/jars).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jars_dir="${MIRROR_V3_JARS_DIR:-$HOME/.cache/mirror-v3/jars}"
version="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$here/jars/schema-registry/pom.xml")"
# keyed by the pom's content too (testkit/jars.py names it the same way): a changed pom is a new build
digest="$(sha256sum "$here/jars/schema-registry/pom.xml" | cut -c1-12)"
out="$jars_dir/schema-registry-$version-$digest"
if [[ -f "$out/schema-registry-1-runner.jar" ]]; then
  echo "schema registry present: $out"
  exit 0
fi
command -v mvn >/dev/null || { echo "build-registry: mvn is required to build the test schema registry" >&2; exit 1; }
echo "building the schema registry into $out"
staging="$out.partial"
rm -rf "$staging"
cd "$here/jars/schema-registry"
mvn -q -B -s "$here/jars/maven-settings.xml" package -DskipTests
mkdir -p "$staging"
cp -r target/schema-registry-1-runner.jar target/lib "$staging/"
rm -rf target
rm -rf "$out"
mv "$staging" "$out"
