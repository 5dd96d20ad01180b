#!/usr/bin/env bash
# Seed 003's optimization ladder on a GPU machine: resnet_cifar at rungs 0..7, one process each,
# then (with 2+ GPUs) seed 002's DDP job on two GPUs. Run from anywhere after `source .gpu/env.sh`
# (which puts nsys 2025.3.1 on PATH):
#
#   scripts/gpu-ladder.sh            # ladder without nsys (about 4 minutes on one H100)
#   scripts/gpu-ladder.sh --nsys     # also rungs 0, 4 and 7 under nsys (adds about 1.5 minutes)
#
# Writes under $OUT (default ./ladder-out): ladder.jsonl (one PERFGATE_SELF_REPORT per rung, with
# "ladder_rung"), ladder.txt (samples/s per rung beside the seed's V100 numbers), ddp2.log and
# ddp.jsonl, and nsys/rung<N>.{nsys-rep,sqlite} with --nsys.
# Steps: 40 measured after 8 warm-up (torch.compile compiles in the first warm-up step).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/ladder-out}
STEPS=${STEPS:-40}
WARMUP=${WARMUP:-8}
mkdir -p "$OUT"
rm -f "$OUT/ladder.jsonl" "$OUT/ddp.jsonl"

python -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device visible to torch")'
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true

start=$SECONDS
python -m workloads.ladder --workload resnet_cifar --size gpu --device cuda \
  --steps "$STEPS" --warmup-steps "$WARMUP" --out "$OUT/ladder.jsonl" | tee "$OUT/ladder.log"
python - "$OUT/ladder.jsonl" <<'PY' | tee "$OUT/ladder.txt"
import json, sys
from workloads.ladder import format_table
reports = [json.loads(line) for line in open(sys.argv[1])]
print(format_table(reports))
PY
echo "ladder: $((SECONDS - start)) s"

if [ "${1:-}" = "--nsys" ]; then
  start=$SECONDS
  python -m workloads.ladder --workload resnet_cifar --size gpu --device cuda --rungs 0,4,7 \
    --steps 20 --warmup-steps "$WARMUP" --nsys-dir "$OUT/nsys" --nsys-trace cuda,nvtx,osrt \
    --out "$OUT/ladder-nsys.jsonl" | tail -n 5
  echo "ladder under nsys: $((SECONDS - start)) s"
fi

gpus=$(python -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -ge 2 ]; then
  start=$SECONDS
  torchrun --nproc-per-node=2 --standalone -m workloads.ddp --size gpu --device cuda \
    --steps 30 --warmup-steps 5 2>&1 | tee "$OUT/ddp2.log"
  grep '^PERFGATE_SELF_REPORT ' "$OUT/ddp2.log" | sed 's/^PERFGATE_SELF_REPORT //' > "$OUT/ddp.jsonl"
  echo "ddp on 2 GPUs: $((SECONDS - start)) s"
else
  echo "ddp: skipped, $gpus GPU(s) visible (needs 2)"
fi
