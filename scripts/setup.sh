#!/usr/bin/env bash
# Sets up perfgate for development and CI: a real Nsight Systems CLI, and the pinned Python packages
# of requirements/ci.txt plus perfgate itself (editable) in a virtual environment, never in the
# system interpreter. Idempotent. Used by scripts/gate.sh, .ci/run and the README.
#
#   The environment: the active one ($VIRTUAL_ENV) when there is one; otherwise $PERFGATE_VENV
#   (default .venv in this repository), created with --system-site-packages so that what the
#   machine already has (torch above all) is reused, not downloaded again.
#   pip runs with your configuration (pip.conf, PIP_INDEX_URL, PIP_FIND_LINKS, constraints, ...).
#   PERFGATE_SKIP_TORCH=1  do not install torch/torchvision (e.g. the runner has its own CUDA build)
set -euo pipefail
cd "$(dirname "$0")/.."

find_nsys() {
  command -v nsys 2>/dev/null && return 0
  for p in /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys /opt/nvidia/nsight-systems-cli/*/bin/nsys; do
    [ -x "$p" ] && { echo "$p"; return 0; }
  done
  return 1
}

if [ -n "${PERFGATE_NSYS:-}" ]; then
  [ -x "$PERFGATE_NSYS" ] || { echo "setup: PERFGATE_NSYS=$PERFGATE_NSYS is not an executable file" >&2; exit 2; }
elif ! find_nsys >/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    echo "setup: no nsys found on this GPU machine. Install Nsight Systems 2023.1+ (CUDA toolkit or" >&2
    echo "       NVIDIA's nsight-systems-cli package) or point PERFGATE_NSYS at an nsys binary." >&2
    exit 2
  else
    bash scripts/install-nsys.sh    # picks the source for this distribution, or says what to install
  fi
fi

if [ -n "${VIRTUAL_ENV:-}" ]; then
  venv=$VIRTUAL_ENV
else
  venv=${PERFGATE_VENV:-.venv}
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv --system-site-packages "$venv" || {
      echo "setup: could not create the virtual environment $venv with python3 -m venv" >&2
      echo "       (Debian/Ubuntu: apt-get install python3-venv), or activate one and run setup again" >&2
      exit 2
    }
  fi
fi
python="$venv/bin/python"
[ -x "$python" ] || { echo "setup: $python is not an executable (VIRTUAL_ENV=$venv?)" >&2; exit 2; }

req=requirements/ci.txt
if [ "${PERFGATE_SKIP_TORCH:-0}" = 1 ]; then
  req=$(mktemp); grep -vE '^(torch|torchvision)=' requirements/ci.txt > "$req"
fi
"$python" -m pip install -q -r "$req"
"$python" -m pip install -q --no-deps --no-build-isolation -e .
echo "setup: done: $venv ($("$python" --version 2>&1), perfgate $("$python" -c 'import perfgate; print(perfgate.__version__)')), $(nsys --version 2>/dev/null || echo "nsys at ${PERFGATE_NSYS:-$(find_nsys)}")"
if [ -z "${VIRTUAL_ENV:-}" ]; then
  echo "setup: use it with: . $venv/bin/activate"
fi
