"""perfgate.gate.paired_looks and the paired test: interleaved pairs of base and head launches,
tested on their differences, with looks that keep the whole run's false-alarm chance at alpha."""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import pytest
from scipy import stats as sps

from perfgate.gate.compare import ComparePolicy, compare_launches
from perfgate.gate.paired_looks import (
    BASE, HEAD, credited, interval_ratio, launch_order, pair_looks, paired_look_level, run_pairs,
)
from perfgate.gate.statistics import paired_shift_test, shift_test
from perfgate.records.model import Verdict
from perfgate.errors import ConfigError
from layout import REPO


def test_the_order_is_balanced_base_head_then_head_base() -> None:
    assert launch_order(0, 4) == [(BASE, 0), (HEAD, 0), (HEAD, 1), (BASE, 1), (BASE, 2), (HEAD, 2), (HEAD, 3), (BASE, 3)]
    assert launch_order(1, 1) == [(HEAD, 1), (BASE, 1)]


def test_the_paired_test_is_scipys_paired_t_test_on_the_logs() -> None:
    rng = np.random.default_rng(5)
    base = 100 * np.exp(rng.normal(0, 0.05, 7))
    head = base * 1.03 * np.exp(rng.normal(0, 0.01, 7))
    test = paired_shift_test(base, head, alpha=0.01)
    assert test is not None and test.method == "paired" and test.df == 6
    ref = sps.ttest_rel(np.log(head), np.log(base), alternative="greater")
    assert test.p_increase == pytest.approx(ref.pvalue, rel=1e-9)
    assert test.estimate == pytest.approx(float(np.mean(np.log(head) - np.log(base))))
    assert test.ci_low < math.log(1.03) < test.ci_high


def test_pairing_removes_what_both_launches_of_a_pair_shared() -> None:
    """Each pair ran in another state of the machine (+-20 %), the head is 4 % slower in every
    pair: the pairs see it at once, the same launches unpaired cannot."""
    load = np.array([1.0, 1.25, 0.85, 1.1, 1.3, 0.9])
    base = 50.0 * load
    head = 52.0 * load * np.array([1.002, 0.998, 1.001, 0.999, 1.0, 1.001])
    paired = paired_shift_test(base, head, alpha=0.01)
    unpaired = shift_test(base, head, alpha=0.01)
    assert paired is not None and unpaired is not None
    assert paired.p_increase < 1e-6 and unpaired.p_increase > 0.2
    ratio = interval_ratio(list(base), list(head), 0.01)
    assert ratio is not None and ratio < 0.05


