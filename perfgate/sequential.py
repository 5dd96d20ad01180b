"""Adaptive launches: decide with as few launches as the noise allows (docs/statistics.md §3).

The gate starts ``min_launches`` launches, compares them with the baseline, and adds one launch at
a time while the verdict is not clear (a gating metric INCONCLUSIVE: beyond tolerance, not yet
significant), until ``max_launches`` or ``budget_s``. Each look tests at ``alpha / looks`` (a
Bonferroni split over the most looks the budget allows), so the false-alarm rate of the whole
procedure stays at or below ``alpha`` however many looks are taken.

The noise of a workload is the launch-to-launch spread of its step time (the standard deviation of
the log of each launch's value, about its coefficient of variation); with the baseline's launch count
and the budget it gives the smallest slowdown the gate catches 9 times in 10
(:func:`detectable_change`). Pure functions and one loop over a launch callable (:func:`run_looks`),
shared by the gate (perfgate.pipeline) and its calibration (perfgate.calibrate).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from perfgate.errors import ConfigError
from perfgate.model import Tolerance

if TYPE_CHECKING:
    from perfgate.compare import ComparePolicy, Outcome

#: The metric whose launch-to-launch noise sizes the gate.
NOISE_METRIC = "step_time_ms"
#: The chance of catching a slowdown that :func:`detectable_change` reports.
POWER = 0.9


@dataclass(frozen=True)
class LaunchBudget:
    """How many launches a gate run may take. ``min_launches`` before the first look,
    ``max_launches`` at most, and no new launch once ``budget_s`` seconds have passed (0: no limit)."""

    min_launches: int = 1
    max_launches: int = 5
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

    def look_alpha(self, alpha: float) -> float:
        """The significance level of each look: ``alpha`` split over the looks (Bonferroni)."""
        return alpha / self.looks


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
    """Degrees of freedom of the launch-level test (perfgate.stats.shift_test) at equal variances."""
    if n_current < 2:
        return float(n_baseline - 1)
    if n_baseline < 2:
        return float(n_current - 1)
    a, b = 1.0 / n_baseline, 1.0 / n_current
    return (a + b) ** 2 / (a * a / (n_baseline - 1) + b * b / (n_current - 1))


def detectable_change(noise: float, n_baseline: int, n_current: int, alpha: float,
                      tolerance: Tolerance | None = None, power: float = POWER) -> float | None:
    """The smallest relative slowdown that ends REGRESSED with probability ``power`` when compared at
    ``n_current`` launches against ``n_baseline`` at level ``alpha``: it must be significant,
    ``(t_alpha + t_power) · SE``, and beyond the tolerance by ``t_power · SE``. None when no test is
    possible (fewer than 2 launches on both sides, or no noise estimate)."""
    from scipy import stats as sps

    if noise is None or n_baseline < 1 or n_current < 1 or (n_baseline < 2 and n_current < 2):
        return None
    df = _df(n_baseline, n_current)
    if df < 1:
        return None
    se = noise * math.sqrt(1.0 / n_baseline + 1.0 / n_current)
    t_alpha, t_power = float(sps.t.ppf(1 - alpha, df)), float(sps.t.ppf(power, df))
    significant = (t_alpha + t_power) * se
    rel = tolerance.rel if tolerance is not None and tolerance.rel is not None else 0.0
    beyond = math.log1p(rel) + t_power * se if math.isfinite(rel) else math.inf
    return math.expm1(max(significant, beyond))


@dataclass(frozen=True)
class NoiseReport:
    """What a workload's noise means for the gate at its budget."""

    noise: float | None                 # launch-to-launch log-sd of step time (≈ CV)
    n_baseline: int
    max_launches: int
    alpha: float                        # per look
    tolerance: Tolerance
    detectable: float | None            # relative slowdown caught 9 in 10 at max_launches

    @property
    def too_noisy(self) -> bool:
        """Whether a slowdown a little beyond the tolerance cannot be established at the budget:
        the noise alone needs more than the tolerance plus half of it."""
        rel = self.tolerance.rel
        if self.detectable is None or rel is None or not math.isfinite(rel):
            return False
        return self.detectable > 1.5 * rel + 1e-12

    def describe(self) -> str:
        if self.noise is None:
            return (f"launch-to-launch noise unknown ({self.n_baseline} baseline launch"
                    f"{'es' if self.n_baseline != 1 else ''}; record 2 or more to estimate it)")
        text = f"launch-to-launch noise {self.noise * 100:.2f} % ({self.n_baseline} baseline launches)"
        if self.detectable is not None:
            text += (f"; a slowdown is caught 9 times in 10 from +{self.detectable * 100:.1f} % "
                     f"at up to {self.max_launches} launch{'es' if self.max_launches != 1 else ''}")
        return text

    def warning(self, workload: str) -> str | None:
        if not self.too_noisy:
            return None
        from perfgate.wording import fmt_tolerance

        return (f"{workload} is too noisy for its step-time tolerance of {fmt_tolerance(self.tolerance, 'ms')}: "
                f"{self.describe()}. Raise max_launches, widen the tolerance, or make the workload steadier "
                "(more measured steps, fixed clocks, no other load)")

    def to_dict(self) -> dict[str, Any]:
        return {"metric": NOISE_METRIC, "noise": self.noise, "n_baseline": self.n_baseline,
                "max_launches": self.max_launches, "alpha_per_look": self.alpha,
                "tolerance_rel": self.tolerance.rel, "detectable_change": self.detectable}


