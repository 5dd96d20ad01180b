"""How often the stored-baseline gate and the confirmation catch a slowdown, and raise false alarms,
on launches measured on a shared GPU host (scripts/gpu/confirm-pools.py writes the pools): the real
``sequential_looks.run_looks`` and ``paired_looks.run_pairs`` over runs resampled from the pools.

    python benchmarks/confirm_pools.py POOLS.json [--trials 2000] [--max-launches 10]

Before (the stored baseline alone): the recorded launches are the baseline; a run takes current
launches one at a time (the head pool's for the pull request, the second base pool's for the A/A
run) and looks after each, up to ``--max-launches``. After (with the confirmation): a run whose
stored verdict is REGRESSED or INCONCLUSIVE then takes interleaved pairs, whole rounds (base and
head, or base and base2, of one round), looks at 3 to ``--max-launches`` pairs, and the pairs decide;
a stored PASS of pools whose recorded launches are too noisy for the tolerance
(``NoiseReport.too_noisy``, as the gate computes it) takes the pairs too, and they can only fail it.
Each resampled run takes the rounds in a random order without replacement (a round drawn twice
would be a pair counted twice: a t-test on duplicated pairs is too sure of itself, and made 4-13 %
of A/A runs REGRESSED on pools where the runs as measured were not), at most as many pairs as the
pools have rounds; ``as measured`` is the one run that takes the rounds in the order they ran. The
runs of one pool share its rounds: the rates describe these pools, not the host.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import numpy as np

from perfgate.gate.compare import ComparePolicy
from perfgate.gate.paired_looks import BASE, pair_looks, run_pairs
from perfgate.gate.sequential_looks import LaunchBudget, run_looks
from perfgate.pipeline.confirmation import FIRST_LOOK_PAIRS
from perfgate.records.model import Verdict

CONFIRMED = (Verdict.REGRESSED, Verdict.INCONCLUSIVE)


#: Which stored PASSes of a too-noisy baseline the pairs check: every one (the gate's), or only those
#: whose stored change of step_time_ms is above zero, or above half the tolerance (variants, not taken)
CHECKED_PASSES = {"noisy": -math.inf, "positive": 0.0, "half-tolerance": 0.015}


def trial(pools: dict, arm: str, rng: np.random.Generator | None, most: int,
          always: bool = False, first: int = FIRST_LOOK_PAIRS, least: int = 1,
          check_above: float = -math.inf) -> tuple[Verdict, int, Verdict, int]:
    """(stored verdict, its launches, final verdict, all launches) of one run of ``arm`` over the
    pools' rounds in a random order (``rng``), or in the order they ran (``rng`` None); ``always``:
    the pairs decide whatever the stored verdict (``confirm = "always"``); ``least``: launches before
    the stored baseline's first look (``min_launches``); ``check_above``: a too-noisy baseline's
    stored PASS is checked by the pairs when its change of step_time_ms is above this."""
    policy = ComparePolicy()
    current = pools[arm]
    n = min(len(pools["base"]), len(current))
    rounds = [int(i) for i in rng.permutation(n)] if rng is not None else list(range(n))
    most = min(most, n)
    run = run_looks(pools["recorded"], lambda k: current[rounds[k]], policy, LaunchBudget(min(least, most), most))
    launches = len(run.current)
    change = next((c.change for c in run.outcome.comparisons if c.metric == "step_time_ms"), None)
    vouch = (not always and run.outcome.verdict == Verdict.PASS and run.noise is not None and run.noise.too_noisy
             and change is not None and change > check_above)
    if run.outcome.verdict not in CONFIRMED and not always and not vouch:
        return run.outcome.verdict, launches, run.outcome.verdict, launches
    pairs = run_pairs(lambda side, k: (pools["base"] if side == BASE else current)[rounds[k]], policy,
                      pair_looks(min(first, most), most))
    final = pairs.outcome.verdict if not vouch or pairs.outcome.verdict == Verdict.REGRESSED else run.outcome.verdict
    return run.outcome.verdict, launches, final, launches + 2 * pairs.pairs


def joined(lanes: list[dict]) -> dict:
    """The lanes' pools as one: their rounds one after another (a round's base, head and base2 stay
    together, so every pair is still two launches of one lane at one time), their recorded launches
    and walls together."""
    for lane in lanes:
        if not len(lane["base"]) == len(lane["head"]) == len(lane["base2"]):
            raise SystemExit(f"a pool of {lane.get('program', 'a program')} has unfinished rounds: "
                             f"{len(lane['base'])}, {len(lane['head'])}, {len(lane['base2'])} launches")
    pools = {k: [m for lane in lanes for m in lane[k]] for k in ("recorded", "base", "head", "base2", "wall_s")}
    for lane in lanes:
        pairs = [math.log(h["step_time_ms"] / b["step_time_ms"]) for b, h in zip(lane["base"], lane["head"])]
        aa = [math.log(h["step_time_ms"] / b["step_time_ms"]) for b, h in zip(lane["base"], lane["base2"])]
        if len(pairs) > 1:
            print(f"{lane.get('program', 'the program')}: {len(pairs)} rounds, log(head/base) mean {statistics.fmean(pairs):+.3f} "
                  f"sd {statistics.stdev(pairs):.3f}; log(base2/base) mean {statistics.fmean(aa):+.3f} "
                  f"sd {statistics.stdev(aa):.3f}")
    return pools


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("pools", type=Path, nargs="+",
                   help="one pool, or the lanes of one host and call joined as one (each round stays a pair)")
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--max-launches", type=int, default=10)
    p.add_argument("--seed", type=int, default=41)
    p.add_argument("--first-look", type=int, default=FIRST_LOOK_PAIRS,
                   help=f"pairs at the confirmation's first look (the gate's: {FIRST_LOOK_PAIRS})")
    p.add_argument("--min-launches", type=int, default=1,
                   help="launches before the stored baseline's first look (the gate's min_launches, default 1)")
    p.add_argument("--check-pass", choices=CHECKED_PASSES, default="noisy",
                   help="which stored PASSes of a too-noisy baseline the pairs check: every one (noisy, the gate's "
                        "auto), or only those whose stored change is above 0 (positive) or 1.5 %% (half-tolerance)")
    args = p.parse_args()
    pools = joined([json.loads(path.read_text()) for path in args.pools])
    rng = np.random.default_rng(args.seed)
    wall = statistics.fmean(pools["wall_s"]) if pools.get("wall_s") else None
    step = {k: statistics.fmean(m["step_time_ms"] for m in pools[k]) for k in ("recorded", "base", "head", "base2")}
    print(f"pools: {', '.join(f'{k} {len(pools[k])} launches, mean step {v:.3f} ms' for k, v in step.items())}; "
          f"head/base {step['head'] / step['base'] - 1:+.1%}" + (f"; {wall:.1f} s a launch" if wall else ""))
    print("| run | gate | REGRESSED | INCONCLUSIVE | launches (mean) | wall (mean) |")
    print("|---|---|---|---|---|---|")
    notes: list[str] = []
    for arm, name in (("base2", "A/A (unchanged code)"), ("head", "the pull request")):
        above = CHECKED_PASSES[args.check_pass]
        results = [trial(pools, arm, rng, args.max_launches, first=args.first_look, least=args.min_launches,
                         check_above=above) for _ in range(args.trials)]
        always = [trial(pools, arm, rng, args.max_launches, always=True, first=args.first_look,
                        least=args.min_launches)
                  for _ in range(args.trials)]
        measured = trial(pools, arm, None, args.max_launches, first=args.first_look, least=args.min_launches,
                         check_above=above)
        for label, verdicts, counts in (("stored baseline alone", [r[0] for r in results], [r[1] for r in results]),
                                        ("with the confirmation", [r[2] for r in results], [r[3] for r in results]),
                                        ('confirm = "always"', [r[2] for r in always], [r[3] for r in always])):
            n = len(verdicts)
            reg = sum(v == Verdict.REGRESSED for v in verdicts)
            inc = sum(v == Verdict.INCONCLUSIVE for v in verdicts)
            mean = statistics.fmean(counts)
            wall_text = f"{mean * wall:.0f} s" if wall else "-"
            print(f"| {name} | {label} | {reg} / {n} | {inc} / {n} | {mean:.1f} | {wall_text} |")
        notes.append(f"{name}, the rounds as they ran: stored baseline alone {measured[0]} after {measured[1]} "
                     f"launches; with the confirmation {measured[2]}, {measured[3]} launches in all")

    print("\n".join(["", *notes]))


if __name__ == "__main__":
    main()
