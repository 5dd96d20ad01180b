"""Adaptive launches (perfgate.gate.sequential_looks): the budget and its per-look level, the noise and the
slowdown it lets the gate catch (checked against simulated gate runs of the real compare_launches),
and the loop that adds launches only while the verdict is unclear."""
from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps
import pytest

from perfgate.errors import ConfigError
from perfgate.gate.compare import ComparePolicy, compare_launches
from perfgate.gate.sequential_looks import (
    LaunchBudget, detectable_change, launch_noise, noise_report, noise_warning, run_looks, undecided,
)
from perfgate.records.model import Tolerance, Verdict
from perfgate.records.notes import SUMMARY, TO_DECIDE, WHY, Note, message_text

POLICY = ComparePolicy(tolerances={"step_time*": Tolerance(rel=0.03)}, alpha=0.01)


def launches(rng: np.random.Generator, n: int, cv: float, change: float = 0.0) -> list[dict[str, float]]:
    """n launches of a 100 ms step with log-normal launch-to-launch noise."""
    out = []
    for _ in range(n):
        step = 100.0 * (1 + change) * math.exp(rng.normal(0.0, cv))
        out.append({"step_time_ms": step, "step_time_mean_ms": step * 1.01})
    return out


def test_budget_sets_one_level_for_its_looks_and_rejects_nonsense() -> None:
    assert LaunchBudget(1, 5).looks == 5
    # Pocock's level for 5 looks against 5 baseline launches: above Bonferroni's 0.002, below 0.01
    assert 0.0027 < LaunchBudget(1, 5).look_alpha(0.01, 5) < 0.0036
    assert LaunchBudget(3, 3).look_alpha(0.01, 5) == 0.01              # a fixed design: one look
    assert LaunchBudget(1, 10).look_alpha(0.01, 5) < LaunchBudget(1, 5).look_alpha(0.01, 5)
    with pytest.raises(ConfigError, match="max_launches: must be at least min_launches"):
        LaunchBudget(4, 2)
    with pytest.raises(ConfigError, match="budget_s"):
        LaunchBudget(1, 2, float("nan"))


@pytest.mark.parametrize("n_baseline, max_launches", [(5, 5), (5, 10), (10, 10)])
def test_look_level_holds_the_whole_procedure_at_alpha_where_bonferroni_does_not(n_baseline: int,
                                                                                   max_launches: int) -> None:
    """With no change, the chance that any look (1, 2, ... max_launches current launches against
    n_baseline) rejects at look_level is alpha: checked with scipy's pooled t-test on fresh draws
    (another seed than look_level's). Bonferroni's alpha / looks is not a bound here: against 10
    baseline launches the look at 2 launches alone exceeds it (the old Welch test, more so)."""
    alpha, sims = 0.01, 100_000
    level = LaunchBudget(1, max_launches).look_alpha(alpha, n_baseline)
    rng = np.random.default_rng(99)
    base, cur = rng.standard_normal((sims, n_baseline)), rng.standard_normal((sims, max_launches))
    low = np.ones(sims)
    for k in range(1, max_launches + 1):
        c = cur[:, :k]
        p = sps.ttest_ind(c, base, axis=1, equal_var=True, alternative="greater").pvalue if k > 1 else \
            sps.t.sf((c[:, 0] - base.mean(1)) / (base.std(1, ddof=1) * np.sqrt(1 + 1 / n_baseline)), n_baseline - 1)
        low = np.minimum(low, p)
    assert (low < level).mean() == pytest.approx(alpha, rel=0.15)
    assert level > alpha / max_launches                      # less strict than Bonferroni ...
    assert level < alpha                                     # ... and stricter than one look


def test_launch_noise_is_the_sd_of_log_values() -> None:
    base = [{"step_time_ms": 100.0}, {"step_time_ms": 110.0}, {"step_time_ms": 90.0}]
    logs = np.log([100.0, 110.0, 90.0])
    assert launch_noise(base) == pytest.approx(float(np.std(logs, ddof=1)))
    assert launch_noise(base[:1]) is None and launch_noise([{"other": 1.0}] * 3) is None


