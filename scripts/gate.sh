#!/usr/bin/env bash
# One command on a fresh machine: set up (nsys, pinned packages, perfgate) and run the gate on the
# default workloads: `pytest --perfgate -m perfgate` (CPU-sized settings where there is no GPU).
# Extra arguments go to pytest, e.g. `scripts/gate.sh --perfgate-update-baselines`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python3 -m pytest --perfgate -m perfgate -p no:cacheprovider "$@"
