#!/usr/bin/env bash
# The whole test suite: set-up, lint, type check, schema freshness, fast tests and end-to-end tests
# against a real Kafka broker and Spark. Extra arguments go to pytest (e.g. -k round_trip, -m soak).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
MIRROR_V3_SETUP_LEAVES_JVM=1 bash scripts/setup.sh
bash scripts/build-registry.sh
venv="${MIRROR_V3_VENV:-$here/.venv}"
# shellcheck disable=SC1091
source "$venv/bin/activate"
# The tables' readers and catalog of the end-to-end tests (Iceberg's Spark runtime, Delta's jars, an Iceberg REST
# catalog server) from Maven Central, skipped when present; the quickstart needs none of them.
python -m testkit.maven_jars >/dev/null
# mypy runs from here on, beside the JVMs' class archives below and then the tests; its verdict is read after them, and
# either failure fails the run. Its incremental cache lives beside the other caches ($MYPY_CACHE_DIR, default
# ~/.cache/mirror-v3/mypy) rather than in the checkout: a clean clone then rechecks only the modules that changed
# and what depends on them (mypy compares each module's source hash, and its dependencies' interfaces), 1.2
# instead of 30 CPU-s beside the tests (measured: a clean clone with the cache of another clone and venv).
mypy_log="$(mktemp)"
MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-$HOME/.cache/mirror-v3/mypy}" mypy . > "$mypy_log" 2>&1 &
mypy_pid=$!
trap 'kill "$mypy_pid" 2>/dev/null || true' EXIT  # a set-up step or ruff that fails leaves no mypy behind
# The JVMs' class archives, made once per JDK and jars, both at once (each records a JVM that mostly keeps one core
# busy; one after the other they took 31 and 12 s of a clean clone's set-up): the Spark driver's (setup.sh's step,
# `prepare-jvm`) and the test brokers' (each of the few dozen brokers the suite starts is then ready in about 3.3 s
# at 2.3 CPU-s instead of 4.7 s at 3.9, measured).
jvm_archive=0
if [[ "${MIRROR_V3_JVM_CACHE:-}" != "off" ]]; then
  python -m supervisor prepare-jvm &
  jvm_pid=$!
  python -m testkit.kafka_broker --prepare-class-archive
  wait "$jvm_pid" || jvm_archive=$?
fi
if [[ $jvm_archive -ne 0 ]]; then exit "$jvm_archive"; fi
# One command per line: `set -e` does not stop at a failure inside an `a && b` list.
echo "== ruff"
ruff check --no-cache .
ruff format --check --no-cache .
echo "== mypy (in the background since the set-up; its output follows the tests')"
# The suite's JVMs (brokers, registries, each command's Spark driver) live seconds to a minute: C1 alone compiles
# what they run, without C2's costly passes; measured on two mirror e2e cases, 15 % less CPU (46 -> 39 s), which a
# CPU-bound run turns into wall time. The product's JVMs keep the default tiers. A caller's own setting is kept.
export JAVA_TOOL_OPTIONS="${JAVA_TOOL_OPTIONS:--XX:TieredStopAtLevel=1}"
echo "== pytest"
# The slowest tests are listed so that a CI run that creeps towards its 15-minute budget shows where.
# Three workers (pytest-xdist, each with its own brokers and moto): the end-to-end tests spend much of
# their wall time waiting on subprocesses, so more workers fill the idle CPU (measured: 18 min of pytest in one
# worker, 12 min in two; on 2026-11-27, clean clones of the same tree: 14:07 in two, 13:20-13:27 in three, each
# test 30-50 % slower but more of them at once). `worksteal` evens out the tests' very different lengths.
tests=0
python -m pytest -n "${MIRROR_V3_TEST_WORKERS:-3}" --dist worksteal --durations=25 "$@" || tests=$?
types=0
wait "$mypy_pid" || types=$?
echo "== mypy"
cat "$mypy_log"
rm -f "$mypy_log"
if [[ $types -ne 0 ]]; then exit "$types"; fi
exit "$tests"
