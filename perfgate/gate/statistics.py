"""Pure statistics for the gate: the geometric mean, the launch-level Student t-test on log values (a ratio
with its confidence interval), Holm's step-down adjustment, the three-way tolerance-and-significance
decision, and stability checks of one launch's measured steps.

The unit of replication is the process launch: callers pass one value per launch (e.g. each launch's
median step time), never pooled steps. See docs/statistics.md for why and for the defaults.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special as _special

from perfgate.records.launch_checks import StabilityReport
from perfgate.records.model import Verdict

__all__ = [
    "coefficient_of_variation",
    "upper_bound_95",
    "disjoint_splits",
    "geometric_mean",
    "ShiftTest",
    "shift_test",
    "paired_shift_test",
    "holm",
    "student_t_sf",
    "student_t_ppf",
    "Decision",
    "decide",
    "stability",
]


# --------------------------------------------------------------------------- the geometric mean


def geometric_mean(values: Sequence[float]) -> float:
    """exp(mean(log v)); every value must be > 0."""
    a = np.asarray(values, dtype=float)
    if a.size == 0 or np.any(a <= 0):
        raise ValueError("geometric_mean() needs positive values")
    return float(np.exp(np.log(a).mean()))


def center(values: Sequence[float], log_scale: bool) -> float:
    """The launches' central value of a metric, as the verdict's table states it: the geometric
    mean on a log scale (all values positive), else the mean."""
    if log_scale and min(values) > 0:
        return geometric_mean(values)
    return sum(values) / len(values)


# --------------------------------------------------------------------------- the launch-level test


def student_t_sf(t: float | np.ndarray, df: float) -> float | np.ndarray:
    """P(T > t) for Student's t with ``df`` degrees of freedom: what ``scipy.stats.t.sf`` computes
    (``scipy.special.stdtr``), without importing ``scipy.stats``, which took 1.1 s of every
    perfgate command's 1.5 s of imports on the 2-core CI machine."""
    return _special.stdtr(df, -np.asarray(t, dtype=float))


