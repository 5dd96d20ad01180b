#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): issue 14's side-by-side timing. A fresh capture of
# transformer_lm (the profile launch's trace set), then benchmarks/bench_command.py on it and on the
# committed gpu-transformer capture beside `nsys stats -r nvtx_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum`
# (BEFORE=DIR: that checkout's perfgate timed in the same run; RUNS=N runs each, default 5). Then the same again after
# byte-compiling the image's numpy: the image ships numpy without __pycache__ and sets
# PYTHONDONTWRITEBYTECODE, so every Python process there compiles numpy from source (pip installs
# byte-compile). Prints the tables and the imports' times; logs under $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
python3 tests/fixture_files.py >/dev/null   # the committed exports are stored as .sqlite.xz
nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none --export=sqlite -o /tmp/lm -f true \
    python3 -m workloads.transformer_lm --size gpu > "$OUT/capture.log" 2>&1
bench() {
  python3 benchmarks/bench_command.py --exports /tmp/lm.sqlite tests/fixtures/traces/gpu-transformer/trace.sqlite \
    --sizes --nsys "$(command -v nsys)" --reports nvtx_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum --runs "${RUNS:-5}" \
    ${BEFORE:+--before "$BEFORE"}
}
imports() {
  for m in numpy pandas; do
    for _ in 1 2 3; do /usr/bin/time -f "import $m: %e s" python3 -c "import $m"; done
  done 2>&1
  # where the command's own time goes: its slowest imports, and its functions (cProfile, cumulative)
  python3 -X importtime -m perfgate analyze /tmp/lm.sqlite --format json 2>&1 >/dev/null | sort -t'|' -k2 -n | tail -6
  python3 - <<'PY' 2>&1 | cut -c1-160
import cProfile, pstats, time
from pathlib import Path
from perfgate.analysis import AnalysisOptions
from perfgate.pipeline.inputs import analyze_file
for _ in range(2):
    t = time.perf_counter(); analyze_file(Path("/tmp/lm.sqlite"), AnalysisOptions())
    print(f"analyze_file in process: {time.perf_counter() - t:.3f} s")
profile = cProfile.Profile(); profile.enable(); analyze_file(Path("/tmp/lm.sqlite"), AnalysisOptions()); profile.disable()
pstats.Stats(profile).sort_stats("tottime").print_stats(12)
PY
}
numpy_dir=$(python3 -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')
echo "## as the image is (numpy/__pycache__ present: $([ -d "$numpy_dir/__pycache__" ] && echo yes || echo no))"
bench; imports
python3 -m compileall -q -j0 "$numpy_dir" > /dev/null || true
echo "## numpy byte-compiled"
bench; imports
