#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): seed 003's ladder run in reverse. Captures
# resnet_cifar fully optimized (rung 7 knobs at batch 128) and with each optimization removed in
# turn, then asks `perfgate compare` whether each removal fails the gate and what it names first.
# Only the measured steps are traced (--profile-range + nsys --capture-range=cudaProfilerApi), so
# torch.compile's compilation stays out of the traces. Writes under $OUT/reverse-ladder/.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; dir=$OUT/reverse-ladder; mkdir -p "$dir"
full="--device cuda --size gpu --ladder-rung 7 --batch-size 128 --steps 30 --warmup-steps 8 --profile-range"
declare -A REMOVED=(
  [full]="" [no-workers]="--workers 0" [no-pin]="--no-pin-memory" [no-nonblocking]="--no-non-blocking"
  [no-amp]="--no-amp" [no-compile]="--no-compile" [no-overlap]="--no-overlap-copy"
)
for name in full no-workers no-pin no-nonblocking no-amp no-compile no-overlap; do
  start=$SECONDS
  nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --capture-range=cudaProfilerApi \
    --capture-range-end=stop --export=sqlite -f true -o "$dir/$name" \
    python3 -m workloads.resnet_cifar $full ${REMOVED[$name]} > "$dir/$name.log" 2>&1 || echo "!! $name failed"
  rm -f "$dir/$name.nsys-rep"
  echo "== $name: $((SECONDS - start)) s: $(grep -h '^\[resnet_cifar\]' "$dir/$name.log" | tail -1)"
  if [ "$name" != full ]; then
    python3 -m perfgate compare "$dir/full.sqlite" "$dir/$name.sqlite" --warmup-steps 0 --format table \
      > "$dir/compare-$name.txt" 2>&1; echo "   perfgate compare exit $?"
    grep -iE "REGRESSED|PASS|IMPROVED|first reason|cause" "$dir/compare-$name.txt" | head -4
  fi
done
# The fully optimized capture doubles as the compiled-model fixture: its nsys stats oracle.
for r in nvtx_sum nvtx_gpu_proj_sum cuda_gpu_kern_sum; do
  nsys stats -r $r -f csv -o "$dir/stats" "$dir/full.sqlite" >/dev/null 2>&1 && mv "$dir/stats_$r.csv" "$dir/full-$r.csv"
done
