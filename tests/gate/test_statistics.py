"""perfgate.gate.statistics: launch-level Student t-test, Holm, the three-way decision and stability checks."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from perfgate.gate.statistics import decide, geometric_mean, holm, shift_test, stability, student_t_ppf, student_t_sf
from perfgate.records.model import Verdict


# --------------------------------------------------------------------------- summaries


def test_geometric_mean_of_ratios_is_their_root() -> None:
    assert geometric_mean([1.0, 4.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])


# --------------------------------------------------------------------------- Student's t on logs


BASE = [100.0, 101.5, 99.2, 100.8, 98.9]
HEAD = [104.1, 102.9, 105.6, 103.3]


def _explicit_student(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """t, df and one-sided p(b > a) of the pooled-variance two-sample test, written out by hand."""
    la, lb = np.log(a), np.log(b)
    na, nb = len(la), len(lb)
    ma, mb = sum(la) / na, sum(lb) / nb
    pooled = (sum((x - ma) ** 2 for x in la) + sum((x - mb) ** 2 for x in lb)) / (na + nb - 2)
    t = (mb - ma) / math.sqrt(pooled * (1 / na + 1 / nb))
    df = na + nb - 2
    return t, df, float(sps.t.sf(t, df))


def test_student_on_logs_matches_the_textbook_formula() -> None:
    t, df, p = _explicit_student(BASE, HEAD)
    r = shift_test(BASE, HEAD, alpha=0.01)
    assert r is not None and r.method == "student"
    assert r.t == pytest.approx(t, rel=1e-12)
    assert r.df == df == 7
    assert r.p_increase == pytest.approx(p, rel=1e-10)
    assert r.p_decrease == pytest.approx(1 - p, rel=1e-10)
    assert p < 0.001  # a clear 3.6 % slowdown with ~1 % noise
    # scipy's own pooled t-test agrees too
    ref = sps.ttest_ind(np.log(HEAD), np.log(BASE), equal_var=True, alternative="greater")
    assert r.p_increase == pytest.approx(ref.pvalue, rel=1e-10)


def test_the_pooled_test_holds_its_level_at_two_launches_where_welch_does_not() -> None:
    """The sequential gate looks at 2 current launches against 5 recorded ones. With no change
    (one distribution), the pooled test rejects at its level; Welch's, with a variance from 2
    launches, rejects at about 1.8x its level (docs/statistics.md §2)."""
    rng = np.random.default_rng(11)
    sims, alpha = 200_000, 0.001
    base, cur = rng.standard_normal((sims, 5)), rng.standard_normal((sims, 2))
    welch = sps.ttest_ind(cur, base, axis=1, equal_var=False, alternative="greater").pvalue
    student = sps.ttest_ind(cur, base, axis=1, equal_var=True, alternative="greater").pvalue
    assert (student < alpha).mean() == pytest.approx(alpha, rel=0.2)
    assert (welch < alpha).mean() > 1.5 * alpha
    # and shift_test is the pooled one (on logs, so exponentiate the draws)
    r = shift_test(np.exp(base[0]).tolist(), np.exp(cur[0]).tolist())
    assert r is not None and r.p_increase == pytest.approx(float(student[0]), rel=1e-9)


def test_the_estimate_is_the_log_ratio_of_geometric_means_and_ci_bounds_are_one_sided() -> None:
    r = shift_test(BASE, HEAD, alpha=0.01)
    assert r is not None
    assert math.exp(r.estimate) == pytest.approx(geometric_mean(HEAD) / geometric_mean(BASE))
    q = sps.t.ppf(0.99, r.df)
    assert r.ci_low == pytest.approx(r.estimate - q * r.se)
    assert r.ci_high == pytest.approx(r.estimate + q * r.se)
    # the lower bound is above 0 exactly when the one-sided p is below alpha
    assert (r.ci_low > 0) == (r.p_increase < 0.01)


def test_one_new_launch_against_a_history_uses_the_history_variance() -> None:
    history = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    r = shift_test(history, [103.0], alpha=0.01)
    assert r is not None and r.method == "student"
    lh = np.log(history)
    s = np.std(lh, ddof=1)
    t = (math.log(103.0) - lh.mean()) / (s * math.sqrt(1 / 6 + 1))
    assert r.t == pytest.approx(t)
    assert r.df == 5
    assert r.p_increase == pytest.approx(sps.t.sf(t, 5))


def test_no_test_is_possible_with_one_launch_per_side_or_no_variance() -> None:
    assert shift_test([100.0], [110.0]) is None
    assert shift_test([100.0, 100.0], [110.0, 110.0]) is None


def test_linear_scale_tests_the_difference_of_means() -> None:
    a, b = [0.10, 0.11, 0.12], [0.15, 0.16, 0.14]
    r = shift_test(a, b, log_scale=False)
    assert r is not None
    assert r.estimate == pytest.approx(0.04)
    ref = sps.ttest_ind(b, a, equal_var=False, alternative="greater")
    assert r.p_increase == pytest.approx(ref.pvalue, rel=1e-10)


def _launches(rng: np.random.Generator, k: int, steps: int, sigma_b: float, phi: float, sigma_w: float,
              scale: float = 1.0) -> list[np.ndarray]:
    """k launches of AR(1) step times around a per-launch offset (log-normal model)."""
    out = []
    for _ in range(k):
        offset = rng.normal(0.0, sigma_b)
        e = np.empty(steps)
        e[0] = rng.normal(0.0, sigma_w)
        innovation_sd = sigma_w * math.sqrt(1 - phi**2)
        for i in range(1, steps):
            e[i] = phi * e[i - 1] + rng.normal(0.0, innovation_sd)
        out.append(100.0 * scale * np.exp(offset + e))
    return out


def test_pooled_steps_raise_false_alarms_where_the_launch_level_test_does_not() -> None:
    """A/A: same code on both sides. Per-launch offsets (2 %) and AR(1) steps make the steps of one
    launch anything but independent; a test over pooled steps then 'detects' differences that are
    just launch-to-launch noise."""
    from perfgate.gate.compare import ComparePolicy, compare_launches

    rng = np.random.default_rng(20240601)
    reps, k = 200, 5
    pooled_alarms = pooled_t_alarms = launch_alarms = 0
    example_seen = False
    for _ in range(reps):
        a = _launches(rng, k, 100, sigma_b=0.02, phi=0.6, sigma_w=0.02)
        b = _launches(rng, k, 100, sigma_b=0.02, phi=0.6, sigma_w=0.02)
        pa, pb = np.concatenate(a), np.concatenate(b)
        p_mwu = sps.mannwhitneyu(pb, pa, alternative="greater").pvalue
        p_t = sps.ttest_ind(pb, pa, alternative="greater").pvalue
        pooled_alarms += p_mwu < 0.01
        pooled_t_alarms += p_t < 0.01
        base = [{"step_time_ms": float(np.median(x)), "step_time_mean_ms": float(x.mean())} for x in a]
        head = [{"step_time_ms": float(np.median(x)), "step_time_mean_ms": float(x.mean())} for x in b]
        outcome = compare_launches(base, head, ComparePolicy(tolerances={"*": _zero()}))
        r = shift_test([m["step_time_ms"] for m in base], [m["step_time_ms"] for m in head])
        assert r is not None
        launch_alarms += r.p_increase < 0.01
        if p_mwu < 0.01 and p_t < 0.01 and outcome.verdict != Verdict.REGRESSED and r.p_increase >= 0.01:
            example_seen = True
    # naive pooled tests: far above their nominal 1 %; launch level: at its nominal level
    assert pooled_alarms / reps > 0.15
    assert pooled_t_alarms / reps > 0.15
    assert launch_alarms / reps <= 0.03
    assert example_seen  # at least one concrete pair: pooled p < 0.01 but the gate passes


def _zero():
    from perfgate.records.model import Tolerance

    return Tolerance(rel=0.0)  # even with zero tolerance, only significance protects us


def test_students_t_is_scipy_stats_own_to_the_last_bit() -> None:
    """The gate's t from scipy.special (without scipy.stats' import) is what scipy.stats.t computes."""
    t = np.concatenate([np.random.default_rng(0).normal(0.0, 5.0, 200), [0.0, np.inf, -np.inf, 40.0]])
    for df in (1, 2, 3, 5.5, 13.7, 100, 1e4):
        assert np.array_equal(student_t_sf(t, df), sps.t.sf(t, df))
        assert np.array_equal(student_t_sf(-t, df), sps.t.cdf(t, df))
        for q in (0.5, 0.8, 0.9, 0.99, 0.995):
            assert student_t_ppf(q, df) == sps.t.ppf(q, df)


def test_a_gate_does_not_import_scipy_stats() -> None:
    """scipy.stats took 1.1 s of a perfgate command's 1.5 s of imports on the CI machine."""
    import subprocess
    import sys

    code = ("import sys, perfgate.cli, perfgate.commands.run, perfgate.pipeline.workload_run, "
            "perfgate.gate.compare, perfgate.gate.paired_looks; print(sorted(m for m in sys.modules if m.startswith('scipy.stats')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- Holm


def test_holm_adjusted_values_on_the_textbook_example() -> None:
    # Holm (1979) / Wikipedia: p = 0.01, 0.04, 0.03, 0.005 -> sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    rejected = [p < 0.05 for p in adjusted]
    assert rejected == [True, False, False, True]


def test_holm_caps_at_one_and_keeps_single_p_values() -> None:
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])
    assert holm([0.004]) == pytest.approx([0.004])
    assert holm([]) == []


