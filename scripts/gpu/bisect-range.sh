#!/usr/bin/env bash
# perfgate bisect on the GPU machine, over a range of this repository's own commits where a workload
# knob changes (docs/bisect.md, "On the GPU machine").
#
# Here (a git checkout; makes the range and packs it, since the device gets a working tree, no .git):
#   scripts/gpu/bisect-range.sh make
#     branch demo/gpu-bisect: 10 commits on HEAD, each a small edit of workloads/, pyproject or their
#     help texts; the 5th sets resnet_cifar's GPU preset to 2 DataLoader workers (it was 8).
#     .gpu/bisect-range.tar: the .git of a clone of that branch 11 commits deep (about 23 MiB).
# On the GPU machine (device run, carry [".gpu"]; one device call of 10 minutes holds about 3
# candidates at 2 launches a side; the log makes a second call go on where the first stopped):
#   source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \
#     scripts/gpu/bisect-range.sh run $OUT [LOG]     # LOG: a bisect.jsonl from an earlier call
#     writes $OUT/bisect.md, $OUT/bisect.jsonl and $OUT/bisect.log; exit as perfgate bisect's.
set -eu
branch=demo/gpu-bisect
case "${1:-}" in
make)
  git rev-parse --verify -q "$branch" >/dev/null && { echo "bisect-range: $branch exists; delete it first" >&2; exit 2; }
  work=$(mktemp -d)
  git worktree add -q -b "$branch" "$work/tree" HEAD
  cd "$work/tree"
  c() { git -c user.name="perfgate dev" -c user.email=dev@perfgate.invalid commit -q -am "$1"; }
  sed -i 's/^Real PyTorch training loops, instrumented with NVTX,/Real PyTorch training loops, each instrumented with NVTX,/' workloads/README.md
  c "workloads/README: each loop is instrumented"
  sed -i 's/^The data are 32x32 random uint8 images with labels 0..9/The data are 32x32 random uint8 images (CIFAR-10 sized) with labels 0..9/' workloads/resnet_cifar.py
  c "resnet_cifar: say the images are CIFAR-10 sized"
  sed -i 's/help="Resize target (seed: 224)")/help="Resize target in pixels (seed: 224)")/' workloads/resnet_cifar.py
  c "resnet_cifar: --image-size help names its unit"
  sed -i 's/# --size auto: the workload picks its cpu or gpu preset by device$/# --size auto: the workload picks its cpu or gpu preset by the device it finds/' pyproject.toml
  c "pyproject: the preset follows the device found"
  sed -i 's/"workers": 8, "pin_memory": True/"workers": 2, "pin_memory": True/' workloads/resnet_cifar.py
  c "resnet_cifar: 2 DataLoader workers in the GPU preset (less host memory on shared runners)"
  sed -i 's/help="DataLoader num_workers")/help="DataLoader num_workers (0: batches made in the training process)")/' workloads/_common.py
  c "workloads: --workers help says what 0 means"
  sed -i 's/^They are plain scripts: they run with or without perfgate/They are plain scripts: each runs with or without perfgate/' workloads/README.md
  c "workloads/README: each script runs alone"
  sed -i 's/^    add("--seed", type=int)$/    add("--seed", type=int, help="seed of the synthetic data and the model")/' workloads/_common.py
  c "workloads: --seed has a help text"
  sed -i 's/help="measured steps")/help="measured steps (after --warmup-steps)")/' workloads/_common.py
  c "workloads: --steps help says they follow the warm-up"
  sed -i 's/add("--batch-size", type=_positive_int, help="per process")/add("--batch-size", type=_positive_int, help="samples per batch, per process")/' workloads/_common.py
  c "workloads: --batch-size help names samples"
  [ "$(git rev-list --count HEAD~10..HEAD)" = 10 ] || { echo "bisect-range: an edit did not apply" >&2; exit 1; }
  cd - >/dev/null
  git worktree remove "$work/tree"
  git clone -q --depth 11 --branch "$branch" "file://$(git rev-parse --show-toplevel)" "$work/clone"
  mkdir -p .gpu && tar -cf .gpu/bisect-range.tar -C "$work/clone" .git && rm -rf "$work"
  git log --oneline "$branch~10..$branch"
  echo "bisect-range: GOOD $(git rev-parse --short=12 "$branch~10") BAD $(git rev-parse --short=12 "$branch"); .gpu/bisect-range.tar"
  ;;
run)
  out=${2:?usage: bisect-range.sh run OUT [LOG]}
  mkdir -p "$out" /tmp/bisect-range
  tar -xf .gpu/bisect-range.tar -C /tmp/bisect-range
  git -C /tmp/bisect-range checkout -q -f "$branch"
  [ -n "${3:-}" ] && cp "$3" "$out/bisect.jsonl"
  cd /tmp/bisect-range
  # -P: perfgate from the installed checkout, not the range's copy in the working folder
  python3 -P -m perfgate bisect "$branch~10" "$branch" resnet_cifar --launches 2 \
    --report "$out/bisect.md" --log "$out/bisect.jsonl" 2>&1 | tee "$out/bisect.log"
  exit "${PIPESTATUS[0]}"
  ;;
*) echo "usage: bisect-range.sh make | run OUT [LOG]" >&2; exit 2 ;;
esac
