#!/usr/bin/env bash
# On a machine with 2+ GPUs (after `source .gpu/env.sh`): the ddp workload under torchrun (NCCL), the
# way perfgate's timing launches capture it (--trace=nvtx: NCCL's own NVTX ranges, domain "NCCL", with
# no CUDA trace), for three sides of a communication change: the baseline accumulating 4 micro-batches
# per step inside no_sync(), the same with no_sync() dropped, and the baseline with 1 MB DDP buckets.
# Each export is kept beside `nsys stats -r nvtx_sum` of the same file (the oracle of the call counts),
# with perfgate's analysis of it.
#   OUT=<dir> bash scripts/gpu/collectives.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
NPROC=${NPROC:-2}
common="--size gpu --device cuda --steps 16 --warmup-steps 4"
declare -A CASES=(
  [ddp-nosync-base]="$common --no-sync-steps 4"
  [ddp-nosync-dropped]="$common --accumulate 4"
  [ddp-small-buckets]="$common --no-sync-steps 4 --bucket-cap-mb 1"
)
for name in ddp-nosync-base ddp-nosync-dropped ddp-small-buckets; do
  dir="$OUT/$name"; mkdir -p "$dir"
  cmd="nsys profile --trace=${TRACE:-nvtx} --sample=none --cpuctxsw=none --export=sqlite -f true -o $dir/trace torchrun --nproc-per-node=$NPROC --standalone -m workloads.ddp ${CASES[$name]}"
  echo "$cmd" > "$dir/command.txt"
  start=$SECONDS
  $cmd > "$dir/workload.log" 2>&1 || echo "!! $name: capture failed (exit $?)"
  rm -f "$dir/trace.nsys-rep"
  nsys stats -r nvtx_sum -f csv -o "$dir/stats" "$dir/trace.sqlite" >/dev/null 2>&1 && mv "$dir/stats_nvtx_sum.csv" "$dir/nvtx_sum.csv"
  python3 -m perfgate analyze "$dir/trace.sqlite" --skip-steps 3 --format json > "$dir/analyze.json" 2> "$dir/analyze.err" || echo "!! $name: perfgate analyze failed"
  python3 - "$dir/trace.sqlite" <<'EOF'
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
q = """SELECT coalesce(s.value, e.text), count(*), sum(length(e.binaryData) > 0), sum(e.jsonText IS NOT NULL OR e.jsonTextId IS NOT NULL)
       FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE e.domainId != 0 AND e.eventType = 59 GROUP BY 1"""
for row in con.execute(q):
    print("  NCCL range", row)
tables = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE '%PAYLOAD%'")]
print("  payload tables:", {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables})
EOF
  echo "== $name: $((SECONDS - start)) s, $(du -h "$dir/trace.sqlite" | cut -f1)"
done