def test_detectable_change_is_caught_nine_times_in_ten_by_the_real_comparison() -> None:
    """At the reported change, simulated fixed-design comparisons (5 vs 5 launches, 2 % noise) end
    REGRESSED about 90 % of the time; at half of it far less often."""
    rng = np.random.default_rng(7)
    cv, n, alpha = 0.02, 5, 0.01
    policy = ComparePolicy(tolerances={"step_time*": Tolerance(rel=0.01)}, alpha=alpha)
    change = detectable_change(cv, n, n, alpha, Tolerance(rel=0.01))
    assert change is not None and 0.04 < change < 0.08

    def rate(c: float) -> float:
        hits = sum(compare_launches(launches(rng, n, cv), launches(rng, n, cv, c), policy).verdict == Verdict.REGRESSED
                   for _ in range(600))
        return hits / 600

    assert 0.83 <= rate(change) <= 0.96
    assert rate(change / 2) < 0.5
    # more launches, smaller; a wider tolerance sets the floor; no test with one launch a side
    assert detectable_change(cv, n, 10, alpha) < detectable_change(cv, n, 2, alpha)
    assert detectable_change(0.0001, 5, 5, alpha, Tolerance(rel=0.05)) == pytest.approx(0.05, abs=0.001)
    assert detectable_change(cv, 1, 1, alpha) is None


def test_a_clear_verdict_takes_one_launch_and_an_unclear_one_takes_more() -> None:
    rng = np.random.default_rng(1)
    base = launches(rng, 5, 0.002)
    budget = LaunchBudget(1, 5)
    taken: list[int] = []

    def steady(k: int) -> dict[str, float]:
        taken.append(k)
        return launches(rng, 1, 0.002)[0]

    run = run_looks(base, steady, POLICY, budget)
    assert (len(run.current), len(run.looks), run.stopped, run.outcome.verdict) == (1, 1, "decided", Verdict.PASS)
    run = run_looks(base, lambda k: launches(rng, 1, 0.002, 0.20)[0], POLICY, budget)
    assert (len(run.current), run.stopped, run.outcome.verdict) == (1, "decided", Verdict.REGRESSED)
    # a noisy baseline and a change beyond tolerance: INCONCLUSIVE until the budget is spent
    noisy = [{"step_time_ms": v, "step_time_mean_ms": v} for v in (90.0, 100.0, 112.0, 95.0, 104.0)]
    run = run_looks(noisy, lambda k: {"step_time_ms": 106.0, "step_time_mean_ms": 106.0}, POLICY, budget)
    assert [lk.launches for lk in run.looks] == [1, 2, 3, 4, 5]
    assert run.stopped == "max_launches (5) reached" and run.outcome.verdict == Verdict.INCONCLUSIVE
    ticks = iter(range(0, 1000, 40))
    run = run_looks(noisy, lambda k: {"step_time_ms": 106.0, "step_time_mean_ms": 106.0},
                    POLICY, LaunchBudget(1, 5, budget_s=100.0), clock=lambda: next(ticks))
    assert len(run.current) == 3 and run.stopped == "budget_s (100 s) spent"


def test_adaptive_looks_keep_the_false_alarm_rate_below_alpha_where_unsplit_looks_do_not() -> None:
    """A/A gate runs with 3 % noise against a 5-launch baseline and a 3 % tolerance: up to 5 looks at
    alpha/5 each raise fewer false alarms than alpha; the same looks at alpha each raise more."""
    rng = np.random.default_rng(3)
    policy = ComparePolicy(tolerances={"step_time*": Tolerance(rel=0.03)}, alpha=0.05)
    budget = LaunchBudget(1, 5)

    def alarms(split: bool) -> int:
        count = 0
        for _ in range(400):
            base = launches(rng, 5, 0.03)
            stream = launches(rng, 5, 0.03)
            b = budget if split else LaunchBudget(1, 5)
            p = policy if split else ComparePolicy(tolerances=policy.tolerances, alpha=0.05 * 5)
            count += run_looks(base, lambda k: stream[k], p, b).outcome.verdict == Verdict.REGRESSED
        return count

    split, unsplit = alarms(True), alarms(False)
    assert split <= 0.05 * 400 and unsplit > split


def test_noise_report_warns_when_the_workload_is_too_noisy_for_its_tolerance() -> None:
    rng = np.random.default_rng(5)
    steady = noise_report(launches(rng, 5, 0.001), LaunchBudget(1, 5), POLICY)
    assert not steady.too_noisy and noise_warning(steady, "w", POLICY) is None
    assert "caught 9 times in 10 from +3." in steady.describe()
    noisy = noise_report(launches(rng, 5, 0.08), LaunchBudget(1, 5), POLICY)
    assert noisy.too_noisy and noisy.detectable_change is not None and noisy.detectable_change > 0.1
    assert "w is too noisy for its step-time tolerance of 3 %" in (noise_warning(noisy, "w", POLICY) or "")
    assert "record 2 or more" in noise_report(launches(rng, 1, 0.01), LaunchBudget(), POLICY).describe()