# --------------------------------------------------------------------------- decide


def _d(change: float, delta: float, rel: float | None, abs_: float | None,
       p_worse: float | None = 0.001, p_better: float | None = 0.999) -> Verdict:
    return decide(worse_change=change, worse_delta=delta, rel_tolerance=rel, abs_tolerance=abs_,
                  p_worse=p_worse, p_better=p_better, alpha=0.01).verdict


def test_regressed_needs_significance_and_both_tolerance_parts() -> None:
    assert _d(0.30, 3.0, 0.10, 0.5) == Verdict.REGRESSED           # 30 % and 3 ms: beyond both
    assert _d(0.30, 0.03, 0.10, 0.5) == Verdict.PASS               # 30 % of a 0.1 ms phase: under the floor
    assert _d(0.08, 3.0, 0.10, 0.5) == Verdict.PASS                # 3 ms but only 8 %
    assert _d(0.06, 6.0, 0.05, None) == Verdict.REGRESSED          # relative only
    assert _d(0.04, 0.04, None, 0.03) == Verdict.REGRESSED         # absolute only (idle fraction)
    assert _d(0.02, 0.02, None, 0.03) == Verdict.PASS


def test_significant_but_within_tolerance_passes_with_a_note() -> None:
    d = decide(worse_change=0.02, worse_delta=2.0, rel_tolerance=0.05, abs_tolerance=None,
               p_worse=0.0001, p_better=0.9999, alpha=0.01)
    assert d.verdict == Verdict.PASS and "within tolerance" in d.note and "significant" in d.note


