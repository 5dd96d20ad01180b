#!/usr/bin/env bash
# Where a capture's secrets can end up, checked for real (issue 30): `perfgate run` of a workload
# that ignores SIGTERM (and names a range after the token, so that nsys's raw capture surely holds
# it), with GITHUB_TOKEN and HF_TOKEN in perfgate's environment and a fresh TMPDIR, ended by its
# timeout, Ctrl-C (SIGINT), SIGTERM and SIGKILL; then a gate whose --artifacts-dir is a 1 MiB
# tmpfs with 850 KiB used (needs root for the mount; skipped otherwise, and said).
# For each: perfgate's exit status, what is left in TMPDIR, every file under TMPDIR, the artifacts
# and /dev/shm that holds a token, and what the launch folder kept.
#
#   bash scripts/capture-leak-check.sh            # this checkout's perfgate
#   PERFGATE_CODE=/path/to/other/checkout bash scripts/capture-leak-check.sh   # another one (PYTHONPATH)
#   ONLY="SIGINT SIGKILL" ... (scenarios: timeout SIGINT SIGTERM SIGKILL tmpfs); KEEP=1 keeps the work folder
set -uo pipefail
cd "$(dirname "$0")/.."
code=${PERFGATE_CODE:-$PWD}
work=$(mktemp -d /tmp/perfgate-leak-check.XXXXXX)
trap 'umount "$work/tiny" 2>/dev/null; [ "${KEEP:-0}" = 1 ] && echo "kept: $work" || rm -rf "$work"' EXIT
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
mkdir -p "$work/proj/wl"
cat > "$work/proj/wl/stubborn.py" <<'PY'
import os, signal, time
import torch
signal.signal(signal.SIGTERM, signal.SIG_IGN)
name = os.environ["LEAK_SEED"][::-1]
while True:
    torch.cuda.nvtx.range_push("step"); time.sleep(0.02); torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_push(name); torch.cuda.nvtx.range_pop()
PY
cat > "$work/proj/wl/quick.py" <<'PY'
import time, torch
for _ in range(20):
    torch.cuda.nvtx.range_push("step"); time.sleep(0.01); torch.cuda.nvtx.range_pop()
PY
cat > "$work/proj/pyproject.toml" <<'TOML'
[project]
name = "leaks"

[tool.perfgate]
workloads_dir = "wl"
launches = 1
timeout_s = 300

[tool.perfgate.workloads.stubborn]
timeout_s = 25
TOML
token() { python3 -c "import secrets, string; a = string.ascii_letters + string.digits; print('$1' + ''.join(secrets.choice(a) for _ in range($2)))"; }
gh=$(token ghp_ 36); hf=$(token hf_ 34)

report() {   # $1 scenario, $2 exit status, $3 artifacts folder
  local left holders kept
  sleep 3   # a SIGKILLed perfgate: its supervisor removes the private folder after it
  left=$(ls -A "$work/tmp" | tr '\n' ' ')
  holders=$(grep -rl -e "$gh" -e "$hf" "$work/tmp" "$3" /dev/shm 2>/dev/null | tr '\n' ' ')
  kept=$(ls "$3"/*/launch-0/ 2>/dev/null | tr '\n' ' ')
  echo "$1: exit $2; left in TMPDIR: [${left}]; files holding a token: [${holders}]; launch folder: [${kept}]"
  for attempt in "$3"/*/launch-0/workload.attempt-*.log; do   # a capture taken again: why
    [ -f "$attempt" ] && echo "  $(basename "$attempt"): $(tr '\r' '\n' < "$attempt" | grep -v '^\[' | grep -v '^\s*$' | tail -2 | tr '\n' ' ')"
  done
}

gate() {   # $1 scenario, $2 signal or "", $3 workload, then perfgate options
  local scenario=$1 sig=$2 workload=$3; shift 3
  wanted "${scenario%% *}" || return 0
  rm -rf "$work/tmp" "$work/proj/.perfgate"; mkdir -p "$work/tmp"
  local log="$work/$(echo "${scenario%% *}" | tr -c 'A-Za-z0-9\n' _).log"
  (cd "$work/proj" && exec env GITHUB_TOKEN="$gh" HF_TOKEN="$hf" LEAK_SEED="$(echo "$gh" | rev)" TMPDIR="$work/tmp" \
     PYTHONPATH="$code" "${PYTHON:-python3}" -c 'import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); from perfgate.cli import main; sys.exit(main())' \
     run "$workload" "$@" > "$log" 2>&1) &
  local pid=$!
  if [ -n "$sig" ]; then
    for _ in $(seq 1 120); do grep -qs "$gh" "$work"/tmp/perfgate-capture-*/tmp/*.qdstrm && break; sleep 0.5; done
    kill -s "$sig" "$pid"
  fi
  wait "$pid"; local rc=$?
  report "$scenario" "$rc" "${ARTIFACTS:-$work/proj/.perfgate/runs}"
}

gate timeout "" stubborn
gate SIGINT INT stubborn
gate SIGTERM TERM stubborn
gate SIGKILL KILL stubborn
mkdir -p "$work/tiny"
if ! wanted tmpfs; then :
elif mount -t tmpfs -o size=1m tmpfs "$work/tiny" 2>/dev/null; then
  head -c $((850 * 1024)) /dev/urandom > "$work/tiny/filler"
  ARTIFACTS="$work/tiny/a" gate "tmpfs: artifacts on a 1 MiB tmpfs, 850 KiB used" "" quick --artifacts-dir "$work/tiny/a"
  grep -m1 "error:" "$work/tmpfs_.log"
else
  echo "artifacts on a 1 MiB tmpfs: skipped (mount -t tmpfs needs root)"
fi
