"""Adaptive launches: decide with as few launches as the noise allows (docs/statistics.md §3).

The gate starts ``min_launches`` launches, compares them with the baseline, and adds one launch at
a time while the verdict is not clear (a gating metric INCONCLUSIVE: beyond tolerance, not yet
significant), until ``max_launches`` or ``budget_s``. Each look tests at one level, Pocock's constant
boundary for the looks the budget allows (:func:`look_level`): with no change, the chance that any
look of the whole procedure rejects is ``alpha``. Stopping early (``budget_s``, a decided verdict)
only takes fewer looks, so it keeps the rate below ``alpha``.

The noise of a workload is the launch-to-launch spread of its step time (the standard deviation of
the log of each launch's value, about its coefficient of variation); with the baseline's launch count
and the budget it gives the smallest slowdown the gate catches 9 times in 10
(:func:`detectable_change`). Pure functions and one loop over a launch callable (:func:`run_looks`),
shared by the gate (perfgate.pipeline.workload_run) and its calibration (perfgate.commands.calibrate).
"""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from perfgate.errors import ConfigError
from perfgate.records.model import Tolerance, Verdict
from perfgate.records.noise import NOISE_METRIC, NoiseReport
from perfgate.records.notes import TO_DECIDE, WARNING, WHY, Note

if TYPE_CHECKING:
    from perfgate.gate.compare import ComparePolicy, Outcome

#: The chance of catching a slowdown that :func:`detectable_change` reports.
POWER = 0.9


@dataclass(frozen=True)
class LaunchBudget:
    """How many launches a gate run may take. ``min_launches`` before the first look,
    ``max_launches`` at most, and no new launch once ``budget_s`` seconds have passed (0: no limit)."""

    min_launches: int = 1
    max_launches: int = 10
    budget_s: float = 0.0

    def __post_init__(self) -> None:
        if self.min_launches < 1:
            raise ConfigError(f"min_launches: must be at least 1 (got {self.min_launches})")
        if self.max_launches < self.min_launches:
            raise ConfigError(f"max_launches: must be at least min_launches ({self.min_launches}); "
                              f"got {self.max_launches}")
        if not (self.budget_s >= 0 and math.isfinite(self.budget_s)):
            raise ConfigError(f"budget_s: must be a finite number of seconds >= 0 (got {self.budget_s!r})")

    @property
    def looks(self) -> int:
        """The most comparisons a run can make: one per launch from ``min_launches`` on."""
        return self.max_launches - self.min_launches + 1

    def look_alpha(self, alpha: float, n_baseline: int) -> float:
        """The level of each look against ``n_baseline`` baseline launches (:func:`look_level`)."""
        return look_level(alpha, tuple((n_baseline, k) for k in range(self.min_launches, self.max_launches + 1)))


#: Simulated null runs behind :func:`look_level` (its level is within about 3 % of exact, relative).
LEVEL_SIMULATIONS = 100_000
#: More looks than this are split by Bonferroni instead (valid for an exact test, a little stricter).
MAX_SIMULATED_LOOKS = 40
_LEVEL_SEED = 20261124
_LEVEL_VALUES = 2_000_000          # simulated launch values held at once (16 MB)


