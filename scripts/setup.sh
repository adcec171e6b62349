#!/usr/bin/env bash
# Install everything mirror-v3 needs, skipping what is already there:
#   1. a virtualenv (default ./.venv; MIRROR_V3_VENV overrides) with the pinned Python packages
#      (`supervisor` is also the name of an unrelated PyPI package: never install into a shared env);
#   2. the JVM jars from Maven Central (scripts/fetch-jars.sh).
# Used by .ci/run, the quickstart and the Dockerfile. `--no-dev` skips test and lint tools.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${MIRROR_V3_VENV:-$here/.venv}"
extras="[dev]"
[[ "${1:-}" == "--no-dev" ]] && extras=""

command -v java >/dev/null || { echo "setup: java (17+) is required for Spark and the test broker" >&2; exit 1; }
command -v mvn >/dev/null || { echo "setup: mvn is required to fetch jars from Maven Central" >&2; exit 1; }

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
  "$python" -m pip install -q --upgrade pip
  if [[ -n "$extras" ]]; then
    "$python" -m pip install -q -e "$here$extras"   # development: the checkout is the code
  else
    "$python" -m pip install -q "$here"             # image / production: a regular install
  fi
  echo "$want" > "$stamp"
else
  echo "Python packages present: $venv"
fi

PYTHON="$python" bash "$here/scripts/fetch-jars.sh"
