#!/usr/bin/env bash
# Several GPU checks at once on a multi-GPU machine, each on its own GPUs: one device call holds them.
#
#   scripts/gpu/lanes.sh DEADLINE_S NAME=GPUS:COMMAND [NAME=GPUS:COMMAND ...]
#   scripts/gpu/lanes.sh 540 wlm=0:"python3 scripts/gpu/zoo-gate.py --out \$OUT/zoo-wlm --work /tmp/zoo-wlm --only word_language_model" \
#                            timm=2,3:"python3 scripts/gpu/zoo-gate.py --out \$OUT/zoo-timm --work /tmp/zoo-timm --only timm_ddp"
#
# Each lane runs its COMMAND under bash with CUDA_VISIBLE_DEVICES=GPUS, in its own session, its output
# in $OUT/NAME.log (OUT: the device tool's output folder, default ./gpu-out). At DEADLINE_S seconds
# every lane still running is sent SIGTERM (perfgate ends its nsys and keeps what it finished; a
# background job of a script ignores SIGINT), then
# SIGKILL 30 s later. Prints each lane's exit status and wall time; exits 0 when every lane did.
# With PACK=FILE, FILE (a .tgz) then holds the small text files under $OUT (.log .json .md .txt .tgz
# under 5 MB each): a device call brings back a few files of limited size, and a lane's folder under
# $OUT can hold more (a 184 MB archive of one lane once brought nothing back).
set -u
deadline=${1:?usage: lanes.sh DEADLINE_S NAME=GPUS:COMMAND ...}
shift
out=${OUT:-gpu-out}
mkdir -p "$out"
declare -A pid started ended
names=()
for lane in "$@"; do
  name=${lane%%=*}; rest=${lane#*=}; gpus=${rest%%:*}; cmd=${rest#*:}
  names+=("$name")
  started[$name]=$(date +%s)
  CUDA_VISIBLE_DEVICES=$gpus setsid bash -c "$cmd" >"$out/$name.log" 2>&1 &
  pid[$name]=$!
  echo "lanes: $name on GPU(s) $gpus: $cmd"
done
end=$(( $(date +%s) + deadline ))
while :; do
  running=0
  for name in "${names[@]}"; do
    if kill -0 "${pid[$name]}" 2>/dev/null; then running=1; elif [ -z "${ended[$name]:-}" ]; then ended[$name]=$(date +%s); fi
  done
  [ $running = 0 ] && break
  if [ "$(date +%s)" -ge $end ]; then
    for name in "${names[@]}"; do
      kill -0 "${pid[$name]}" 2>/dev/null && { echo "lanes: $name past ${deadline} s: SIGTERM"; kill -TERM -- -"${pid[$name]}"; }
    done
    for _ in $(seq 30); do
      sleep 1
      for name in "${names[@]}"; do
        [ -z "${ended[$name]:-}" ] && ! kill -0 "${pid[$name]}" 2>/dev/null && ended[$name]=$(date +%s)
      done
    done
    for name in "${names[@]}"; do kill -KILL -- -"${pid[$name]}" 2>/dev/null; done
    break
  fi
  sleep 2
done
status=0
if [ -n "${PACK:-}" ]; then
  (cd "$out" && find . -type f \( -name '*.log' -o -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.tgz' \) \
     -size -5M ! -path "./$(basename "$PACK")" | tar czf "$PACK" -T -) && echo "lanes: packed $PACK"
fi
for name in "${names[@]}"; do
  wait "${pid[$name]}"; rc=$?
  [ $rc = 0 ] || status=1
  echo "lanes: $name exit $rc after $(( ${ended[$name]:-$(date +%s)} - ${started[$name]} )) s (log: $out/$name.log)"
done
exit $status
