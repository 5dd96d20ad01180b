"""perfgate.commands.ab: interleaving, the sequential decision, and a real A/B of two git commits under nsys."""
from __future__ import annotations

import json
import math
import subprocess
import textwrap
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from perfgate.commands.ab import run_ab
from perfgate.gate.paired_looks import BASE, HEAD, launch_order
from perfgate.errors import ConfigError
from perfgate.records.model import Verdict
from cpu_nvtx import NVTX
from git_repo import git as _git


def test_rounds_alternate_which_side_runs_first() -> None:
    assert launch_order(0, 3) == [(BASE, 0), (HEAD, 0), (HEAD, 1), (BASE, 1), (BASE, 2), (HEAD, 2)]
    assert launch_order(3, 2) == [(HEAD, 3), (BASE, 3), (BASE, 4), (HEAD, 4)]


class FakeLauncher:
    """Records the calls; head is ``slowdown`` slower than base, with seeded 0.5 % launch noise."""

    def __init__(self, slowdown: float = 0.0, seed: int = 0) -> None:
        self.calls: list[tuple[str, int]] = []
        self.slowdown = slowdown
        self.rng = np.random.default_rng(seed)

    def __call__(self, side: str, k: int) -> Mapping[str, float]:
        self.calls.append((side, k))
        f = math.exp(self.rng.normal(0.0, 0.005)) * (1.0 + self.slowdown if side == HEAD else 1.0)
        return {"step_time_ms": 50.0 * f, "step_time_mean_ms": 51.0 * f, "phase.forward.cpu_ms": 20.0 * f,
                "side_marker": 1.0 if side == HEAD else 0.0}


def test_a_slower_head_is_regressed_and_launches_run_in_the_interleaved_order() -> None:
    launcher = FakeLauncher(slowdown=0.10, seed=1)
    result = run_ab(launcher, launches=3, max_launches=9)
    assert launcher.calls == launch_order(0, 3) == result.order
    assert result.outcome.verdict == Verdict.REGRESSED and result.outcome.failed
    assert result.looks == 1 and result.launches_per_side == 3  # no extra launches once decided
    assert [m["side_marker"] for m in result.base] == [0.0] * 3  # each launch landed on its own side
    assert [m["side_marker"] for m in result.head] == [1.0] * 3
    row = result.outcome.row("step_time_ms")
    assert row is not None and row.change == pytest.approx(0.10, abs=0.015)


def test_unchanged_code_passes_in_one_look() -> None:
    result = run_ab(FakeLauncher(0.0, seed=2), launches=3, max_launches=9)
    assert result.outcome.verdict == Verdict.PASS and result.looks == 1 and len(result.order) == 6


def test_inconclusive_results_add_launches_up_to_the_cap() -> None:
    calls: list[tuple[str, int]] = []

    def noisy(side: str, k: int) -> Mapping[str, float]:
        calls.append((side, k))
        v = 100.0 if side == BASE else (80.0 if k % 2 == 0 else 140.0)  # +5.8 % on average, very noisy
        return {"step_time_ms": v, "step_time_mean_ms": v}

    result = run_ab(noisy, launches=2, max_launches=6, add_launches=2)
    assert result.looks == 3
    assert result.history == [Verdict.INCONCLUSIVE] * 3
    assert result.launches_per_side == 6 and len(calls) == 12
    assert calls == launch_order(0, 6)
    assert result.outcome.verdict == Verdict.INCONCLUSIVE and not result.outcome.failed


def test_sequential_launches_settle_a_real_but_noisy_slowdown() -> None:
    """+8 %: the first two rounds are noisy (INCONCLUSIVE); the rounds added afterwards settle it."""
    first = {(BASE, 0): 100.0, (HEAD, 0): 113.0, (HEAD, 1): 103.0, (BASE, 1): 103.0}
    rng = np.random.default_rng(3)

    def launcher(side: str, k: int) -> Mapping[str, float]:
        v = first.get((side, k)) or 100.0 * math.exp(rng.normal(0.0, 0.01)) * (1.08 if side == HEAD else 1.0)
        return {"step_time_ms": v, "step_time_mean_ms": v}

    result = run_ab(launcher, launches=2, max_launches=12, add_launches=2)
    assert result.history[0] == Verdict.INCONCLUSIVE
    assert result.outcome.verdict == Verdict.REGRESSED
    assert 2 < result.launches_per_side < 12 and result.looks == len(result.history) > 1
    assert result.history[:-1] == [Verdict.INCONCLUSIVE] * (result.looks - 1)