@functools.lru_cache(maxsize=128)
def look_level(alpha: float, looks: tuple[tuple[int, int], ...]) -> float:
    """The one nominal level at which each of ``looks`` (baseline, current launch counts, in the
    order they are taken) tests, so that with no change the chance that any of them rejects is
    ``alpha``: Pocock's constant boundary for the looks' Student t-statistics (perfgate.gate.statistics.shift_test).

    With no change every launch is a draw from one distribution, and the t-statistics of the looks
    do not depend on its scale, so their joint law is that of standard normal draws: the level is
    the ``alpha`` quantile of the smallest p-value over the looks of ``LEVEL_SIMULATIONS`` simulated
    runs (fixed seed: the same level every time). The looks share their launches, so this is less
    strict than splitting ``alpha`` over them (Bonferroni: 0.002 for 5 looks against 5 baseline
    launches, where this gives 0.003). One look (a fixed design): ``alpha`` itself; more than
    ``MAX_SIMULATED_LOOKS``: ``alpha / looks`` (Bonferroni, a bound for any exact test). Looks where
    no test is possible (1 vs 1) do not count."""
    tested = tuple((nb, nc) for nb, nc in looks if nb >= 1 and nc >= 1 and nb + nc >= 3)
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha: must be between 0 and 1 (got {alpha!r})")
    if len(tested) <= 1:
        return alpha
    if len(tested) > MAX_SIMULATED_LOOKS:
        return alpha / len(tested)
    import numpy as np

    from perfgate.gate.statistics import student_t_sf

    rng = np.random.default_rng(_LEVEL_SEED)
    nb_max, nc_max = max(nb for nb, _ in tested), max(nc for _, nc in tested)
    chunk = max(1_000, _LEVEL_VALUES // (nb_max + nc_max))
    smallest = []
    for start in range(0, LEVEL_SIMULATIONS, chunk):
        sims = min(chunk, LEVEL_SIMULATIONS - start)
        base, cur = rng.standard_normal((sims, nb_max)), rng.standard_normal((sims, nc_max))
        sb, sb2 = np.cumsum(base, axis=1), np.cumsum(base * base, axis=1)
        sc, sc2 = np.cumsum(cur, axis=1), np.cumsum(cur * cur, axis=1)
        low = np.ones(sims)
        for nb, nc in tested:
            mb, mc = sb[:, nb - 1] / nb, sc[:, nc - 1] / nc
            squares = (sb2[:, nb - 1] - nb * mb * mb) + (sc2[:, nc - 1] - nc * mc * mc)
            df = nb + nc - 2
            t = (mc - mb) / np.sqrt(np.maximum(squares, 0.0) / df * (1.0 / nb + 1.0 / nc))
            low = np.minimum(low, student_t_sf(t, df))
        smallest.append(low)
    return float(min(alpha, np.quantile(np.concatenate(smallest), alpha)))


def launch_noise(launches: Sequence[Mapping[str, float]], metric: str = NOISE_METRIC) -> float | None:
    """The launch-to-launch spread of ``metric``: the sample standard deviation of its log values
    (≈ its coefficient of variation). None with fewer than 2 positive values."""
    values = [float(m[metric]) for m in launches if metric in m and float(m[metric]) > 0
              and math.isfinite(float(m[metric]))]
    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    return math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))


def _df(n_baseline: int, n_current: int) -> float:
    """Degrees of freedom of the launch-level test (perfgate.gate.statistics.shift_test)."""
    return float(n_baseline + n_current - 2)


def detectable_change(noise: float, n_baseline: int, n_current: int, alpha: float,
                      tolerance: Tolerance | None = None, power: float = POWER) -> float | None:
    """The smallest relative slowdown that ends REGRESSED with probability ``power`` when compared at
    ``n_current`` launches against ``n_baseline`` at level ``alpha``: it must be significant,
    ``(t_alpha + t_power) · SE``, and beyond the tolerance by ``t_power · SE``. None when no test is
    possible (fewer than 2 launches on both sides, or no noise estimate)."""
    from perfgate.gate.statistics import student_t_ppf

    if noise is None or n_baseline < 1 or n_current < 1 or (n_baseline < 2 and n_current < 2):
        return None
    df = _df(n_baseline, n_current)
    if df < 1:
        return None
    se = noise * math.sqrt(1.0 / n_baseline + 1.0 / n_current)
    t_alpha, t_power = student_t_ppf(1 - alpha, df), student_t_ppf(power, df)
    significant = (t_alpha + t_power) * se
    rel = tolerance.rel if tolerance is not None and tolerance.rel is not None else 0.0
    beyond = math.log1p(rel) + t_power * se if math.isfinite(rel) else math.inf
    return math.expm1(max(significant, beyond))


def noise_warning(report: NoiseReport, workload: str, policy: ComparePolicy) -> str | None:
    """What to say when ``workload`` is too noisy for its step-time tolerance (``report.too_noisy``)."""
    if not report.too_noisy:
        return None
    from perfgate.gate.wording import fmt_tolerance

    return (f"{workload} is too noisy for its step-time tolerance of "
            f"{fmt_tolerance(policy.tolerance_for(NOISE_METRIC), 'ms')}: {report.describe()}. Raise max_launches, "
            "widen the tolerance, or make the workload steadier (more measured steps, fixed clocks, no other load)")


def undecided(report: NoiseReport, workload: str, launches: int, stopped: str | None, alpha: float) -> tuple[Note, Note]:
    """Why a run that ended INCONCLUSIVE after ``launches`` could not decide (``stopped``: why it
    stopped; ``alpha``: the whole run's false-alarm budget), and what to do about it: a WHY and a
    TO_DECIDE note."""
    s = "es" if launches != 1 else ""
    why = (f"the change is beyond tolerance but not significant after {launches} launch{s} "
           f"({stopped or 'budget spent'}; each look needs p < {report.alpha_per_look:.2g}, α {alpha:g} spread over "
           f"the budget's looks); {report.describe()}.")
    todo = (f"raise max_launches (now {report.max_launches}) or budget_s, rerun on a quieter machine, "
            "compare in the same job with `perfgate ab` (drift since the baseline was recorded cannot show "
            f"there), or build the baseline from several runs (`perfgate history {workload} --refresh-baseline`, "
            "with history_dir set) so that its noise holds the drift between runs")
    return Note(WHY, why), Note(TO_DECIDE, todo)


