"""Interleaved pairs: a base and a head launch at a time, in an order-balanced pattern, tested on
their differences, with looks while the verdict is not clear (docs/statistics.md §6).

A stored baseline was measured at another time, in another state of the machine; a launch of the
base beside each launch of the head shares the state of the moment with it. ``launch_order`` runs
round k as base, head when k is even and head, base when k is odd (B H | H B | B H | ...), so that
a drift within the job hits both sides alike and neither side always runs first. After each round
from ``min_pairs`` on, ``compare_launches(..., paired=True)`` tests every metric on the pairs'
differences (perfgate.gate.statistics.paired_shift_test), each look at Pocock's constant level for
the looks the budget allows (:func:`paired_look_level`), so that with no change the chance that any
look rejects is ``alpha``. Pure: the launcher is a function, ``launch(side, k) -> metrics``; the gate
(perfgate.pipeline.confirmation), ``perfgate ab`` and ``perfgate bisect`` pass theirs.
"""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfgate.errors import ConfigError
from perfgate.gate.sequential_looks import LEVEL_SIMULATIONS, MAX_SIMULATED_LOOKS, look_level
from perfgate.records.model import Verdict

if TYPE_CHECKING:
    from perfgate.gate.compare import ComparePolicy, Outcome

BASE, HEAD = "base", "head"
PairLauncher = Callable[[str, int], Mapping[str, float]]
_LEVEL_SEED = 20261128


def launch_order(first_round: int, rounds: int) -> list[tuple[str, int]]:
    """(side, k) for rounds ``first_round .. first_round + rounds - 1``: even rounds run base then
    head, odd rounds head then base (B H | H B | B H ...)."""
    order: list[tuple[str, int]] = []
    for k in range(first_round, first_round + rounds):
        pair = (BASE, HEAD) if k % 2 == 0 else (HEAD, BASE)
        order.extend((side, k) for side in pair)
    return order


@functools.lru_cache(maxsize=128)
def paired_look_level(alpha: float, looks: tuple[int, ...]) -> float:
    """The one nominal level at which each look (after ``looks[i]`` pairs, in order) tests, so that
    with no change the chance that any of them rejects is ``alpha``: Pocock's constant boundary for
    the looks' one-sample t-statistics of the pairs' differences. Under no change the differences
    are draws centred on zero and the t-statistics do not depend on their scale, so the level is
    the ``alpha`` quantile of the smallest one-sided p-value over the looks of ``LEVEL_SIMULATIONS``
    simulated runs of standard normal differences (fixed seed). One look: ``alpha``; looks at fewer
    than 2 pairs test nothing and do not count; more than ``MAX_SIMULATED_LOOKS``: Bonferroni."""
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha: must be between 0 and 1 (got {alpha!r})")
    tested = tuple(n for n in looks if n >= 2)
    if len(tested) <= 1:
        return alpha
    if len(tested) > MAX_SIMULATED_LOOKS:
        return alpha / len(tested)
    import numpy as np

    from perfgate.gate.statistics import student_t_sf

    rng = np.random.default_rng(_LEVEL_SEED)
    d = rng.standard_normal((LEVEL_SIMULATIONS, max(tested)))
    s, s2 = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    low = np.ones(LEVEL_SIMULATIONS)
    for n in tested:
        mean = s[:, n - 1] / n
        var = np.maximum(s2[:, n - 1] - n * mean * mean, 0.0) / (n - 1)
        t = mean / np.sqrt(var / n)
        low = np.minimum(low, student_t_sf(t, n - 1))
    return float(min(alpha, np.quantile(low, alpha)))


@dataclass(frozen=True)
class PairLook:
    """One comparison of the pairs so far: after ``pairs`` rounds, at ``elapsed_s``."""

    pairs: int
    outcome: Outcome
    elapsed_s: float


@dataclass(frozen=True)
class PairRun:
    """What interleaved pairs decided (:func:`run_pairs`): each side's metrics in pair order, the
    order the launches ran in, the looks, why the rounds stopped, the last look's outcome and the
    level each look tested at."""

    base: list[dict[str, float]]
    head: list[dict[str, float]]
    order: list[tuple[str, int]]
    looks: list[PairLook]
    stopped: str
    level: float

    @property
    def outcome(self) -> Outcome:
        return self.looks[-1].outcome

    @property
    def pairs(self) -> int:
        return len(self.head)


def pair_looks(min_pairs: int, max_pairs: int, every: int = 1) -> tuple[int, ...]:
    """The pair counts at which a run looks: ``min_pairs``, then every ``every`` rounds, and at
    ``max_pairs``; ConfigError for counts that cannot be run."""
    if min_pairs < 1:
        raise ConfigError(f"pairs: the first look needs at least 1 pair (got {min_pairs})")
    if max_pairs < min_pairs:
        raise ConfigError(f"pairs: the most pairs ({max_pairs}) must be at least the first look's ({min_pairs})")
    if every < 1:
        raise ConfigError(f"pairs: rounds between looks must be >= 1 (got {every})")
    return (*range(min_pairs, max_pairs, every), max_pairs)


