#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): first show that the committed baselines are
# stale (scripts/gpu/stale-baseline.sh, its steps 1-2), then re-record them from the code as it is
# and copy them to $OUT/baselines (commit them from there). Name nvidia-h100-x1 for the device run:
# the committed baselines are the H100's.
#   scripts/gpu/rerecord-baselines.sh       (about 7 minutes)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
start=$SECONDS
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
BUDGET_S=0 timeout 300 bash scripts/gpu/stale-baseline.sh > "$OUT/stale.log" 2>&1; echo "stale-baseline.sh exit $? in $((SECONDS - start)) s"
timeout 270 perfgate baseline update resnet_cifar transformer_lm --report-dir "$OUT/rerecord" \
  --artifacts-dir /tmp/pg-runs > "$OUT/rerecord.log" 2>&1; echo "baseline update exit $? in $((SECONDS - start)) s"
perfgate baseline check > "$OUT/check-after.log" 2>&1; echo "baseline check exit $?"
cp -r baselines "$OUT/baselines"
tail -n 25 "$OUT/stale.log" "$OUT/rerecord.log" "$OUT/check-after.log"