def noise_report(baseline: Sequence[Mapping[str, float]], budget: LaunchBudget,
                 policy: ComparePolicy) -> NoiseReport:
    """The NoiseReport of a baseline's launches at ``budget`` under ``policy``."""
    noise = launch_noise(baseline)
    n = sum(1 for m in baseline if NOISE_METRIC in m)
    alpha = budget.look_alpha(policy.alpha, n)
    tolerance = policy.tolerance_for(NOISE_METRIC)
    return NoiseReport(metric=NOISE_METRIC, noise=noise, n_baseline=n, max_launches=budget.max_launches,
                       alpha_per_look=alpha, tolerance_rel=tolerance.rel,
                       detectable_change=detectable_change(noise, n, budget.max_launches, alpha, tolerance)
                       if noise is not None else None)


@dataclass(frozen=True)
class Look:
    """One comparison during a run: after ``launches`` current launches, at ``elapsed_s``."""

    launches: int
    outcome: Outcome
    elapsed_s: float


def stop_reason(outcome: Outcome, launches: int, elapsed_s: float, budget: LaunchBudget) -> str | None:
    """Why the run stops after this look, or None to take another launch (while
    perfgate.gate.compare.needs_more_launches: a gating metric INCONCLUSIVE, nothing failed)."""
    from perfgate.gate.compare import needs_more_launches

    if not needs_more_launches(outcome):
        return "decided"
    if launches >= budget.max_launches:
        return f"max_launches ({budget.max_launches}) reached"
    if budget.budget_s and elapsed_s >= budget.budget_s:
        return f"budget_s ({budget.budget_s:g} s) spent"
    return None


@dataclass(frozen=True)
class LookRun:
    """What a gate run's looks decided (:func:`run_looks`): the timing launches' metrics, the looks,
    why the launches stopped, the verdict (the last look's comparison, with the profile launch's
    metrics when one was taken), what the baseline's noise lets the looks catch (None: no baseline)
    and the policy they compared under (at the whole run's ``alpha``; each look tests at its level)."""

    current: list[Mapping[str, float]]
    looks: list[Look]
    stopped: str
    outcome: Outcome
    noise: NoiseReport | None
    policy: ComparePolicy

    def noise_notes(self, workload: str) -> tuple[Note, ...]:
        """What the noise says of this run: why an INCONCLUSIVE one could not decide and what to do
        about it, then a warning when ``workload`` is too noisy for its tolerance."""
        if self.noise is None:
            return ()
        notes = undecided(self.noise, workload, self.outcome.n_current, self.stopped, self.policy.alpha) \
            if self.outcome.verdict == Verdict.INCONCLUSIVE else ()
        warning = noise_warning(self.noise, workload, self.policy)
        return (*notes, *([Note(WARNING, warning)] if warning else []))


def run_looks(baseline: Sequence[Mapping[str, float]], launch: Callable[[int], Mapping[str, float]],
              policy: ComparePolicy, budget: LaunchBudget, *,
              profile: Callable[[Outcome], Mapping[str, float] | None] | None = None,
              on_look: Callable[[Look], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> LookRun:
    """Take launches (``launch(k)`` returns launch k's metrics) and compare after each one from
    ``min_launches`` on, at the per-look level, until the verdict is clear or the budget is spent;
    then ``profile(last outcome)`` may add the profile launch's metrics (what timing launches do
    not measure), compared with the others at the same level for the verdict. The one place a
    gate run's looks and verdict are compared."""
    from perfgate.gate.compare import compare_launches, timed_launches

    look_policy = replace(policy, alpha=budget.look_alpha(policy.alpha, timed_launches(baseline)))
    started = clock()
    current: list[Mapping[str, float]] = []
    looks: list[Look] = []
    reason: str | None = None
    while reason is None:
        current.append(launch(len(current)))
        if len(current) < budget.min_launches:
            continue
        outcome = compare_launches(baseline, current, look_policy)
        look = Look(len(current), outcome, clock() - started)
        looks.append(look)
        if on_look is not None:
            on_look(look)
        reason = stop_reason(outcome, len(current), look.elapsed_s, budget)
    extra = profile(looks[-1].outcome) if profile is not None else None
    verdict = looks[-1].outcome if extra is None else compare_launches(baseline, [*current, extra], look_policy)
    return LookRun(current, looks, reason, verdict, noise_report(baseline, budget, policy) if baseline else None,
                   policy)
