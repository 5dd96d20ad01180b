"""perfgate.gate.change_points on synthetic histories: steps found with their size, none in noise."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from perfgate.gate.change_points import MAX_PVALUE, Run, change_points

MACHINE = {"gpu_model": "H100", "gpu_count": 1, "driver": "550.54", "cuda": "12.4", "torch": "2.4.0",
           "nsys": "2024.2", "machine_class": "nvidia-h100-x1"}


def history(levels: list[float], *, launches: int = 3, cv: float = 0.01, seed: int = 0,
            machines: list[dict] | None = None) -> list[Run]:
    rng = random.Random(seed)
    return [Run(tuple(level * rng.lognormvariate(0.0, cv) for _ in range(launches)), commit=f"c{k:02d}",
                machine=(machines[k] if machines else MACHINE))
            for k, level in enumerate(levels)]


def test_a_step_of_20_percent_and_a_later_5_percent_are_found_with_their_size() -> None:
    levels = [100.0] * 10 + [120.0] * 10 + [126.0] * 10
    found = change_points(history(levels))
    assert [(c.index, c.before_commit, c.after_commit) for c in found] == [(10, "c09", "c10"), (20, "c19", "c20")]
    first, second = found
    assert first.ci_low < 0.20 < first.ci_high and abs(first.change - 0.20) < 0.01
    assert second.ci_low < 0.05 < second.ci_high and abs(second.change - 0.05) < 0.01
    assert first.runs_before == 10 and first.runs_after == 10 and not first.machine_changed
    assert "+20.0 %" in first.describe() or "+19." in first.describe() or "+20." in first.describe()


def test_an_improvement_is_a_change_point_too() -> None:
    found = change_points(history([100.0] * 8 + [80.0] * 8))
    assert [c.index for c in found] == [8] and found[0].change < 0


def test_a_change_below_the_minimum_magnitude_is_no_change_point() -> None:
    assert change_points(history([100.0] * 15 + [102.0] * 15, cv=0.002)) == []
    assert [c.index for c in change_points(history([100.0] * 15 + [102.0] * 15, cv=0.002),
                                           min_magnitude=0.01)] == [15]


def test_pure_noise_rarely_has_a_change_point_over_200_seeds() -> None:
    """False alarms of whole series without any change: the Bonferroni-adjusted test at p < 0.01 keeps
    them near 1 % per series; with the 3 % minimum magnitude and 2 % noise, none at all."""
    alarms = sum(bool(change_points(history([100.0] * 30, seed=seed, cv=0.02))) for seed in range(200))
    assert alarms == 0
    # without the magnitude floor only the test stands between noise and an alarm
    raw = sum(bool(change_points(history([100.0] * 30, seed=seed, cv=0.02), min_magnitude=0.0))
              for seed in range(200))
    print(f"false alarms in 200 noise-only series: {alarms} (min_magnitude 0: {raw})")
    assert raw / 200 <= 3 * MAX_PVALUE


def test_a_machine_change_at_the_step_is_flagged() -> None:
    other = {**MACHINE, "driver": "560.28", "torch": "2.5.0"}
    machines = [MACHINE] * 6 + [other] * 6
    found = change_points(history([100.0] * 6 + [110.0] * 6, machines=machines))
    assert len(found) == 1 and found[0].machine_changed
    assert found[0].machine_changes == {"driver": ("550.54", "560.28"), "torch": ("2.4.0", "2.5.0")}
    assert "machine changed here: driver 550.54 -> 560.28, torch 2.4.0 -> 2.5.0" in found[0].describe()
    assert found[0].to_dict()["machine_changes"] == {"driver": ["550.54", "560.28"], "torch": ["2.4.0", "2.5.0"]}


def test_short_or_empty_histories_have_none_and_bad_settings_are_errors() -> None:
    assert change_points([]) == [] and change_points(history([100.0])) == []
    assert change_points([Run(()), Run((0.0,))]) == []
    with pytest.raises(ValueError, match="max_pvalue"):
        change_points([], max_pvalue=0.0)
    with pytest.raises(ValueError, match="min_magnitude"):
        change_points([], min_magnitude=-1)


# --------------------------------------------------------------------------- perfgate history --changes


def test_history_changes_says_where_a_faked_machine_change_moved_the_step_time(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A history JSONL whose driver and torch change at run 8, with the step time 12 % slower from there:
    one change point, between runs 7 and 8, that names the machine change; the chart marks it."""
    from perfgate.cli import main
    from perfgate.commands.history import FORMAT

    rng = random.Random(3)
    other = {**MACHINE, "driver": "560.28", "torch": "2.5.0"}
    lines = [json.dumps({"format": FORMAT, "version": 1, "time": f"2026-11-24T00:{k:02d}:00+00:00",
                         "commit": f"{k:02d}" + "ab" * 19, "kind": "gate", "verdict": "PASS",
                         "launches": [{"step_time_ms": (50.0 if k < 8 else 56.0) * rng.lognormvariate(0, 0.01)}
                                      for _ in range(3)],
                         "machine": MACHINE if k < 8 else other}) for k in range(14)]
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n[tool.perfgate]\nhistory_dir = 'h'\n")
    (tmp_path / "workloads").mkdir()
    (tmp_path / "h" / "w").mkdir(parents=True)
    (tmp_path / "h" / "w" / "nvidia-h100-x1.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    assert main(["history", "w", "--machine-class", "nvidia-h100-x1", "--changes"]) == 0
    out = capsys.readouterr().out

    assert "change points: 1 in 14 run(s)" in out
    assert "run 8: 07abababab -> 08abababab: step time +1" in out
    assert "machine changed here: driver 550.54 -> 560.28, torch 2.4.0 -> 2.5.0" in out
    assert main(["history", "w", "--machine-class", "nvidia-h100-x1", "--changes", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [point] = doc["change_points"]
    assert point["index"] == 8 and point["machine_changed"] and point["before_commit"].startswith("07")
    assert 0.10 < point["ci_low"] < point["change"] < point["ci_high"] < 0.14
    assert len(doc["runs"]) == 14
    pytest.importorskip("matplotlib")
    assert main(["history", "w", "--machine-class", "nvidia-h100-x1", "--changes", "--chart", "c.png"]) == 0
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_one_slow_launch_beside_the_change_does_not_move_it() -> None:
    """Real gated runs of tests/commands/test_bisect_real.py's project (ms), with one launch slowed by the busy
    machine in the last run before the +5 % commit: the change points stay where the code changed."""
    values = [[30.27, 30.3, 30.28], [30.29, 30.29, 30.3], [30.31, 30.27, 30.3], [30.3, 30.3, 30.29],
              [36.32, 36.37, 36.3], [36.4, 36.31, 36.33], [36.32, 36.32, 36.35], [36.25, 39.06, 36.3],
              [38.11, 38.13, 38.1], [38.12, 38.09, 38.1], [38.03, 38.11, 38.12], [38.11, 38.16, 38.1]]
    found = change_points([Run(tuple(v), f"c{k}") for k, v in enumerate(values)])
    assert [(c.before_commit, c.after_commit) for c in found] == [("c3", "c4"), ("c7", "c8")]
    assert 0.03 < found[1].change < 0.06
