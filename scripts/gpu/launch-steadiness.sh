#!/usr/bin/env bash
# Issue 41, item 6 on a shared GPU host: does pinning a gated launch to CPUs of its own steady it?
# Two lanes at once, each on its own GPU of one host (as two CI jobs of a multi-GPU runner), each
# benchmarks/launch_steadiness.py with the variants interleaved round by round: `plain` (the launch
# may run on any CPU) and `pinned` (the launched tree pinned to one half of the host's CPUs, lane a
# to the first half, lane b to the second). Each lane is the other's neighbour.
#
#   device run, kind nvidia-h200-x2, carry [".gpu"]:  bash scripts/gpu/launch-steadiness.sh [DEADLINE_S]
#
# Both lanes: the zoo's timm_ddp (a ResNet-18 fed by one worker that decodes and augments images:
# data-bound), --epochs 2; lane b starts its rounds with the other variant. (The first call, lane b
# word_language_model and the halves CPUs 0-15 / 16-31, is in docs/measurements/confirmation.md.)
# Results: $OUT/steadiness-{a,b}.{json,md}.
set -u
deadline=${1:-530}
source .gpu/env.sh
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
export PYTHONUNBUFFERED=1
# The halves are of the physical cores, each with its hyperthread siblings (CPU n and n + 16 are one
# core's two threads on a 32-CPU host): two lanes pinned to sibling threads would share each core.
read -r half_a half_b < <(python3 -c '
import collections, glob
cores = collections.defaultdict(list)
for f in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/core_cpus_list") or glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list"):
    cpu = int(f.split("/")[5][3:]); cores[open(f).read().strip()].append(cpu)
groups = sorted(sorted(v) for v in cores.values()); k = len(groups) // 2
print(*(",".join(str(c) for g in part for c in g) for part in (groups[:k], groups[k:])))')
echo "pinned sets: a=$half_a b=$half_b"; lscpu | grep -E "^(Thread|Core|Socket|Model name)" 
bash scripts/gpu/lanes.sh "$deadline" \
  a=0:"python3 benchmarks/launch_steadiness.py --programs zoo:timm_ddp --args '--epochs 2' --variants plain,pinned --cpus $half_a --launches 12 --hogs 0 --out /tmp/steady-a" \
  b=1:"python3 benchmarks/launch_steadiness.py --programs zoo:timm_ddp --args '--epochs 2' --variants pinned,plain --cpus $half_b --launches 12 --hogs 0 --out /tmp/steady-b"
status=$?
for lane in a b; do
  cp /tmp/steady-$lane/steadiness.json "${OUT:-gpu-out}/steadiness-$lane.json" 2>/dev/null
  cp /tmp/steady-$lane/steadiness.md "${OUT:-gpu-out}/steadiness-$lane.md" 2>/dev/null
  echo "== lane $lane"; cat /tmp/steady-$lane/steadiness.md 2>/dev/null; tail -3 "${OUT:-gpu-out}/$lane.log"
done
exit $status
