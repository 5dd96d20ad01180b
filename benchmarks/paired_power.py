"""Simulated power and false alarms of the confirmation's paired looks (docs/statistics.md §6): the
real ``paired_looks.run_pairs`` and ``compare_launches``, looks at 3..10 pairs, default tolerances.
The machine's state changes from pair to pair by a log-normal 15 % that both launches of a pair
share; ``noise`` is what is left from one launch to the next.

    python benchmarks/paired_power.py [RUNS]      # 300 runs a cell by default
"""
from __future__ import annotations

import math
import sys

import numpy as np

from perfgate.gate.compare import ComparePolicy
from perfgate.gate.paired_looks import pair_looks, paired_look_level, run_pairs
from perfgate.records.model import Verdict

rng = np.random.default_rng(1)


def cell(noise: float, effect: float, runs: int) -> tuple[int, float]:
    """REGRESSED runs of ``runs``, and the mean pairs taken."""
    regressed, pairs = 0, []
    for _ in range(runs):
        state = [rng.normal(0, 0.15) for _ in range(20)]

        def launch(side: str, k: int) -> dict[str, float]:
            v = 100 * math.exp(state[k] + rng.normal(0, noise)) * ((1 + effect) if side == "head" else 1)
            return {"step_time_ms": v, "step_time_mean_ms": v * math.exp(rng.normal(0, noise / 4))}

        run = run_pairs(launch, ComparePolicy(), pair_looks(3, 10))
        regressed += run.outcome.verdict == Verdict.REGRESSED
        pairs.append(run.pairs)
    return regressed, float(np.mean(pairs))


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"level of each look: {paired_look_level(0.01, pair_looks(3, 10)):.4f}")
    print("| noise within a pair | A/A: REGRESSED | +10 %: REGRESSED | mean pairs (+10 %) |")
    print("|---|---|---|---|")
    for noise in (0.02, 0.04, 0.06):
        aa, _ = cell(noise, 0.0, runs)
        hit, pairs = cell(noise, 0.10, runs)
        print(f"| {noise:.0%} | {aa} / {runs} | {hit} / {runs} | {pairs:.1f} |", flush=True)


if __name__ == "__main__":
    main()
