#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): the gate on loops written the way users write
# them (issue: step time is the iteration). For each loop style: the bare loop's own iteration time,
# then `pytest --perfgate` with the default launches to record a baseline, an unchanged rerun, and
# a change that slows the input pipeline (a PR-style edit of the workload's GPU preset):
#   plain_loop, hf_trainer, lightning_loop: a slower dataset (--slow-data-ms per batch, sized from the
#       bare iteration time I and the worker count W as 1.5 * I * W, so loading alone needs ~1.5 I)
#   seed003_loop: the seed's optimization 1 undone, DataLoader workers 8 -> 0
# Also captures seed 003's loop as the seed writes it, with and without workers, and the Lightning
# loop without NVTX (it runs ahead of the GPU), as fixtures.
#   scripts/gpu/user-loops.sh STYLE...     (default: all four)
# Writes $OUT/user-loops-<styles>.tgz (logs, reports, fixtures) and prints the table rows.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
work=$(mktemp -d /tmp/user-loops.XXXX)
export PYTHONUNBUFFERED=1
SIZE=${SIZE:-gpu}            # SIZE=cpu checks the script itself on a machine without a GPU
styles=("$@"); [ ${#styles[@]} -gt 0 ] || styles=(plain_loop seed003_loop hf_trainer lightning_loop)

own_ms() {  # own_ms LOG: the loop's own median iteration (ms) from its PERFGATE_SELF_REPORT line
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    if l.startswith("PERFGATE_SELF_REPORT "): r=json.loads(l.split(" ",1)[1])
print("%.3f" % r["step_ms_median"])' "$1"
}
gate() {  # gate STYLE TAG [pytest args...]
  local style=$1 tag=$2; shift 2
  local start=$SECONDS
  python3 -m pytest --perfgate -m perfgate -p no:cacheprovider -q --perfgate-workload "$style" \
    --perfgate-baseline-dir "$work/baselines" --perfgate-report-dir "$work/$style-$tag" \
    --perfgate-artifacts-dir /tmp/perfgate-runs --perfgate-size "$SIZE" "$@" > "$work/$style-$tag.log" 2>&1
  echo "[$style $tag] pytest exit $?, $((SECONDS - start)) s: $(tail -1 "$work/$style-$tag.log")"
}
preset() {  # preset STYLE PYTHON-EXPR: edit the workload's GPU preset dict (a PR's change)
  python3 - "$1" "$2" "$SIZE" <<'PY'
import re, sys
path = f"workloads/{sys.argv[1]}.py"
src = open(path).read()
m = re.search(r'"%s": \{' % sys.argv[3], src)
new = src[:m.end()] + sys.argv[2] + ", " + src[m.end():]
open(path, "w").write(new)
PY
}
for style in "${styles[@]}"; do
  cp "workloads/$style.py" "$work/$style.py.orig"
  workers=$(python3 -c "import workloads.$style as w; print(w.PRESETS['$SIZE'].get('workers', 0))")
  if [ "$style" = seed003_loop ]; then
    # fixtures: the seed's loop as written, without and with DataLoader workers (20 measured steps)
    for w in 0 8; do
      d="$work/fixtures/gpu-seed003-loop-workers$w"; mkdir -p "$d"
      nsys profile --trace=$([ "$SIZE" = gpu ] && echo cuda,nvtx || echo nvtx) --sample=none --cpuctxsw=none --export=sqlite -f true -o "$d/trace" \
        python3 -m workloads.seed003_loop --size "$SIZE" --steps 20 --workers $w > "$d/workload.log" 2>&1
      rm -f "$d/trace.nsys-rep"
      for r in nvtx_sum nvtx_gpu_proj_sum cuda_gpu_kern_sum; do
        nsys stats -r $r -f csv -o "$d/stats" "$d/trace.sqlite" >/dev/null 2>&1 && mv "$d/stats_$r.csv" "$d/$r.csv"
      done
      echo "[fixture seed003 workers $w] own $(own_ms "$d/workload.log") ms; perfgate: $(python3 -m perfgate analyze "$d/trace.sqlite" --warmup-steps 3 | sed -n 3p)"
    done
    preset "$style" '"workers": 8'; workers=8
  fi
  if [ "$style" = lightning_loop ]; then
    # fixture: Lightning without NVTX (autostep), a loop that never waits for the GPU and runs ahead
    # of it while the launch queue fills (40 steps)
    d="$work/fixtures/gpu-lightning-loop"; mkdir -p "$d"
    PERFGATE_AUTOSTEP=1 PYTHONPATH="$(python3 -c 'import perfgate.capture.autostep.install as a; print(a.site_dir())')${PYTHONPATH:+:$PYTHONPATH}" \
      nsys profile --trace=$([ "$SIZE" = gpu ] && echo cuda,nvtx || echo nvtx) --sample=none --cpuctxsw=none --export=sqlite -f true -o "$d/trace" \
      python3 -m workloads.lightning_loop --size "$SIZE" --steps 40 > "$d/workload.log" 2>&1
    rm -f "$d/trace.nsys-rep"
    for r in nvtx_sum nvtx_gpu_proj_sum cuda_gpu_kern_sum; do
      nsys stats -r $r -f csv -o "$d/stats" "$d/trace.sqlite" >/dev/null 2>&1 && mv "$d/stats_$r.csv" "$d/$r.csv"
    done
    echo "[fixture lightning] own $(own_ms "$d/workload.log") ms; perfgate: $(python3 -m perfgate analyze "$d/trace.sqlite" --warmup-steps 3 | sed -n 3p)"
  fi
  python3 -m "workloads.$style" --size "$SIZE" > "$work/$style-bare.log" 2>&1
  base_ms=$(own_ms "$work/$style-bare.log")
  echo "[$style bare] exit $?, own iteration median $base_ms ms (workers $workers)"
  gate "$style" record --perfgate-update-baselines
  gate "$style" rerun
  if [ "$style" = seed003_loop ]; then
    cp "$work/$style.py.orig" "workloads/$style.py"; change="workers 8 -> 0"
  else
    slow=$(python3 -c "print(round(1.5 * $base_ms * max($workers, 1), 1))")
    preset "$style" "\"slow_data_ms\": $slow"; change="slower dataset, +$slow ms per batch ($workers workers)"
  fi
  gate "$style" changed
  cp "$work/$style.py.orig" "workloads/$style.py"
  python3 scripts/gpu/user_loops_table.py "$work" "$style" "$change" | tee -a "$work/table.md"
  tar czf "$OUT/user-loops-$style.tgz" -C "$work" --exclude='./fixtures' --exclude='*.orig' \
    $(cd "$work" && ls -d "$style"-* table.md baselines 2>/dev/null)
done
[ -d "$work/fixtures" ] && tar czf "$OUT/user-loops-fixtures.tgz" -C "$work" fixtures
