#!/usr/bin/env bash
# Set everything up, start a local Kafka broker with sample data, mirror it to ./mirror-data,
# print `status` and the files, and stop cleanly.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$here/scripts/setup.sh"
cd "$here"
exec "${MIRROR_V3_VENV:-$here/.venv}/bin/python" -m testkit.quickstart