def student_t_ppf(q: float, df: float) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (``scipy.stats.t.ppf``'s
    ``scipy.special.stdtrit``)."""
    return float(_special.stdtrit(df, q))


@dataclass(frozen=True)
class ShiftTest:
    """Result of comparing per-launch values of a baseline and a current side.

    ``estimate`` is the shift current − baseline on the test scale (log scale: log of the ratio of
    geometric means; linear scale: difference of means). ``p_increase``/``p_decrease`` are the
    one-sided p-values for "current is larger"/"current is smaller". ``ci_low``/``ci_high`` bound
    the shift with two-sided confidence ``1 − 2·alpha`` (so each bound is a one-sided 1 − alpha bound
    and ``ci_low > 0`` exactly when ``p_increase < alpha``). ``df`` is n_baseline + n_current − 2.
    """

    log_scale: bool
    n_baseline: int
    n_current: int
    estimate: float
    se: float
    df: float
    t: float
    p_increase: float
    p_decrease: float
    ci_low: float
    ci_high: float
    method: str


def shift_test(
    baseline: Sequence[float], current: Sequence[float], *, log_scale: bool = True, alpha: float = 0.01
) -> ShiftTest | None:
    """Student's two-sample t-test on per-launch values (on their logs when ``log_scale``), with the
    variance pooled from both sides: df = n_baseline + n_current − 2.

    With no change both sides are launches of one program on one machine class, so they share one
    distribution and the pooled test is exact at every pair of sizes, the sequential looks' 1 vs 5
    and 2 vs 5 included. Welch's test, built for unequal variances, is not: its variance from 2
    launches makes it raise false alarms at 1.8x its level against 5 baseline launches and 9x
    against 10 (simulated at a level of 0.001, docs/statistics.md §2). One side with a single launch
    contributes no variance; the other's gives the prediction-interval test of one new launch
    against a history. Both sides with one launch, or zero variance everywhere: None (no test).
    """
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(current, dtype=float)
    if log_scale:
        if np.any(b <= 0) or np.any(c <= 0):
            raise ValueError("log-scale shift_test needs positive values")
        b, c = np.log(b), np.log(c)
    nb, nc = b.size, c.size
    df = nb + nc - 2
    if nb == 0 or nc == 0 or df < 1:
        return None
    est = float(c.mean() - b.mean())
    pooled = (float(((b - b.mean()) ** 2).sum()) + float(((c - c.mean()) ** 2).sum())) / df
    se = math.sqrt(pooled * (1.0 / nb + 1.0 / nc))
    if se == 0.0:
        return None
    t = est / se
    q = student_t_ppf(1.0 - alpha, df)
    return ShiftTest(
        log_scale=log_scale,
        n_baseline=nb,
        n_current=nc,
        estimate=est,
        se=se,
        df=float(df),
        t=float(t),
        p_increase=float(student_t_sf(t, df)),
        p_decrease=float(student_t_sf(-t, df)),
        ci_low=est - q * se,
        ci_high=est + q * se,
        method="student",
    )


def paired_shift_test(
    baseline: Sequence[float], current: Sequence[float], *, log_scale: bool = True, alpha: float = 0.01
) -> ShiftTest | None:
    """Student's one-sample t-test on the differences of interleaved pairs (``baseline[i]`` and
    ``current[i]`` launched one right after the other; on their logs when ``log_scale``):
    df = pairs − 1.

    What the machine did during a pair (a neighbour's load, a clock, a drift since the baseline
    was recorded) is shared by both of its launches and drops out of their difference, so only
    what changes from one launch to the next is left in the test's error. With no change, and
    the order of each pair balanced (perfgate.gate.paired_looks.launch_order), every difference
    is centred on zero and the test is exact for normal differences at every number of pairs.
    Fewer than 2 pairs, or differences without spread: None (no test)."""
    b = np.asarray(baseline, dtype=float)
    c = np.asarray(current, dtype=float)
    if b.size != c.size:
        raise ValueError(f"paired_shift_test() needs as many current values as baseline values ({b.size} != {c.size})")
    if log_scale:
        if np.any(b <= 0) or np.any(c <= 0):
            raise ValueError("log-scale paired_shift_test needs positive values")
        b, c = np.log(b), np.log(c)
    n = b.size
    if n < 2:
        return None
    d = c - b
    est = float(d.mean())
    se = float(d.std(ddof=1)) / math.sqrt(n)
    if se <= 1e-12 * max(1.0, abs(est)):   # the same difference in every pair, up to rounding: no spread
        return None
    df = n - 1
    t = est / se
    q = student_t_ppf(1.0 - alpha, df)
    return ShiftTest(
        log_scale=log_scale, n_baseline=n, n_current=n, estimate=est, se=se, df=float(df), t=float(t),
        p_increase=float(student_t_sf(t, df)), p_decrease=float(student_t_sf(-t, df)),
        ci_low=est - q * se, ci_high=est + q * se, method="paired",
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values (step-down, made monotone, capped at 1), in input order.
    The gate rejects a hypothesis of the family when its adjusted p-value is < alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


# --------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Decision:
    """Per-metric verdict with the reason in words. ``significant_within_tolerance``: a PASS whose
    change is significantly worse but within the tolerance (the summary names such metrics)."""

    verdict: Verdict
    note: str
    significant_within_tolerance: bool = False


def decide(
    *,
    worse_change: float,
    worse_delta: float,
    rel_tolerance: float | None,
    abs_tolerance: float | None,
    p_worse: float | None,
    p_better: float | None,
    alpha: float,
    untested_note: str = "no significance test",
) -> Decision:
    """The three-way tolerance-and-significance rule for one metric.

    ``worse_change`` is the relative change in the "worse" direction (+0.08 = 8 % worse; negative when
    better), ``worse_delta`` the same in the metric's unit. A change *exceeds the tolerance* when it is
    worse by more than ``rel_tolerance`` AND more than ``abs_tolerance`` (a None part is not checked).

    With a test (p-values given): REGRESSED iff p_worse < alpha and the change exceeds the tolerance;
    significant but within tolerance -> PASS with a note; beyond tolerance but not significant ->
    INCONCLUSIVE; IMPROVED iff p_better < alpha and the improvement exceeds the tolerance. Without a
    test (one launch per side, or no variance): the tolerance alone decides (``untested_note`` says why).
    """
    def exceeds(change: float, delta: float) -> bool:
        rel_ok = rel_tolerance is None or change > rel_tolerance
        abs_ok = abs_tolerance is None or delta > abs_tolerance
        return rel_ok and abs_ok and (change > 0 or delta > 0)

    worse = exceeds(worse_change, worse_delta)
    better = exceeds(-worse_change, -worse_delta)
    if p_worse is None or p_better is None:
        if worse:
            return Decision(Verdict.REGRESSED, f"beyond tolerance ({untested_note})")
        if better:
            return Decision(Verdict.IMPROVED, f"better beyond tolerance ({untested_note})")
        return Decision(Verdict.PASS, f"within tolerance ({untested_note})")
    if p_worse < alpha:
        if worse:
            return Decision(Verdict.REGRESSED, f"significant (p={p_worse:.2g}) and beyond tolerance")
        return Decision(Verdict.PASS, f"significant (p={p_worse:.2g}) but within tolerance",
                        significant_within_tolerance=True)
    if worse:
        return Decision(Verdict.INCONCLUSIVE, f"beyond tolerance but not significant (p={p_worse:.2g}): more launches needed")
    if p_better < alpha and better:
        return Decision(Verdict.IMPROVED, f"significantly better (p={p_better:.2g}) beyond tolerance")
    return Decision(Verdict.PASS, "")


# --------------------------------------------------------------------------- stability of one launch


_MAD_TO_SD = 1.4826


def _lag1(residuals: np.ndarray) -> float:
    """Lag-1 autocorrelation of residuals, clipped to [0, 0.9]."""
    r = residuals - residuals.mean()
    denom = float(np.dot(r, r))
    if denom == 0.0 or r.size < 3:
        return 0.0
    return min(0.9, max(0.0, float(np.dot(r[:-1], r[1:])) / denom))


def stability(
    step_durations_ms: Sequence[float],
    *,
    min_shift_fraction: float = 0.05,
    z_threshold: float = 6.0,
    min_steps: int = 8,
) -> StabilityReport:
    """Flag a measured window whose steps drift (trend) or split into two levels.

    Noise is estimated robustly from successive differences (insensitive to a single level shift or
    a trend). Drift: the halves' medians differ by more than ``min_shift_fraction`` of the median and
    by more than ``z_threshold`` standard errors. Two levels: the split minimising the within-segment
    sum of squares (on values clipped to median ± 5 noise SDs so a lone stall cannot place it) whose
    segment medians differ by more than ``min_shift_fraction`` and ``z_threshold`` standard errors.
    Occasional stalls and autocorrelated noise of a few % do not trigger either check.
    """
    x = np.asarray(step_durations_ms, dtype=float)
    n = int(x.size)
    if n < min_steps:
        return StabilityReport(True, n, 0.0, None, 0.0, 0.0, (f"only {n} steps: stability not checked",))
    med = float(np.median(x))
    diffs = np.diff(x)
    sigma = _MAD_TO_SD * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0)
    if sigma == 0.0:
        sigma = float(np.std(diffs)) / math.sqrt(2.0)
    sigma = max(sigma, 1e-12 * max(abs(med), 1.0))
    reasons: list[str] = []

    h = n // 2
    first, second = x[:h], x[n - h:]
    drift = (float(np.median(second)) - float(np.median(first))) / med
    trend = np.polyval(np.polyfit(np.arange(n), x, 1), np.arange(n))
    phi_t = _lag1(x - trend)
    se_half = 1.2533 * sigma * math.sqrt(2.0 / h * (1.0 + phi_t) / (1.0 - phi_t))  # SE of a difference of half medians
    drifting = abs(drift) > min_shift_fraction and abs(drift) * med > z_threshold * se_half

    clipped = np.clip(x, med - 5 * sigma, med + 5 * sigma)
    m = max(3, n // 10)
    csum, csum2 = np.cumsum(clipped), np.cumsum(clipped**2)
    total, total2 = csum[-1], csum2[-1]
    best_i, best_sse = None, math.inf
    for i in range(m, n - m + 1):
        sl, sl2 = csum[i - 1], csum2[i - 1]
        sse = (sl2 - sl * sl / i) + ((total2 - sl2) - (total - sl) ** 2 / (n - i))
        if sse < best_sse:
            best_i, best_sse = i, sse
    change_at: int | None = None
    shift = 0.0
    if best_i is not None:
        left, right = x[:best_i], x[best_i:]
        shift = (float(np.median(right)) - float(np.median(left))) / med
        # Autocorrelation left after fitting the two levels inflates the SE of segment medians:
        # variance inflation (1 + phi) / (1 - phi) of an AR(1) process; a true step leaves white residuals.
        resid = np.concatenate([clipped[:best_i] - clipped[:best_i].mean(), clipped[best_i:] - clipped[best_i:].mean()])
        phi = _lag1(resid)
        sigma_marginal = max(sigma, _MAD_TO_SD * float(np.median(np.abs(resid - np.median(resid)))))
        vif = (1.0 + phi) / (1.0 - phi)
        se_split = 1.2533 * sigma_marginal * math.sqrt(vif * (1.0 / left.size + 1.0 / right.size))
        if abs(shift) > min_shift_fraction and abs(shift) * med > z_threshold * se_split:
            change_at = best_i
    if change_at is not None:
        reasons.append(
            f"steps split into two levels at measured step {change_at} ({shift:+.1%}): "
            "a recompilation, algorithm switch or clock change inside the measured window?"
        )
    if drifting:
        reasons.append(f"steps drift: second half median {drift:+.1%} vs first half (warm-up too short?)")
    return StabilityReport(
        stable=not reasons,
        steps=n,
        drift_fraction=drift,
        changepoint_index=change_at,
        level_shift_fraction=shift if change_at is not None else 0.0,
        noise_fraction=sigma / med,
        reasons=tuple(reasons),
    )


# --------------------------------------------------------------------------- calibration helpers


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof=1) / mean; 0.0 for fewer than two values."""
    a = np.asarray(values, dtype=float)
    if a.size < 2:
        return 0.0
    return float(a.std(ddof=1) / a.mean())


