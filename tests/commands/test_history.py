"""perfgate.commands.history: the file a run appends to, and what ``perfgate history`` says about bad input.
The end-to-end path (runs under the real nsys appending, the trend, the chart, a baseline refreshed
from the passing runs) is in tests/programs/test_example_project.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.commands.history import FORMAT, history_path, read_history
from perfgate.errors import PerfgateError


def _line(verdict: str, steps: list[float]) -> str:
    return json.dumps({"format": FORMAT, "version": 1, "time": "2026-11-24T00:00:00+00:00", "commit": "abc",
                       "kind": "gate", "verdict": verdict, "launches": [{"step_time_ms": s} for s in steps]})


def test_the_history_file_sits_beside_the_baselines_layout(tmp_path: Path) -> None:
    assert history_path(tmp_path, "w", "cpu-x86_64") == tmp_path / "w" / "cpu-x86_64.jsonl"
    assert history_path(tmp_path, "w", "cpu-x86_64", "amp") == tmp_path / "w" / "amp" / "cpu-x86_64.jsonl"
    with pytest.raises(PerfgateError, match="workload"):
        history_path(tmp_path, "../w", "cpu-x86_64")


def test_an_entry_is_the_geometric_mean_of_its_launches_and_a_bad_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text(_line("PASS", [10.0, 40.0]) + "\n\n" + _line("REGRESSED", [30.0]) + "\n")
    first, second = read_history(path)
    assert first.step_time_ms == pytest.approx(20.0) and second.verdict == "REGRESSED"
    path.write_text(_line("PASS", [10.0]) + "\n{oops\n")
    with pytest.raises(PerfgateError, match=rf"^{path}:2: not a JSON line"):
        read_history(path)
    path.write_text(_line("PASS", [float("nan")]).replace("NaN", "-1") + "\n")
    with pytest.raises(PerfgateError, match=rf"^{path}:1: launches\[0\].step_time_ms: expected a finite, non-negative"):
        read_history(path)


def test_the_command_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    (tmp_path / "workloads").mkdir()
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n")
    monkeypatch.chdir(tmp_path)
    assert main(["history", "w"]) == 2
    assert "no history_dir: set history_dir in [tool.perfgate] (or PERFGATE_HISTORY_DIR)" in capsys.readouterr().err
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'demo'\n[tool.perfgate]\nhistory_dir = 'h'\n")
    (tmp_path / "h" / "w").mkdir(parents=True)
    (tmp_path / "h" / "w" / "nvidia-a100-x8.jsonl").write_text(_line("PASS", [5.0]) + "\n")
    assert main(["history", "w", "--machine-class", "cpu-x86_64"]) == 2
    assert "no history for w on cpu-x86_64; histories there: nvidia-a100-x8 (--machine-class)" in capsys.readouterr().err
    assert main(["history", "w", "--machine-class", "nvidia-a100-x8", "--last", "0"]) == 2
    assert "option --last: expected a whole number >= 1, got 0" in capsys.readouterr().err
    assert main(["history", "w", "--machine-class", "nvidia-a100-x8"]) == 0
    assert "PASS" in capsys.readouterr().out
