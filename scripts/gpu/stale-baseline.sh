#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`, in a git checkout of this repository with the
# history since the committed baselines were recorded): a gate against a baseline recorded from
# other code names that first (issue 29).
#   1. perfgate baseline check: the committed baselines against the code here;
#   2. perfgate run transformer_lm against the committed H100 baseline (recorded 2026-11-24 from a
#      tree with uncommitted changes, before later edits of the workloads);
#   3. a baseline recorded here, with its provenance (command, source fingerprint, record version,
#      software), then the held-out edit of the issue (dropout 0.1 in every block of transformer_lm)
#      gated against it.
#   scripts/gpu/stale-baseline.sh            (about 4 minutes; BUDGET_S skips step 3 when short)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-400}; start=$SECONDS
git log -1 --format='checkout %h %cd' 2>/dev/null || echo "checkout: not a git checkout"
echo "== 1. perfgate baseline check"
perfgate baseline check; echo "exit $?"
echo "== 2. perfgate run transformer_lm against the committed baseline"
perfgate run transformer_lm --max-launches 3 --report-dir "$OUT/committed" --artifacts-dir /tmp/pg-runs 2>&1 \
  | grep -v '^perfgate: transformer_lm: launch'; echo "exit $?"
if [ $((SECONDS - start)) -gt $((BUDGET_S - 150)) ]; then echo "step 3 skipped: $((SECONDS - start)) s used"; exit 0; fi
echo "== 3. a baseline recorded here, then the held-out edit gated against it"
fresh=/tmp/pg-fresh-baselines
perfgate baseline update transformer_lm --launches 2 --baseline-dir "$fresh" --report-dir "$OUT/record" \
  --artifacts-dir /tmp/pg-runs 2>&1 | tail -3
python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["provenance"]; print({k: p[k] for k in ("workload_command", "record_version")}, sorted(p["sources"]))' \
  "$fresh"/transformer_lm/*.json
perfgate baseline check --baseline-dir "$fresh"; echo "exit $?"
sed -i 's/dim_feedforward=4 \* d_model, dropout=0.0,/dim_feedforward=4 * d_model, dropout=0.1,/' workloads/transformer_lm.py
git diff --stat -- workloads/transformer_lm.py 2>/dev/null
perfgate baseline check --baseline-dir "$fresh"; echo "exit $?"
perfgate run transformer_lm --max-launches 3 --baseline-dir "$fresh" --report-dir "$OUT/edited" \
  --artifacts-dir /tmp/pg-runs 2>&1 | grep -v '^perfgate: transformer_lm: launch'; echo "exit $?"
git checkout -- workloads/transformer_lm.py 2>/dev/null || sed -i 's/dropout=0.1,/dropout=0.0,/' workloads/transformer_lm.py
echo "done in $((SECONDS - start)) s"