def upper_bound_95(events: int, trials: int) -> float:
    """One-sided 95 % Clopper–Pearson upper bound of a rate (0 of 300 -> 0.0099, the rule of three)."""
    if trials <= 0:
        return 1.0
    if events >= trials:
        return 1.0
    from scipy import stats

    return float(stats.beta.ppf(0.95, events + 1, trials - events))


def disjoint_splits(n_base: int, n_head: int, k: int, *, same_pool: bool, max_comparisons: int,
                    rng: np.random.Generator) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Up to ``max_comparisons`` distinct (base indices, head indices) pairs of k launches each.
    From one pool (A/A) the two subsets never share a launch. All pairs when there are few enough,
    else a seeded random sample without repeats."""
    if k < 1 or n_base < k or n_head < k or (same_pool and n_base < 2 * k):
        return []
    total = math.comb(n_base, k) * (math.comb(n_base - k, k) if same_pool else math.comb(n_head, k))
    if total <= max_comparisons:
        from itertools import combinations

        out: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        for b in combinations(range(n_base), k):
            rest = [i for i in range(n_head) if not (same_pool and i in b)]
            out.extend((b, h) for h in combinations(rest, k))
        return out
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    while len(seen) < max_comparisons:
        if same_pool:
            pick = rng.choice(n_base, size=2 * k, replace=False)
            pair = (tuple(sorted(pick[:k].tolist())), tuple(sorted(pick[k:].tolist())))
        else:
            pair = (tuple(sorted(rng.choice(n_base, size=k, replace=False).tolist())),
                    tuple(sorted(rng.choice(n_head, size=k, replace=False).tolist())))
        seen.add(pair)
    return sorted(seen)
