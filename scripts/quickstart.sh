#!/usr/bin/env bash
# Set everything up, start a local Kafka broker with sample data, mirror it to ./mirror-data,
# print `status` and the files, and stop cleanly. MIRROR_V3_QUICKSTART_DIR chooses where
# mirror-data/ and quickstart.yaml go (default: the repository root).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "${MIRROR_V3_QUICKSTART_DIR:-$here}"
# The quickstart is test tooling (testkit/), which the installed package does not carry: run it from this checkout.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "${MIRROR_V3_VENV:-$here/.venv}/bin/python" -m testkit.quickstart