#: The fewest pairs a paired test is worth its cost at: with 2 pairs it has one degree of freedom
#: (t must pass 31.8 at a level of 0.01, where the unpaired test of the same 4 launches needs 7.0).
PAIRED_FROM = 3


def run_pairs(launch: PairLauncher, policy: ComparePolicy, looks: Sequence[int], *, budget_s: float = 0.0,
              on_look: Callable[[PairLook], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> PairRun:
    """Launch rounds in ``launch_order`` and compare the pairs at each count of ``looks``
    (:func:`pair_looks`), at the level that keeps the whole run's false-alarm chance at
    ``policy.alpha``, until the verdict is clear (perfgate.gate.compare.needs_more_launches is
    False), the last look, or ``budget_s`` seconds (0: no limit; the round in flight finishes).
    Looks that start below ``PAIRED_FROM`` pairs compare the two sides unpaired (the launch-level
    test of perfgate.gate.statistics.shift_test, at Pocock's level for its looks): the order is
    still balanced, the test keeps its degrees of freedom."""
    from perfgate.gate.compare import compare_launches, needs_more_launches

    paired = looks[0] >= PAIRED_FROM
    level = paired_look_level(policy.alpha, tuple(looks)) if paired else look_level(
        policy.alpha, tuple((n, n) for n in looks))
    look_policy = replace(policy, alpha=level)
    sides: dict[str, list[dict[str, float]]] = {BASE: [], HEAD: []}
    order: list[tuple[str, int]] = []
    done: list[PairLook] = []
    started = clock()
    stopped = ""
    for n in looks:
        for side, k in launch_order(len(sides[HEAD]), n - len(sides[HEAD])):
            sides[side].append(dict(launch(side, k)))
            order.append((side, k))
        outcome = compare_launches(sides[BASE], sides[HEAD], look_policy, paired=paired)
        look = PairLook(n, outcome, clock() - started)
        done.append(look)
        if on_look is not None:
            on_look(look)
        if not needs_more_launches(outcome):
            stopped = "decided"
            break
        if n == looks[-1]:
            stopped = f"{n} pairs, the most"
            break
        if budget_s and look.elapsed_s >= budget_s:
            stopped = f"budget_s ({budget_s:g} s) spent"
            break
    return PairRun(sides[BASE], sides[HEAD], order, done, stopped, level)


def interval_ratio(base: Sequence[float], head: Sequence[float], alpha: float) -> float | None:
    """How wide the paired interval of the change is against the unpaired one of the same launches
    (ratio of their half-widths, at the level ``alpha``): below 1 when pairing removed what the
    two launches of a pair shared. None when either test is impossible."""
    from perfgate.gate.statistics import paired_shift_test, shift_test

    positive = min((*base, *head), default=0.0) > 0
    paired = paired_shift_test(base, head, log_scale=positive, alpha=alpha)
    unpaired = shift_test(base, head, log_scale=positive, alpha=alpha)
    if paired is None or unpaired is None:
        return None
    width = (paired.ci_high - paired.ci_low) / (unpaired.ci_high - unpaired.ci_low)
    return width if math.isfinite(width) else None


def credited(outcome: Outcome, stored: Verdict) -> Outcome:
    """The pairs' ``outcome`` as the gate takes it after ``stored``, the stored baseline's verdict
    on the same head: a speed-up is credited (IMPROVED) only where both found one; otherwise the
    pairs' IMPROVED rows read PASS, and the line says why. Three pairs of unchanged code read
    IMPROVED -13.4 % (step_time_mean_ms) of the zoo's vae on an H200, every base launch slower than
    its head, after the stored baseline had found it +10.8 % slower (docs/measurements/confirmation.md);
    on the CPU the first look's 3 pairs read an unchanged rerun as IMPROVED in 1 run of 7. A
    PASS costs a real speed-up nothing but the word; a false IMPROVED is credited in review."""
    from perfgate.gate.compare import outcome_of

    if outcome.verdict != Verdict.IMPROVED or stored == Verdict.IMPROVED:
        return outcome
    why = f"faster in the pairs, not credited: the stored baseline found no speed-up ({stored})"
    rows = [replace(r, verdict=Verdict.PASS, note="; ".join(filter(None, (r.note, why))))
            if r.verdict == Verdict.IMPROVED else r for r in outcome.comparisons]
    judged = outcome_of(rows, outcome.n_baseline, outcome.n_current, strict=outcome.strict, within=outcome.within,
                        paired=outcome.paired)
    return replace(judged, summary=f"{judged.summary}; {why}")


__all__ = ["BASE", "HEAD", "PairLauncher", "launch_order", "paired_look_level", "PairLook", "PairRun",
           "pair_looks", "PAIRED_FROM", "run_pairs", "interval_ratio", "credited"]