def test_bad_launch_counts_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="--launches"):
        run_ab(FakeLauncher(), launches=0)
    with pytest.raises(ConfigError, match="--max-launches"):
        run_ab(FakeLauncher(), launches=3, max_launches=2)


def test_a_launcher_error_propagates() -> None:
    from perfgate.errors import WorkloadFailedError

    def broken(side: str, k: int) -> Mapping[str, float]:
        raise WorkloadFailedError("workload tiny exited with code 1")

    with pytest.raises(WorkloadFailedError):
        run_ab(broken, launches=1)


# --------------------------------------------------------------------------- real git + nsys

TINY = """\
import time

{nvtx}FORWARD_S = {forward_s}

for step in range(10):
    nvtx.range_push("step")
    nvtx.range_push("data_load"); time.sleep(0.002); nvtx.range_pop()
    nvtx.range_push("forward"); time.sleep(FORWARD_S); nvtx.range_pop()
    nvtx.range_push("backward"); time.sleep(0.006); nvtx.range_pop()
    nvtx.range_push("optimizer"); time.sleep(0.001); nvtx.range_pop()
    nvtx.range_pop()
"""



@pytest.fixture()
def two_commit_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.perfgate]
        warmup_steps = 2
        timeout_s = 120
        """))
    (repo / "workloads" / "__init__.py").write_text("")
    # a forward of 20 ms, so that a sleep's overshoot on a busy core (a millisecond or two) is a few per cent
    # of it: with 4 ms, one base launch's overshoot left the forward's paired test of 3 pairs short of
    # significance (its step time REGRESSED alone) in 1 of 5 two-process CI runs
    (repo / "workloads" / "tiny.py").write_text(TINY.format(nvtx=NVTX, forward_s=0.020))
    (repo / ".gitignore").write_text(".perfgate/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "workloads" / "tiny.py").write_text(TINY.format(nvtx=NVTX, forward_s=0.060))  # head: +40 ms in forward
    _git(repo, "commit", "-q", "-am", "slower forward")
    return repo


def test_real_ab_of_two_commits_finds_the_slower_forward(
    two_commit_repo: Path, nsys_path: str, torch_module: object, capsys: pytest.CaptureFixture[str]
) -> None:
    from perfgate.cli import main

    code = main(["ab", "tiny", "--root", str(two_commit_repo), "--base", "HEAD~1", "--head", "HEAD",
                 "--launches", "3", "--max-launches", "3", "--format", "json"])
    out = capsys.readouterr()
    assert code == 1, out.err
    result = json.loads(out.out)["tiny"]
    assert result["verdict"] == "REGRESSED"
    assert result["summary"].startswith("REGRESSED: phase.forward.cpu_ms")
    assert result["order"] == ["base-0", "head-0", "head-1", "base-1", "base-2", "head-2"]
    rows = {r["metric"]: r for r in result["comparisons"]}
    fwd = rows["phase.forward.cpu_ms"]
    assert fwd["verdict"] == "REGRESSED" and fwd["p_value"] < 0.01
    assert 30.0 < (fwd["current"] - fwd["baseline"]) < 60.0  # the injected +40 ms per step
    assert rows["phase.backward.cpu_ms"]["verdict"] != "REGRESSED"  # only the changed phase is blamed
    assert [m["phase.forward.cpu_ms"] < 30.0 for m in result["base"]] == [True] * 3
    # the temporary worktrees are gone again
    listed = subprocess.run(["git", "-C", str(two_commit_repo), "worktree", "list"], capture_output=True, text=True)
    assert len(listed.stdout.strip().splitlines()) == 1


def test_unknown_base_ref_is_a_clear_error(two_commit_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfgate.cli import main

    code = main(["ab", "tiny", "--root", str(two_commit_repo), "--base", "no-such-ref", "--launches", "1"])
    assert code == 2
    assert "no-such-ref" in capsys.readouterr().err
