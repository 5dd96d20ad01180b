#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): the adaptive gate (issue 13) as a user runs it.
#   scripts/gpu/adaptive-gate.sh gate WORKLOAD [SLOW_PCT]   # bare run, record, unchanged rerun, and
#                                                           # with SLOW_PCT a slowdown of that % of the
#                                                           # bare step injected in forward
#   scripts/gpu/adaptive-gate.sh gate WORKLOAD args ARGS... # the same, the slowdown given as workload
#                                                           # arguments (e.g. --slow-data-ms 50)
#   scripts/gpu/adaptive-gate.sh calibrate WORKLOAD POOL [WORKLOAD ARGS]   # perfgate calibrate, +3 %
#   WORK=DIR scripts/gpu/adaptive-gate.sh rerun WORKLOAD     # one more unchanged run against WORK's baseline
# NO_RERUN=1 leaves out the unchanged rerun, NO_BARE=1 the bare run (to fit one 10-minute device call).
# Wall times are the whole pytest command. Writes logs and reports under $OUT and prints the lines.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
mode=$1; name=$2; shift 2
work=${WORK:-$(mktemp -d /tmp/adaptive.XXXX)}   # WORK=DIR keeps the baselines for another call
own_ms() { python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("PERFGATE_SELF_REPORT "): r=json.loads(l.split(" ",1)[1])
print("%.3f" % r["step_ms_median"])' "$1"; }
gate() {  # gate TAG [pytest args...]
  local tag=$1; shift
  local start; start=$(date +%s.%N)
  python3 -m pytest --perfgate -m perfgate -p no:cacheprovider -q --perfgate-workload "$name" \
    --perfgate-baseline-dir "$work/baselines" --perfgate-report-dir "$OUT/$name-$tag" \
    --perfgate-artifacts-dir /tmp/perfgate-runs "$@" > "$OUT/$name-$tag.log" 2>&1
  local rc=$?
  echo "[$name $tag] pytest exit $rc, wall $(python3 -c "import time;print('%.1f' % (time.time()-$start))") s"
  grep -E "^perfgate: |^$name|REGRESSED|INCONCLUSIVE|first reason" "$OUT/$name-$tag.log" | cut -c1-400 | head -40
}
if [ "$mode" = gate ]; then
  if [ "${NO_BARE:-0}" != 1 ]; then
    start=$(date +%s.%N)
    python3 -m "workloads.$name" > "$OUT/$name-bare.log" 2>&1
    echo "[$name bare] exit $?, wall $(python3 -c "import time;print('%.1f' % (time.time()-$start))") s, own median $(own_ms "$OUT/$name-bare.log") ms"
  fi
  gate record --perfgate-update-baselines
  [ "${NO_RERUN:-0}" = 1 ] || gate rerun
  if [ $# -gt 0 ]; then
    if [ "$1" = args ]; then
      shift; slow_args=("$@"); tag=slow
      echo "[$name slow] workload arguments: ${slow_args[*]}"
    else
      ms=$(python3 -c "print('%.3f' % ($1 / 100 * $(own_ms "$OUT/$name-bare.log")))")
      slow_args=(--slow-phase forward --slow-ms "$ms"); tag="slow$1"
      echo "[$name slow] +$1 % of the bare step: --slow-ms $ms in forward"
    fi
    cp pyproject.toml "$work/pyproject.orig"
    python3 - "$name" "${slow_args[@]}" <<'PY'
import json, sys
name, args = sys.argv[1], sys.argv[2:]
src = open("pyproject.toml").read()
head = f"[tool.perfgate.workloads.{name}]\n"
assert head in src, f"pyproject.toml has no {head.strip()} table"
src = src.replace(head, head + f"args = {json.dumps(args)}\n")
open("pyproject.toml", "w").write(src)
PY
    gate "$tag"
    cp "$work/pyproject.orig" pyproject.toml
  fi
elif [ "$mode" = rerun ]; then
  gate "rerun-$(date +%H%M%S)"
elif [ "$mode" = calibrate ]; then
  pool=$1; shift
  start=$(date +%s.%N)
  python3 -m perfgate calibrate "$name" --pool "$pool" --inject 3 --phase forward --k 1,3 --inject-on gpu \
    --workload-args "$*" --out "$OUT/calibrate-$name" > "$OUT/calibrate-$name.log" 2>&1
  echo "[calibrate $name] exit $?, wall $(python3 -c "import time;print('%.1f' % (time.time()-$start))") s"
  cat "$OUT/calibrate-$name/calibration.md" 2>/dev/null || tail -20 "$OUT/calibrate-$name.log"
fi
