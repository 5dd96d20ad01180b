"""perfgate.commands.calibrate: the pure evaluation of A/A and injected pools, and the pool runner's schedule."""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from perfgate.commands.calibrate import evaluate_pools, run_pools
from perfgate.commands.calibration_file import AA
from perfgate.gate.compare import ComparePolicy
from perfgate.gate.statistics import coefficient_of_variation, disjoint_splits, upper_bound_95


def _pool(rng: np.random.Generator, n: int, *, cv: float, slowdown: float = 0.0) -> list[dict[str, float]]:
    out = []
    for _ in range(n):
        f = math.exp(rng.normal(0.0, cv))
        step = 100.0 * f * (1.0 + slowdown)
        out.append({"step_time_ms": step, "step_time_mean_ms": step * 1.01,
                    "phase.forward.cpu_ms": 30.0 * f + 100.0 * slowdown,
                    "phase.backward.cpu_ms": 50.0 * math.exp(rng.normal(0.0, cv))})
    return out


def test_rule_of_three_upper_bound() -> None:
    assert upper_bound_95(0, 300) == pytest.approx(1 - 0.05 ** (1 / 300))
    assert upper_bound_95(0, 300) == pytest.approx(0.00994, abs=1e-4)
    assert upper_bound_95(0, 100) == pytest.approx(0.0295, abs=1e-3)
    assert upper_bound_95(5, 1000) == pytest.approx(0.0105, abs=5e-4)
    assert upper_bound_95(3, 3) == 1.0


def test_cv_is_sample_sd_over_mean() -> None:
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert coefficient_of_variation([5.0]) == 0.0


def test_aa_splits_never_share_a_launch_and_are_all_enumerated_when_few() -> None:
    rng = np.random.default_rng(0)
    splits = disjoint_splits(6, 6, 2, same_pool=True, max_comparisons=1000, rng=rng)
    assert len(splits) == math.comb(6, 2) * math.comb(4, 2) == 90
    assert all(not set(b) & set(h) for b, h in splits)
    assert len(set(splits)) == 90
    sampled = disjoint_splits(20, 20, 5, same_pool=True, max_comparisons=50, rng=rng)
    assert len(sampled) == 50 and len(set(sampled)) == 50
    assert all(not set(b) & set(h) and len(b) == len(h) == 5 for b, h in sampled)
    assert disjoint_splits(5, 5, 3, same_pool=True, max_comparisons=10, rng=rng) == []


def test_known_pools_give_no_false_alarms_and_full_detection_of_ten_percent() -> None:
    rng = np.random.default_rng(42)
    pools = {AA: _pool(rng, 20, cv=0.01), "+10%": _pool(rng, 10, cv=0.01, slowdown=0.10),
             "+1%": _pool(rng, 10, cv=0.01, slowdown=0.01)}
    table = evaluate_pools(pools, 3, ComparePolicy(), max_comparisons=300,
                           injected={"+10%": 0.10, "+1%": 0.01}, phase="forward", launch_wall_s=20.0)
    aa = table.false_alarms
    assert aa.comparisons == 300 and aa.regressed == 0 and aa.rate == 0.0
    assert aa.upper_95 == pytest.approx(upper_bound_95(0, 300))
    rows = {r.pool: r for r in table.detection}
    big, small = rows["+10%"], rows["+1%"]
    assert big.comparisons == 300 and big.rate == 1.0 and big.phase_named == 300
    assert big.realized_change == pytest.approx(0.10, abs=0.01)
    assert small.rate == 0.0  # 1 % is inside the 5 % tolerance: never a failure
    assert table.cv[AA]["step_time_ms"] == pytest.approx(0.01, abs=0.005)
    assert table.gpu_s_per_comparison == 120.0
    md = table.to_markdown()
    assert "| aa | - |" in md and "| +10% | +10.0% |" in md and "100.0%" in md


def test_noisy_machine_shows_inconclusive_instead_of_false_alarms() -> None:
    rng = np.random.default_rng(7)
    pools = {AA: _pool(rng, 16, cv=0.04), "+6%": _pool(rng, 8, cv=0.04, slowdown=0.06)}
    table = evaluate_pools(pools, 2, max_comparisons=200, injected={"+6%": 0.06})
    assert table.false_alarms.rate <= 0.02
    row = table.detection[0]
    assert row.inconclusive > 0 and row.rate < 0.5  # k = 2 cannot confirm 6 % against 4 % noise


