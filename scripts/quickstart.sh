#!/usr/bin/env bash
# Set up what running needs, start a local Kafka broker with sample data, mirror it live to ./mirror-data
# (status --watch, /metrics, /readyz), stop it cleanly, print the files and read the archive back as a table.
# MIRROR_V3_QUICKSTART_DIR chooses where mirror-data/ and quickstart.yaml go (default: the repository root);
# MIRROR_V3_METRICS_PORT the metrics port (default 7780 when free, else any free one; 0: off).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh" --quickstart
cd "${MIRROR_V3_QUICKSTART_DIR:-$here}"
# The quickstart is test tooling (testkit/), which the installed package does not carry: run it from this checkout.
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
exec "${MIRROR_V3_VENV:-$here/.venv}/bin/python" -m testkit.quickstart
