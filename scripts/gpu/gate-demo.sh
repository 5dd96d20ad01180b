#!/usr/bin/env bash
# On the GPU machine (after `source .gpu/env.sh`): the gate end to end on the default workloads.
#   scripts/gpu/gate-demo.sh record   bare workload timings, then `pytest --perfgate` twice:
#                                     record baselines, then an unchanged rerun
#   scripts/gpu/gate-demo.sh regress  a real regression (resnet_cifar's GPU preset loses its
#                                     DataLoader workers, as a PR might), gated against those baselines
# Writes logs and reports under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
gate() {  # gate NAME [pytest args...]
  local name=$1; shift
  local start=$SECONDS
  python3 -m pytest --perfgate -m perfgate -p no:cacheprovider -q \
    --perfgate-report-dir "$OUT/$name" --perfgate-artifacts-dir /tmp/perfgate-runs "$@" 2>&1 | tee "$OUT/$name.log"
  echo "[$name] pytest exit ${PIPESTATUS[0]}, $((SECONDS - start)) s"
}
case ${1:-record} in
  record)
    for w in resnet_cifar transformer_lm; do
      start=$SECONDS; python3 -m workloads.$w --size gpu > "$OUT/bare-$w.log" 2>&1
      echo "[bare $w] exit $?, $((SECONDS - start)) s: $(grep -h '^\[' "$OUT/bare-$w.log" | tail -1)"
    done
    gate gate1-record --perfgate-update-baselines
    gate gate2-rerun
    tar czf "$OUT/baselines.tgz" baselines
    ;;
  regress)
    sed -i 's/"workers": 8, "pin_memory": True, "non_blocking": True}/"workers": 0, "pin_memory": True, "non_blocking": True}/' workloads/resnet_cifar.py
    grep -n '"gpu": {"batch_size": 256' workloads/resnet_cifar.py
    gate gate3-regress --perfgate-workload resnet_cifar
    git checkout workloads/resnet_cifar.py 2>/dev/null || true
    ;;
esac