def test_an_inconclusive_run_says_why_and_what_to_do_in_the_summary() -> None:
    from perfgate.settings.config import load_settings
    from perfgate.records.model import WorkloadResult
    from perfgate.report.terminal import render_summary

    noisy = [{"step_time_ms": v, "step_time_mean_ms": v} for v in (90.0, 100.0, 112.0, 95.0, 104.0)]
    settings = load_settings(env={})
    budget = settings.budget                                  # the defaults: 1 to 10 launches
    run = run_looks(noisy, lambda k: {"step_time_ms": 106.0, "step_time_mean_ms": 106.0}, POLICY, budget)
    outcome = run.outcome
    assert outcome.verdict == Verdict.INCONCLUSIVE and len(run.looks) == 10
    why = undecided(noise_report(noisy, budget, POLICY), "w", outcome.n_current, run.stopped, POLICY.alpha)
    assert run.noise == noise_report(noisy, budget, POLICY) and run.noise_notes("w")[:2] == why
    assert [n.severity for n in why] == [WHY, TO_DECIDE]
    text = message_text(why)
    assert "not significant after 10 launches (max_launches (10) reached; each look needs p < 0.0023," in text
    assert "launch-to-launch noise 8." in text and "raise max_launches (now 10)" in text
    assert "`perfgate history w --refresh-baseline`" in text
    result = WorkloadResult(workload="w", verdict=Verdict.INCONCLUSIVE, notes=(Note(SUMMARY, outcome.summary), *why))
    lines = render_summary([result])
    assert any(line.startswith("w: why: the change is beyond tolerance") for line in lines)
    assert any(line.startswith("w: to decide: raise max_launches") for line in lines)


def test_the_level_counts_the_baselines_timing_launches_not_its_profile_launch() -> None:
    """A recorded baseline holds 5 timing launches and the profile launch's GPU facts. The level is
    Pocock's for 5 baseline launches (0.00228), not 6 (0.00225): a first launch whose p-value lies
    between the two is REGRESSED with the profile launch in the baseline as without it."""
    steps = [100.0, 104.0, 97.0, 102.0, 99.0]
    logs = np.log(steps)
    level5, level6 = LaunchBudget(1, 10).look_alpha(0.01, 5), LaunchBudget(1, 10).look_alpha(0.01, 6)
    assert level6 < level5
    target = (level5 + level6) / 2
    t = sps.t.isf(target, 4)                                           # one launch against 5: df 4
    value = float(np.exp(logs.mean() + t * logs.std(ddof=1) * math.sqrt(1 + 1 / 5)))
    baseline = [{"step_time_ms": v, "step_time_mean_ms": v} for v in steps]
    profile = {"gpu_idle_fraction": 0.1, "kernels_per_step": 300.0}   # no step time: not a timing launch
    for base in (baseline, [*baseline, profile]):
        looks = run_looks(base, lambda k: {"step_time_ms": value, "step_time_mean_ms": value},
                          POLICY, LaunchBudget(1, 10)).looks
        row = next(c for c in looks[0].outcome.comparisons if c.metric == "step_time_ms")
        assert row.p_value == pytest.approx(target, rel=1e-6)
        assert looks[0].outcome.verdict == Verdict.REGRESSED and len(looks) == 1


def test_the_profile_launch_joins_the_verdict_at_the_looks_level_and_only_when_asked() -> None:
    """After the last look the profile launch's metrics (what timing launches do not measure) are
    compared with the others, under the looks' policy: the verdict of the run, in one place."""
    rng = np.random.default_rng(7)
    base = [{**m, "gpu_idle_fraction": 0.10} for m in launches(rng, 5, 0.002)]
    asked: list[Verdict] = []

    def profile(last):
        asked.append(last.verdict)
        return {"gpu_idle_fraction": 0.30}

    run = run_looks(base, lambda k: launches(rng, 1, 0.002)[0], POLICY, LaunchBudget(1, 5), profile=profile)
    last = run.looks[-1].outcome.row("gpu_idle_fraction")
    assert asked == [run.looks[-1].outcome.verdict] and last is not None and last.verdict == Verdict.NO_DATA
    row = run.outcome.row("gpu_idle_fraction")
    assert row is not None and row.current == pytest.approx(0.30) and run.outcome.n_current == 1
    without = run_looks(base, lambda k: launches(rng, 1, 0.002)[0], POLICY, LaunchBudget(1, 5), profile=lambda last: None)
    assert without.outcome is without.looks[-1].outcome
    new = run_looks([], lambda k: launches(rng, 1, 0.002)[0], POLICY, LaunchBudget(1, 5), profile=profile)
    assert new.outcome.verdict == Verdict.NEW and new.noise is None and new.noise_notes("w") == ()