def test_too_small_aa_pool_is_reported_not_crashed() -> None:
    table = evaluate_pools({AA: _pool(np.random.default_rng(1), 5, cv=0.01)}, 3)
    assert table.false_alarms.comparisons == 0 and "at least 6" in table.notes[0]


def test_run_pools_sizes_injection_from_the_aa_median_and_interleaves_pools() -> None:
    calls: list[tuple[str, tuple[str, ...]]] = []

    def launch(label: str, extra: Sequence[str]) -> tuple[Mapping[str, float], float]:
        calls.append((label, tuple(extra)))
        slow = float(extra[3]) if extra else 0.0
        return {"step_time_ms": 80.0 + slow, "step_time_mean_ms": 80.0 + slow}, 12.0

    pools, injected, walls = run_pools(launch, launches=3, inject_pcts=[2, 5], phase="forward")
    assert injected == {"+2%": 0.02, "+5%": 0.05}
    assert calls[0] == ("aa-0", ())
    assert ("+2%-0", ("--slow-phase", "forward", "--slow-ms", "1.600")) in calls
    assert ("+5%-0", ("--slow-phase", "forward", "--slow-ms", "4.000")) in calls
    assert [c[0] for c in calls] == ["aa-0", "+2%-0", "+5%-0", "+5%-1", "+2%-1", "aa-1", "aa-2", "+2%-2", "+5%-2"]
    assert {k: len(v) for k, v in pools.items()} == {AA: 3, "+2%": 3, "+5%": 3}
    assert len(walls) == 9
    json.dumps(pools)  # what calibration.json stores


@pytest.mark.slow   # 20 s: the k = 3 table of 140 A/A and 5 x 500 injected comparisons
def test_h100_calibration_pools_reproduce_the_published_table(tmp_path, repo_root) -> None:
    """The committed H100 pools (28 launches of transformer_lm) give the README's k = 3 row with the
    gate's default policy, and --from-json takes the injected phase from the file."""
    from perfgate.cli import main

    pools = repo_root / "docs" / "calibration" / "transformer_lm-h100-pools.json"
    assert main(["calibrate", "transformer_lm", "--root", str(repo_root), "--from-json", str(pools),
                 "--k", "3", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "calibration.json").read_text())
    table = doc["tables"][0]
    assert doc["phase"] == "data_load"
    assert (table["false_alarms"]["comparisons"], table["false_alarms"]["regressed"]) == (140, 0)
    for row in table["detection"]:
        assert row["regressed"] == row["comparisons"] == row["phase_named"] == 500, row


def test_evaluate_sequential_runs_the_adaptive_gate_over_the_pools() -> None:
    """A steady A/A pool raises no alarm and decides after one launch; a +10 % pool is caught every
    time; too small an A/A pool for a baseline plus the budget is refused."""
    import numpy as np

    from perfgate.commands.calibrate import evaluate_sequential
    from perfgate.errors import ConfigError
    from perfgate.gate.sequential_looks import LaunchBudget

    rng = np.random.default_rng(11)

    def pool(n: int, change: float) -> list[dict[str, float]]:
        return [{"step_time_ms": v, "step_time_mean_ms": v}
                for v in 100.0 * (1 + change) * np.exp(rng.normal(0.0, 0.003, n))]

    table = evaluate_sequential({"aa": pool(10, 0.0), "+10%": pool(6, 0.10)}, 5, LaunchBudget(1, 5),
                                runs=100, injected={"+10%": 0.10})
    aa, slow = table.rows
    assert (aa.pool, aa.regressed, aa.comparisons, aa.realized_change) == ("aa", 0, 100, 0.0)
    assert (slow.regressed, slow.injected_fraction) == (100, 0.10)
    assert table.mean_launches == {"aa": 1.0, "+10%": 1.0}
    assert "| aa | - | +0.0% | 100 | 0 |" in table.to_markdown()
    with pytest.raises(ConfigError, match="need 10"):
        evaluate_sequential({"aa": pool(9, 0.0)}, 5, LaunchBudget(1, 5))
