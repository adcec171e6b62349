#!/usr/bin/env bash
# Install everything mirror-v3 needs, skipping what is already there:
#   1. a virtualenv (default ./.venv; MIRROR_V3_VENV overrides) with the pinned Python packages
#      (`supervisor` is also the name of an unrelated PyPI package: never install into a shared env);
#   2. for development: the Kafka broker's jars from Maven Central (scripts/fetch-jars.sh), for the tests,
#      the benchmarks and the quickstart. The product itself needs no jar beyond pyspark's own.
# Used by .ci/run, the quickstart and the Dockerfile. `--no-dev` skips test and lint tools (and the broker);
# `--quickstart` skips the test suite's npm and apt tools.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MIRROR_V3_VENV:-$here/.venv}"
extras="[dev]"
UV_VERSION="0.13.9"
[[ "${1:-}" == "--no-dev" ]] && extras=""
# --quickstart: what running the quickstart needs (the packages, the local broker's jars, the JVM's class archive),
# without the test suite's own tools (s3rver from npm, promtool from apt).
quickstart=""
[[ "${1:-}" == "--quickstart" ]] && quickstart=1

command -v java >/dev/null || { echo "setup: java (17+) is required for Spark and the test broker" >&2; exit 1; }
if [[ -n "$extras" ]]; then
  command -v mvn >/dev/null || { echo "setup: mvn is required to fetch the test broker from Maven Central" >&2; exit 1; }
fi

if [[ ! -x "$venv/bin/python" ]]; then
  echo "creating virtualenv $venv"
  python3 -m venv "$venv"
fi
python="$venv/bin/python"

# Reinstall only when the pinned requirements changed.
stamp="$venv/.mirror-v3-installed"
want="$(cat "$here/pyproject.toml" | sha256sum | cut -d' ' -f1)$extras"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "installing Python packages into $venv"
  if [[ -n "$extras" ]]; then
    # development: the checkout is the code, installed by uv (a pinned installer from PyPI, into the virtualenv):
    # it links the packages from its cache where pip unpacks each wheel again, 38 s against pip's 54 s on a clean
    # clone (measured; the CI budget counts them). pip does it where uv cannot be had. Compiled at install, not
    # left to run time: with PYTHONDONTWRITEBYTECODE set (the CI machines) nothing compiled later is kept, and every
    # process would compile pyspark's modules again (tried: a clean clone's set-up 10 s shorter, its tests 28 % more
    # CPU).
    # uv reads no PIP_* variable: the machine's wheel directory and CA file are handed over.
    [[ -n "${PIP_FIND_LINKS:-}" && -z "${UV_FIND_LINKS:-}" ]] && export UV_FIND_LINKS="$PIP_FIND_LINKS"
    [[ -n "${PIP_CERT:-}" && -z "${SSL_CERT_FILE:-}" ]] && export SSL_CERT_FILE="$PIP_CERT"
    # From uv's cache alone first, from the index when the cache lacks anything (a new machine, a new pin). Online,
    # every run asked the index again for each page and for pyspark's source archive (pyspark publishes no wheel);
    # the index here answers each such question "modified", so uv downloaded the archive and built pyspark again
    # every time: 36-38 s per clean clone, 11 of them resolving and 26 building (measured, warm cache), against 2 s
    # from the cache. The rebuilt jars also had new modification times, so the Spark JVM's class archive no longer
    # matched and each clean clone recorded a new one (28-31 s); from the cache the jars are the same files, and
    # their archive is mapped whatever the virtualenv's path (checked: classes loaded from it in another venv).
    uv_install() { "$venv/bin/uv" pip install -q --python "$python" --compile-bytecode "$@" -e "$here$extras"; }
    if "$python" -m pip install -q "uv==$UV_VERSION" 2>/dev/null && { uv_install --offline 2>/dev/null || uv_install; }; then
      :
    else
      "$python" -m pip install -q --upgrade pip
      "$python" -m pip install -q -e "$here$extras"
    fi
  else
    "$python" -m pip install -q --upgrade pip
    "$python" -m pip install -q "$here"             # image / production: a regular install
  fi
  echo "$want" > "$stamp"
else
  echo "Python packages present: $venv"
fi

[[ -n "$extras" ]] && PYTHON="$python" bash "$here/scripts/fetch-jars.sh"

# Test-only: s3rver, an S3 server that ignores conditional writes (the second-writer tests use it).
if [[ -n "$extras" && -z "$quickstart" ]]; then
  npm_prefix="${MIRROR_V3_NPM_PREFIX:-$HOME/.cache/mirror-v3/npm}"
  if [[ -f "$npm_prefix/node_modules/s3rver/package.json" ]]; then
    echo "s3rver present: $npm_prefix"
  elif command -v npm >/dev/null; then
    echo "installing s3rver into $npm_prefix"
    npm install --silent --no-audit --no-fund --prefix "$npm_prefix" s3rver@3.7.1 >/dev/null
  else
    echo "npm not found: tests that need s3rver will be skipped" >&2
  fi
fi

# Test-only: promtool (Prometheus' own linter) checks a real /metrics scrape and the alert rules. Only the
# one binary is taken out of Debian's prometheus package; nothing is installed system-wide.
if [[ -n "$extras" && -z "$quickstart" ]]; then
  tools="${MIRROR_V3_TOOLS_DIR:-$HOME/.cache/mirror-v3/bin}"
  if [[ -x "$tools/promtool" ]]; then
    echo "promtool present: $tools"
  elif command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then
    echo "installing promtool into $tools"
    download="$(mktemp -d)"
    if ! (cd "$download" && apt-get download -q prometheus >/dev/null 2>&1); then
      apt-get update -qq >/dev/null
      (cd "$download" && apt-get download -q prometheus >/dev/null 2>&1)
    fi
    mkdir -p "$tools"
    dpkg-deb --fsys-tarfile "$download"/prometheus_*.deb | tar -x -O ./usr/bin/promtool > "$tools/promtool.part"
    chmod +x "$tools/promtool.part" && mv "$tools/promtool.part" "$tools/promtool"
    rm -rf "$download"
  else
    echo "apt-get not found: the tests that run promtool will fail" >&2
  fi
fi

# The checkout's compiled modules: where PYTHONDONTWRITEBYTECODE is set (as on the CI machines), Python never
# writes them, so every CLI start and every Spark Python daemon compiled the product's modules again (about
# 0.1 s of CPU per CLI start, measured). A module edited later is compiled in memory, as without this step.
# A regular install (the image) gets them from pip.
if [[ -n "$extras" ]]; then
  (cd "$here" && "$python" -m compileall -q core config kafka_clients telemetry sinks source supervisor workers commands testkit >/dev/null)
fi

# The Spark JVM's class archive ($MIRROR_V3_JVM_CACHE, default ~/.cache/mirror-v3/jvm): about half the JVM's
# start-up CPU, which every mirror, restore and verify start (and every end-to-end test) pays. Made once per
# JDK and pyspark; the image makes its own (Dockerfile). `present` when already there. scripts/test.sh makes it
# itself (MIRROR_V3_SETUP_LEAVES_JVM=1), at the same time as its other set-up steps.
if [[ -n "$extras" && "${MIRROR_V3_JVM_CACHE:-}" != "off" && -z "${MIRROR_V3_SETUP_LEAVES_JVM:-}" ]]; then
  (cd "$here" && "$python" -m supervisor prepare-jvm)
fi
