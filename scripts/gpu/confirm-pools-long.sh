#!/usr/bin/env bash
# Issue 41's data-bound CNN at +10 % on a shared GPU host, with launches long enough to measure
# its step: four lanes at once on a host of 2 H200s (two lanes a GPU), each
# scripts/gpu/confirm-pools.py on the zoo's timm_ddp with 16384 training images and one epoch (256
# steps a launch where --epochs 2 of 1024 images gave 32: launch_steadiness showed the step's CV
# falling from 20 % at 24 steps to about 6 % near 200), the pull request busy-waiting SPIN_US per
# sample in the loader's worker.
#
#   device run, kind nvidia-h200-x2, carry [".gpu"]:  bash scripts/gpu/confirm-pools-long.sh [DEADLINE_S] [SPIN_US]
#
# Results: $OUT/pools-{a,b,c,d}.json (benchmarks/confirm_pools.py reads them), the lanes' logs in
# $OUT/lanes.log, and with CLOCKS=1 $OUT/clocks.jsonl.gz: every CPU's clock and the CPU each of the
# programs' processes ran on, twice a second (scripts/gpu/worker_clock_sampler.py).
set -u
deadline=${1:-555}
spin=${2:-62}
source .gpu/env.sh
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
lane() { echo "python3 scripts/gpu/confirm-pools.py --program timm_ddp --epochs 1 --train-images 16384 --spin-us $spin --record 1 --seconds $(( deadline - 25 )) --out /tmp/pools-$1 --work /tmp/cp-$1"; }
nvidia-smi --query-gpu=index,name,clocks.sm,temperature.gpu --format=csv,noheader
lscpu | grep -E "^(Model name|Socket|Core|Thread|CPU max MHz|CPU min MHz|NUMA node)"
cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo "no cpufreq in this machine's /sys"
out=${OUT:-gpu-out}
sampler=
if [ "${CLOCKS:-0}" = 1 ]; then
  python3 scripts/gpu/worker_clock_sampler.py --out /tmp/clocks.jsonl & sampler=$!
fi
OUT=/tmp/lanes-out bash scripts/gpu/lanes.sh "$deadline" a=0:"$(lane a)" b=0:"$(lane b)" c=1:"$(lane c)" d=1:"$(lane d)"
status=$?
[ -n "$sampler" ] && kill $sampler && gzip -c /tmp/clocks.jsonl > "$out/clocks.jsonl.gz"
for l in a b c d; do
  cp /tmp/pools-$l/pools.json "$out/pools-$l.json" 2>/dev/null
  { echo "== lane $l"; cat /tmp/lanes-out/$l.log; } >> "$out/lanes.log"
  echo "== lane $l"; grep -E "^(recorded|base|head|base2)-|waits" /tmp/lanes-out/$l.log | tr '\n' ';'; echo
done
exit $status