def noise_report(baseline: Sequence[Mapping[str, float]], budget: LaunchBudget,
                 policy: ComparePolicy) -> NoiseReport:
    """The NoiseReport of a baseline's launches at ``budget`` under ``policy``."""
    noise = launch_noise(baseline)
    alpha = budget.look_alpha(policy.alpha)
    tolerance = policy.tolerance_for(NOISE_METRIC)
    n = sum(1 for m in baseline if NOISE_METRIC in m)
    return NoiseReport(noise=noise, n_baseline=n, max_launches=budget.max_launches, alpha=alpha,
                       tolerance=tolerance,
                       detectable=detectable_change(noise, n, budget.max_launches, alpha, tolerance)
                       if noise is not None else None)


@dataclass(frozen=True)
class Look:
    """One comparison during a run: after ``launches`` current launches, at ``elapsed_s``."""

    launches: int
    outcome: Outcome
    elapsed_s: float


def stop_reason(outcome: Outcome, launches: int, elapsed_s: float, budget: LaunchBudget) -> str | None:
    """Why the run stops after this look, or None to take another launch (while
    perfgate.compare.needs_more_launches: a gating metric INCONCLUSIVE, nothing failed)."""
    from perfgate.compare import needs_more_launches

    if not needs_more_launches(outcome):
        return "decided"
    if launches >= budget.max_launches:
        return f"max_launches ({budget.max_launches}) reached"
    if budget.budget_s and elapsed_s >= budget.budget_s:
        return f"budget_s ({budget.budget_s:g} s) spent"
    return None


def run_looks(baseline: Sequence[Mapping[str, float]], launch: Callable[[int], Mapping[str, float]],
              policy: ComparePolicy, budget: LaunchBudget, *,
              on_look: Callable[[Look], None] | None = None,
              clock: Callable[[], float] = time.monotonic) -> tuple[list[Mapping[str, float]], list[Look], str]:
    """Take launches (``launch(k)`` returns launch k's metrics) and compare after each one from
    ``min_launches`` on, at the per-look level, until the verdict is clear or the budget is spent.
    Returns the current launches' metrics, the looks, and why it stopped."""
    from perfgate.compare import compare_launches

    look_policy = replace(policy, alpha=budget.look_alpha(policy.alpha))
    started = clock()
    current: list[Mapping[str, float]] = []
    looks: list[Look] = []
    while True:
        current.append(launch(len(current)))
        if len(current) < budget.min_launches:
            continue
        outcome = compare_launches(baseline, current, look_policy)
        look = Look(len(current), outcome, clock() - started)
        looks.append(look)
        if on_look is not None:
            on_look(look)
        reason = stop_reason(outcome, len(current), look.elapsed_s, budget)
        if reason is not None:
            return current, looks, reason
