#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`, nsys 2025.3.1 on PATH): captures the GPU trace
# fixtures of tests/fixtures/traces/gpu-* with the project's own workloads, each beside the CSVs of
# `nsys stats` on the same file (the oracle the analysis must agree with), plus longer captures for
# the step-time and idle checks (analysed with `perfgate analyze`, not committed).
#   OUT=<dir> scripts/gpu/capture-fixtures.sh [case ...]
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT/fixtures" "$OUT/checks"
TRACE=${TRACE:-cuda,nvtx,osrt}
short="--device cuda --size gpu --steps 12 --warmup-steps 4"
declare -A CASES=(
  [gpu-resnet-pageable]="workloads.resnet_cifar $short --ladder-rung 1 --batch-size 64"
  [gpu-resnet-pinned]="workloads.resnet_cifar $short --ladder-rung 3 --batch-size 64"
  [gpu-resnet-databound]="workloads.resnet_cifar $short --ladder-rung 0 --batch-size 64"
  [gpu-resnet-compiled]="workloads.resnet_cifar $short --ladder-rung 7 --batch-size 128"
  [gpu-transformer]="workloads.transformer_lm $short"
  [check-resnet-default]="workloads.resnet_cifar --device cuda --size gpu"
  [check-resnet-workers0]="workloads.resnet_cifar --device cuda --size gpu --workers 0"
)
cases=("$@"); [ ${#cases[@]} -gt 0 ] || cases=(gpu-resnet-pageable gpu-resnet-pinned gpu-resnet-databound gpu-resnet-compiled gpu-transformer check-resnet-default check-resnet-workers0)
for name in "${cases[@]}"; do
  case $name in gpu-*) dir="$OUT/fixtures/$name" ;; *) dir="$OUT/checks/$name" ;; esac
  mkdir -p "$dir"
  cmd="nsys profile --trace=$TRACE --sample=none --cpuctxsw=none --export=sqlite -f true -o $dir/trace python3 -m ${CASES[$name]}"
  echo "$cmd" > "$dir/command.txt"
  start=$SECONDS
  $cmd > "$dir/workload.log" 2>&1 || echo "!! $name: capture failed (exit $?)"
  rm -f "$dir/trace.nsys-rep"
  for r in nvtx_sum nvtx_gpu_proj_sum cuda_gpu_kern_sum; do
    nsys stats -r $r -f csv -o "$dir/stats" "$dir/trace.sqlite" >/dev/null 2>&1 && mv "$dir/stats_$r.csv" "$dir/$r.csv"
  done
  python3 -m perfgate analyze "$dir/trace.sqlite" --format json > "$dir/analyze.json" 2> "$dir/analyze.err" || echo "!! $name: perfgate analyze failed"
  grep -h '^PERFGATE_SELF_REPORT' "$dir/workload.log" | tail -1
  echo "== $name: $((SECONDS - start)) s, $(du -h "$dir/trace.sqlite" | cut -f1)"
done
