#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): capture the diagnosis corpus (tests/corpus/): the
# training script before and after each pull-request edit, under nsys as the gate captures it
# (--trace=cuda,nvtx, autostep on), with nsys's own stats of each capture beside it, then compare
# each case's base with its head and print the verdict and first reason.
#   scripts/gpu/diagnosis-corpus.sh [SIDE...]     (default: every side of tests/corpus/cases.py)
# Writes $OUT/corpus-<first side>.tar.xz.partNN (cat them) holding corpus/<side>/{trace.sqlite,*.csv,workload.log}.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
work=$(mktemp -d /tmp/corpus.XXXX)
STEPS=${STEPS:-20}; BUDGET_S=${BUDGET_S:-540}
python3 tests/corpus/cases.py "$work/scripts" > "$work/all-sides.txt"
sides=("$@"); [ ${#sides[@]} -gt 0 ] || mapfile -t sides < "$work/all-sides.txt"
site=$(python3 -c 'import perfgate.capture.autostep.install as a; print(a.site_dir())')
start=$SECONDS
# a throwaway run first: the first CUDA process on a fresh machine is slower (module loading, clocks)
python3 "$work/scripts/base.py" --steps 8 > "$work/warm-up.log" 2>&1
for side in "${sides[@]}"; do
  if [ $((SECONDS - start)) -gt "$BUDGET_S" ]; then echo "[$side] skipped: over ${BUDGET_S} s"; continue; fi
  d="$work/corpus/$side"; mkdir -p "$d"; t0=$SECONDS
  PERFGATE_AUTOSTEP=1 PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 \
    nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --export=sqlite -f true -o "$d/trace" \
    python3 "$work/scripts/$side.py" --steps "$STEPS" > "$d/workload.log" 2>&1
  rc=$?
  rm -f "$d/trace.nsys-rep"
  for r in nvtx_sum nvtx_gpu_proj_sum cuda_gpu_kern_sum; do
    nsys stats -r $r -f csv -o "$d/stats" "$d/trace.sqlite" >/dev/null 2>&1 && mv "$d/stats_$r.csv" "$d/$r.csv"
  done
  echo "[$side] exit $rc, $((SECONDS - t0)) s: $(grep -a 'steps in' "$d/workload.log" | tail -1)"
done
python3 - "$work/corpus" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests/corpus")
from cases import CASES, PENDING
from perfgate.analysis import AnalysisOptions
from perfgate.pipeline.inputs import compare_and_explain
root = Path(sys.argv[1])
for case in (*CASES, *PENDING):
    b, h = root / case.base_side / "trace.sqlite", root / case.head_side / "trace.sqlite"
    if not (b.exists() and h.exists()):
        continue
    try:
        outcome, attribution = compare_and_explain(b, h, options=AnalysisOptions(skip_steps=5))
        first = attribution.first_reason if attribution is not None else "-"
        row = outcome.row("step_time_mean_ms")
        print(f"{case.name}: {outcome.verdict.value} (mean {row.change:+.1%}) | {first}")
    except Exception as exc:   # one case's failure must not hide the others
        print(f"{case.name}: ERROR {type(exc).__name__}: {exc}")
PY
tar cJf "$work/corpus.tar.xz" -C "$work" corpus
ls -l "$work/corpus.tar.xz"; du -sh "$work"/corpus/* | sort -h | tail -3
split -b 15m -d "$work/corpus.tar.xz" "$OUT/corpus-${sides[0]}.tar.xz.part"
