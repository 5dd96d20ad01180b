#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): capture the diagnosis corpus's mechanism edits
# (issue 29: attention path, TF32, bf16 -> fp32, compile, CUDA graphs, fused optimizer, cuDNN
# benchmark, a hand-written layer norm) with their own copy of the unedited script (base2), in one
# session, through scripts/gpu/diagnosis-corpus.sh. Prints the software it ran on first.
#   scripts/gpu/mechanism-corpus.sh [SIDE...]  (about 6 minutes; BUDGET_S stops starting new sides)
# The edits not captured yet: scripts/gpu/mechanism-corpus.sh base3 mlp_fp32
set -uo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
nsys --version
command -v git >/dev/null && git --version || echo "git: not installed"
[ $# -gt 0 ] || set -- base2 attention_math custom_layernorm fused_adam_off tf32_off-base tf32_off compile_removed-base \
  compile_removed cuda_graphs_lost-base cuda_graphs_lost cudnn_benchmark_off-base cudnn_benchmark_off attention_weights
BUDGET_S=${BUDGET_S:-420} exec bash scripts/gpu/diagnosis-corpus.sh "$@"