def test_large_but_noisy_change_is_inconclusive() -> None:
    d = decide(worse_change=0.09, worse_delta=9.0, rel_tolerance=0.05, abs_tolerance=None,
               p_worse=0.08, p_better=0.92, alpha=0.01)
    assert d.verdict == Verdict.INCONCLUSIVE and "not significant" in d.note


def test_improvement_must_be_significant_and_beyond_tolerance() -> None:
    assert _d(-0.10, -10.0, 0.05, None, p_worse=0.9999, p_better=0.0001) == Verdict.IMPROVED
    assert _d(-0.10, -10.0, 0.05, None, p_worse=0.95, p_better=0.05) == Verdict.PASS
    assert _d(-0.02, -2.0, 0.05, None, p_worse=0.9999, p_better=0.0001) == Verdict.PASS


def test_without_a_test_the_tolerance_alone_decides() -> None:
    assert _d(0.06, 6.0, 0.05, None, None, None) == Verdict.REGRESSED
    assert _d(0.04, 4.0, 0.05, None, None, None) == Verdict.PASS
    assert _d(-0.06, -6.0, 0.05, None, None, None) == Verdict.IMPROVED


def test_zero_tolerance_fails_any_significant_worsening_but_not_an_unchanged_value() -> None:
    assert _d(0.001, 0.1, 0.0, None) == Verdict.REGRESSED
    assert _d(0.0, 0.0, 0.0, None, None, None) == Verdict.PASS


# --------------------------------------------------------------------------- stability


def test_stationary_noisy_steps_with_rare_stalls_are_stable() -> None:
    rng = np.random.default_rng(7)
    x = _launches(rng, 1, 200, sigma_b=0.0, phi=0.5, sigma_w=0.02)[0]
    x[[30, 120, 170]] *= 1.3  # three data-loader stalls
    r = stability(x)
    assert r.stable, r.reasons
    assert r.changepoint_index is None
    assert 0.005 < r.noise_fraction < 0.04


def test_two_levels_inside_the_window_are_flagged_at_the_split() -> None:
    rng = np.random.default_rng(8)
    x = np.concatenate([100 * np.exp(rng.normal(0, 0.01, 60)), 115 * np.exp(rng.normal(0, 0.01, 40))])
    r = stability(x)
    assert not r.stable
    assert r.changepoint_index is not None and abs(r.changepoint_index - 60) <= 2
    assert r.level_shift_fraction == pytest.approx(0.15, abs=0.02)
    assert any("two levels" in s for s in r.reasons)


def test_a_steady_drift_is_flagged() -> None:
    rng = np.random.default_rng(9)
    x = np.linspace(100, 120, 100) * np.exp(rng.normal(0, 0.01, 100))
    r = stability(x)
    assert not r.stable
    assert r.drift_fraction == pytest.approx(0.1, abs=0.03)
    assert any("drift" in s for s in r.reasons)


def test_a_small_level_change_below_the_minimum_shift_is_not_flagged() -> None:
    rng = np.random.default_rng(10)
    x = np.concatenate([100 * np.exp(rng.normal(0, 0.002, 50)), 102 * np.exp(rng.normal(0, 0.002, 50))])
    assert stability(x).stable  # 2 % < the 5 % that makes a window unusable
    assert not stability(x, min_shift_fraction=0.01).stable


def test_too_few_steps_are_not_judged() -> None:
    r = stability([10.0, 20.0, 30.0])
    assert r.stable and r.steps == 3 and "not checked" in r.reasons[0]
