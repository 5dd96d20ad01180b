#!/usr/bin/env bash
# Sets up perfgate on a fresh machine: a real Nsight Systems CLI, the pinned Python packages, and
# perfgate itself (editable). Idempotent. Used by scripts/gate.sh, .ci/run and the README.
#   PERFGATE_SKIP_TORCH=1  do not install torch/torchvision (e.g. they are already there, GPU build)
set -euo pipefail
cd "$(dirname "$0")/.."

find_nsys() {
  command -v nsys 2>/dev/null && return 0
  for p in /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /opt/nvidia/nsight-systems-cli/*/bin/nsys; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

if ! find_nsys >/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "setup: no nsys found on this GPU machine. Install Nsight Systems 2023.1+ (CUDA toolkit or" >&2
    echo "       NVIDIA's nsight-systems-cli package) or point PERFGATE_NSYS at an nsys binary." >&2
    exit 2
  elif [ -r /etc/debian_version ]; then
    bash scripts/install-nsys.sh
  else
    echo "setup: no nsys found; install Nsight Systems (see README 'Getting nsys')" >&2
    exit 2
  fi
fi

python3 -m pip --version >/dev/null
req=requirements/ci.txt
if [ "${PERFGATE_SKIP_TORCH:-0}" = 1 ]; then
  req=$(mktemp); grep -vE '^(torch|torchvision)==' requirements/ci.txt > "$req"
fi
# PyPI's torch build (CUDA) runs on CPU-only machines too, and matches PyPI's torchvision; a local
# CPU-only wheel folder (PIP_FIND_LINKS) would pair a torch that torchvision cannot load.
PIP_FIND_LINKS= PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --disable-pip-version-check -r "$req"
python3 -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "setup: done ($(nsys --version 2>/dev/null || echo "nsys at $(find_nsys)"))"