def test_pairs_need_two_and_equal_sides() -> None:
    assert paired_shift_test([1.0], [2.0]) is None
    assert paired_shift_test([1.0, 2.0], [1.1, 2.2]) is None     # the same ratio in every pair: no spread
    with pytest.raises(ValueError):
        paired_shift_test([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        compare_launches([{"step_time_ms": 1.0}], [{"step_time_ms": 1.0}] * 2, paired=True)


def test_a_metric_missing_in_one_launch_leaves_out_only_that_pair() -> None:
    base = [{"step_time_ms": 10.0, "phase.forward.cpu_ms": 4.0}, {"step_time_ms": 12.0},
            {"step_time_ms": 11.0, "phase.forward.cpu_ms": 4.4}]
    head = [{"step_time_ms": 10.1, "phase.forward.cpu_ms": 4.1}, {"step_time_ms": 12.2, "phase.forward.cpu_ms": 9.9},
            {"step_time_ms": 11.0, "phase.forward.cpu_ms": 4.5}]
    outcome = compare_launches(base, head, paired=True)
    forward = outcome.row("phase.forward.cpu_ms")
    assert forward is not None and forward.current == pytest.approx(math.sqrt(4.1 * 4.5))   # 9.9 had no partner
    assert outcome.summary.endswith("[3 interleaved pairs]")


def test_the_look_level_holds_the_whole_runs_false_alarm_rate() -> None:
    """With no change, the chance that any of the looks 3..10 rejects at the level is alpha,
    checked on fresh draws with scipy's own paired test (not the simulation behind the level)."""
    looks = pair_looks(3, 10)
    alpha = 0.05
    level = paired_look_level(alpha, looks)
    assert level < alpha / 2 and level > alpha / len(looks)        # stricter than one look, kinder than Bonferroni
    rng = np.random.default_rng(99)
    runs = 20_000
    d = rng.normal(0.0, 0.07, (runs, 10))
    rejected = np.zeros(runs, dtype=bool)
    for n in looks:
        p = sps.ttest_1samp(d[:, :n], 0.0, axis=1, alternative="greater").pvalue
        rejected |= p < level
    assert rejected.mean() == pytest.approx(alpha, rel=0.15)
    assert paired_look_level(alpha, (5,)) == alpha


def _launcher(shift: float, pair_sd: float, sd: float, seed: int):
    rng = np.random.default_rng(seed)
    state = [math.exp(rng.normal(0, pair_sd)) for _ in range(40)]
    calls: list[tuple[str, int]] = []

    def launch(side: str, k: int) -> Mapping[str, float]:
        calls.append((side, k))
        v = 40.0 * state[k] * math.exp(rng.normal(0, sd)) * (1 + shift if side == HEAD else 1.0)
        return {"step_time_ms": v, "step_time_mean_ms": v * 1.01}

    return launch, calls


def test_unchanged_code_on_a_machine_whose_load_changes_from_pair_to_pair_passes() -> None:
    launch, calls = _launcher(0.0, pair_sd=0.15, sd=0.01, seed=3)
    run = run_pairs(launch, ComparePolicy(), pair_looks(3, 10))
    assert run.outcome.verdict == Verdict.PASS and run.pairs == 3 and run.stopped == "decided"
    assert calls == launch_order(0, 3) == run.order


def test_a_ten_percent_slowdown_under_the_same_load_is_regressed() -> None:
    launch, _ = _launcher(0.10, pair_sd=0.15, sd=0.02, seed=4)
    run = run_pairs(launch, ComparePolicy(), pair_looks(3, 10))
    row = run.outcome.row("step_time_ms")
    assert run.outcome.verdict == Verdict.REGRESSED and row is not None
    assert row.change == pytest.approx(0.10, abs=0.03)


def test_an_unclear_run_takes_pairs_up_to_the_last_look() -> None:
    calls: list[tuple[str, int]] = []

    def noisy(side: str, k: int) -> Mapping[str, float]:
        calls.append((side, k))
        v = 100.0 if side == BASE else (140.0 if k % 2 == 0 else 80.0)   # +10 to +16 %, very noisy
        return {"step_time_ms": v, "step_time_mean_ms": v}

    run = run_pairs(noisy, ComparePolicy(), (3, 5, 7))
    assert [look.pairs for look in run.looks] == [3, 5, 7]
    assert [look.outcome.verdict for look in run.looks] == [Verdict.INCONCLUSIVE] * 3
    assert run.pairs == 7 and run.stopped == "7 pairs, the most" and calls == launch_order(0, 7)


@pytest.mark.parametrize("stored", [Verdict.INCONCLUSIVE, Verdict.REGRESSED, Verdict.PASS])
def test_a_speed_up_only_the_pairs_found_is_not_credited(stored: Verdict) -> None:
    """Every head launch 13 % faster than its base, as three pairs of the zoo's unchanged vae read on
    an H200 after its stored baseline had found it +10.8 % slower: the pairs found no regression
    (PASS), but the speed-up is not the pull request's to claim."""
    base = [{"step_time_ms": v, "step_time_mean_ms": v} for v in (8.37, 9.10, 8.05)]
    head = [{k: v * f for k, v in b.items()} for b, f in zip(base, (0.865, 0.87, 0.862))]
    pairs = compare_launches(base, head, ComparePolicy(), paired=True)
    assert pairs.verdict == Verdict.IMPROVED
    taken = credited(pairs, stored)
    why = f"faster in the pairs, not credited: the stored baseline found no speed-up ({stored})"
    assert taken.verdict == Verdict.PASS and taken.summary == f"PASS{pairs.summary[len('IMPROVED'):]}; {why}"
    assert [(r.metric, r.verdict) for r in taken.comparisons] == [
        (r.metric, Verdict.PASS if r.verdict == Verdict.IMPROVED else r.verdict) for r in pairs.comparisons]
    assert all(why in r.note for r in taken.comparisons if r.metric.startswith("step_time"))
    assert (taken.paired, taken.n_current, taken.within) == (pairs.paired, pairs.n_current, pairs.within)


def test_a_speed_up_both_found_and_any_other_verdict_are_the_pairs_own() -> None:
    base = [{"step_time_ms": v} for v in (8.37, 9.10, 8.05)]
    faster = compare_launches(base, [{"step_time_ms": b["step_time_ms"] * 0.86} for b in base], ComparePolicy(),
                              paired=True)
    slower = compare_launches(base, [{"step_time_ms": b["step_time_ms"] * 1.3} for b in base], ComparePolicy(),
                              paired=True)
    assert (faster.verdict, slower.verdict) == (Verdict.IMPROVED, Verdict.REGRESSED)
    assert credited(faster, Verdict.IMPROVED) is faster
    assert all(credited(slower, stored) is slower for stored in Verdict)


def test_the_budget_stops_after_a_look() -> None:
    launch, _ = _launcher(0.05, pair_sd=0.0, sd=0.30, seed=12)
    ticks = iter(range(0, 1000, 10))
    run = run_pairs(launch, ComparePolicy(), (3, 4, 5, 6), budget_s=5.0, clock=lambda: float(next(ticks)))
    assert run.pairs == 3 and (run.stopped == "budget_s (5 s) spent" or run.stopped == "decided")


def test_bad_pair_counts_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="at least 1 pair"):
        pair_looks(0, 3)
    with pytest.raises(ConfigError, match="the most pairs"):
        pair_looks(4, 3)
    assert pair_looks(3, 3) == (3,)
    assert pair_looks(3, 9, 3) == (3, 6, 9)


def _pools(name: str) -> tuple[Callable[..., tuple[Verdict, int, Verdict, int]], dict]:
    """benchmarks/confirm_pools.py's ``trial`` (one resampled gate run) and the pools of
    docs/measurements/data/``name``."""
    import json
    import sys
    from pathlib import Path

    repo = REPO
    sys.path.insert(0, str(repo / "benchmarks"))
    try:
        from confirm_pools import trial
    finally:
        sys.path.remove(str(repo / "benchmarks"))
    return trial, json.loads((repo / "docs" / "measurements" / "data" / name).read_text())


def test_on_a_shared_h200_the_confirmation_ends_the_false_alarms_and_keeps_the_regression() -> None:
    """Launches measured on an H200 while nanoGPT (GPT-2 small) trained on the same GPU
    (docs/measurements/confirmation.md): the stored baseline, recorded with the host quiet, fails
    unchanged code every time; the pairs with the base never do, and still fail the pull request."""
    trial, pools = _pools("confirm-pools-h200.json")
    rng = np.random.default_rng(7)
    aa = [trial(pools, "base2", rng, 10) for _ in range(40)]
    pr = [trial(pools, "head", rng, 10) for _ in range(40)]
    assert sum(stored == Verdict.REGRESSED for stored, *_ in aa) == 40
    assert sum(final == Verdict.REGRESSED for _, _, final, _ in aa) == 0
    assert sum(final == Verdict.REGRESSED for _, _, final, _ in pr) >= 36
    assert all(launches <= 10 + 2 * 10 for *_, launches in pr)


def test_a_ten_percent_pull_request_on_a_shared_h200_is_caught_within_ten_pairs() -> None:
    """Call 3 of 2026-11-29 (docs/measurements/confirmation.md): word_language_model in one lane with
    nanoGPT on the same GPU and timm_ddp in the other lane; the pull request busy-waits 415 us a step
    (+11.3 % on the busy host). The stored baseline, recorded before the neighbour started, fails
    unchanged code; the pairs fail the pull request and not the unchanged code."""
    trial, pools = _pools("confirm-pools-h200-wlm-c.json")
    rng = np.random.default_rng(11)
    aa = [trial(pools, "base2", rng, 10) for _ in range(40)]
    pr = [trial(pools, "head", rng, 10) for _ in range(40)]
    assert sum(stored == Verdict.REGRESSED for stored, *_ in aa) == 40
    assert sum(final == Verdict.REGRESSED for _, _, final, _ in aa) <= 1
    assert sum(final == Verdict.REGRESSED for _, _, final, _ in pr) >= 36
    assert trial(pools, "head", None, 10)[2] == Verdict.REGRESSED      # the rounds as they ran
    assert trial(pools, "base2", None, 10)[2] == Verdict.PASS


def test_looks_from_two_pairs_compare_the_sides_unpaired() -> None:
    """Two pairs leave a paired test one degree of freedom: a clear +20 % with 1 % noise is not
    significant there (t must pass 31.8), and the same four launches compared unpaired find it."""
    steps = {("base", 0): 100.0, ("head", 0): 121.0, ("head", 1): 119.0, ("base", 1): 101.5}

    def launch(side: str, k: int) -> Mapping[str, float]:
        return {"step_time_ms": steps[(side, k)], "step_time_mean_ms": steps[(side, k)]}

    run = run_pairs(launch, ComparePolicy(), (2,))
    assert run.outcome.verdict == Verdict.REGRESSED and run.outcome.summary.endswith("[2 vs 2 launches]")
    paired = compare_launches([{"step_time_ms": 100.0, "step_time_mean_ms": 100.0},
                               {"step_time_ms": 101.5, "step_time_mean_ms": 101.5}],
                              [{"step_time_ms": 121.0, "step_time_mean_ms": 121.0},
                               {"step_time_ms": 119.0, "step_time_mean_ms": 119.0}], paired=True)
    assert paired.verdict == Verdict.INCONCLUSIVE
