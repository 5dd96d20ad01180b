#!/usr/bin/env bash
# Issue 41 on the GPU machine: unchanged reruns of a host-bound and a GPU-bound public program with
# one busy loop per core beside them (started after each baseline was recorded on the quiet host):
# the stored baseline's verdict, the confirmation's, and what the report says of the machine.
#
#   device run, carry [".gpu"]:  bash scripts/gpu/confirm-load.sh [DEADLINE_S]
#
# word_language_model (an LSTM, launch-bound on an H200) and nanoGPT at GPT-2 small's size from its
# own flags (12 layers of 768, fp16, no compile: GPU-bound), each through
# benchmarks/confirm_under_load.py; results in $OUT/load/confirm-under-load.{json,md}.
set -u
deadline=${1:-540}
source .gpu/env.sh
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null
out=${OUT:-gpu-out}/load
mkdir -p "$out"
export PYTHONUNBUFFERED=1
timeout --signal=TERM "$deadline" python3 benchmarks/confirm_under_load.py \
  --programs zoo:word_language_model,zoo:nanogpt --reruns 2 --max-launches 3 --record-launches 3 \
  --hogs "$(nproc)" --out "$out" --work /tmp/confirm-load \
  --args "zoo:nanogpt=--n_layer=12 --n_head=12 --n_embd=768 --block_size=512 --batch_size=16 --compile=False --max_iters=120 --eval_interval=1000 --eval_iters=2"
status=$?
cat "$out/confirm-under-load.md" 2>/dev/null
tar czf "${OUT:-gpu-out}/load-logs.tgz" -C "$out" --exclude=projects . 2>/dev/null
exit $status
