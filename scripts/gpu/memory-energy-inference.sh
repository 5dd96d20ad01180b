#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): issue 18's "done when", each step a `perfgate run`
# of this repository's workloads (nsys with --cuda-memory-usage=true, NVML energy) and each change a
# PR-style edit of a workload's GPU preset, undone at the end:
#   memory     transformer_lm: record a baseline, then keep the last step's logits alive
#              ("retain_outputs": 1): REGRESSED on peak memory while step time passes
#   energy     transformer_lm: energy per sample of the baseline's launches (launch-to-launch
#              spread), then extra GPU work ("extra_matmuls": 64, EXTRA_MATMULS): REGRESSED on energy per
#              sample
#   inference  resnet_infer (eager) and resnet_infer[compiled] (torch.compile, reduce-overhead: CUDA
#              graphs): baselines recorded (the eager vs compiled table), then the compiled variant
#              with its compile call lost ("lost_compile": True): REGRESSED, kernels per batch named
#
#   scripts/gpu/memory-energy-inference.sh [--cpu] [all|memory|energy|inference]...
#     --cpu   the same steps with the CPU presets on a machine without a GPU (checks the script: no
#             GPU memory, energy or kernels there, so the changes PASS)
#   BASE_LAUNCHES (default 3) launches of each baseline, CHANGE_LAUNCHES (default 2) of each change.
# Writes $OUT/memory-energy-inference/: results.json and results.md (the tables, also printed),
# reports.tgz (each run's perfgate-report.json, summary.md, charts and log). Estimated 6-7 minutes
# on an H100 for `all` (15 launches under nsys; the first compiled launch compiles ResNet-50);
# `memory energy` and `inference` can run as two calls.
export PERFGATE_PROFILE=${PERFGATE_PROFILE:-always}   # kernels and traced memory need the CUDA profile launch
set -uo pipefail
cd "$(dirname "$0")/../.."
SIZE=gpu
parts=()
for arg in "$@"; do
  case $arg in
    --cpu) SIZE=cpu ;;
    all|memory|energy|inference) parts+=("$arg") ;;
    *) echo "usage: $0 [--cpu] [all|memory|energy|inference]..." >&2; exit 2 ;;
  esac
done
[ ${#parts[@]} -gt 0 ] || parts=(all)
want() { for p in "${parts[@]}"; do [ "$p" = all ] || [ "$p" = "$1" ] && return 0; done; return 1; }
OUT=${OUT:-$PWD/gpu-out}; dest="$OUT/memory-energy-inference"; mkdir -p "$dest"
BASE_LAUNCHES=${BASE_LAUNCHES:-3}; CHANGE_LAUNCHES=${CHANGE_LAUNCHES:-2}
EXTRA_MATMULS=${EXTRA_MATMULS:-$([ "$SIZE" = gpu ] && echo 64 || echo 2)}   # a 2048^2 fp32 matmul: ~0.3 ms on an H100
work=$(mktemp -d /tmp/memory-energy.XXXX)
export PYTHONUNBUFFERED=1
for f in transformer_lm resnet_infer; do cp "workloads/$f.py" "$work/$f.py.orig"; done
restore() { for f in transformer_lm resnet_infer; do cp "$work/$f.py.orig" "workloads/$f.py"; done; }
trap restore EXIT

run() {  # run TAG LAUNCHES WORKLOAD [perfgate run args...]: one perfgate run, its exit code kept
  local tag=$1 launches=$2 workload=$3; shift 3
  local start=$SECONDS
  python3 -m perfgate run "$workload" --launches "$launches" --size "$SIZE" --baseline-dir "$work/baselines" \
    --report-dir "$work/$tag" --artifacts-dir "$work/runs" "$@" > "$work/$tag.log" 2>&1
  local code=$?
  echo "$code" > "$work/$tag.exit"
  echo "[$tag] perfgate run $workload: exit $code, $((SECONDS - start)) s: $(grep -m1 -E '^(perfgate: [0-9]+ workload|REGRESSED|NEW|PASS)' "$work/$tag.log")"
}
preset() {  # preset WORKLOAD 'KEY: VALUE': add an entry to the workload's preset of this size (a PR's edit)
  python3 - "$1" "$2" "$SIZE" <<'PY'
import re, sys
path = f"workloads/{sys.argv[1]}.py"
src = open(path).read()
m = re.search(r'"%s": \{' % sys.argv[3], src)
open(path, "w").write(src[:m.end()] + sys.argv[2] + ", " + src[m.end():])
PY
  echo "[edit] workloads/$1.py preset $SIZE: $2"
}

if want memory || want energy; then
  run lm-base "$BASE_LAUNCHES" transformer_lm --update-baseline
fi
if want memory; then
  preset transformer_lm '"retain_outputs": 1'
  run lm-retain "$CHANGE_LAUNCHES" transformer_lm
  restore
fi
if want energy; then
  preset transformer_lm "\"extra_matmuls\": $EXTRA_MATMULS"
  run lm-extra-work "$CHANGE_LAUNCHES" transformer_lm
  restore
fi
if want inference; then
  run infer-base "$BASE_LAUNCHES" resnet_infer --update-baseline      # resnet_infer and resnet_infer[compiled]
  preset resnet_infer '"lost_compile": True'
  run infer-lost "$CHANGE_LAUNCHES" "resnet_infer[compiled]"
  restore
fi

python3 scripts/gpu/resources_table.py "$work" "$dest"
table=$?
tar czf "$dest/reports.tgz" -C "$work" --exclude=runs --exclude=baselines . 2>/dev/null
echo "results: $dest/results.md, $dest/results.json; reports: $dest/reports.tgz"
exit $table
