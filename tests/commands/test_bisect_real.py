"""Finding the culprit end to end under the real nsys (CPU): a project of 12 commits, one slowing the
step by 20 % and a later one by 5 % more. ``perfgate bisect`` names the 20 % commit in at most 5
measured candidates and finds no culprit in an unchanged range; ``perfgate history --changes`` over
the history that ``perfgate run`` recorded at each commit finds the two change points and no other."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from cpu_nvtx import NVTX
from git_repo import git as _git

TINY = """\
import time

{nvtx}FORWARD_S = {forward_s}
REVISION = {revision}   # a change that costs nothing

for step in range(14):
    nvtx.range_push("step")
    nvtx.range_push("forward"); time.sleep(FORWARD_S); nvtx.range_pop()
    nvtx.range_push("backward"); time.sleep(0.010); nvtx.range_pop()
    nvtx.range_pop()
"""
#: forward seconds per commit: 30 ms steps, commit 4 +20 % (36 ms), commit 8 +5 % more (37.8 ms)
FORWARD = [0.020] * 4 + [0.026] * 4 + [0.0278] * 4
SLOWER, SLIGHTLY_SLOWER = 4, 8



@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    repo = tmp_path_factory.mktemp("bisect") / "proj"
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.perfgate]
        warmup_steps = 2
        timeout_s = 120
        """))
    (repo / "workloads" / "__init__.py").write_text("")
    (repo / ".gitignore").write_text(".perfgate/\n")
    _git(repo, "init", "-q")
    commits = []
    for k, forward in enumerate(FORWARD):
        (repo / "workloads" / "tiny.py").write_text(TINY.format(nvtx=NVTX, forward_s=forward, revision=k))
        _git(repo, "add", ".")
        message = {SLOWER: "slow the forward down (+20 % step)", SLIGHTLY_SLOWER: "a little slower (+5 % step)"}
        _git(repo, "commit", "-q", "-m", message.get(k, f"revision {k}"))
        commits.append(_git(repo, "rev-parse", "HEAD"))
    return repo, commits


def _perfgate(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "perfgate", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env={**os.environ, **(env or {})})


def test_bisect_names_the_20_percent_commit_in_at_most_5_candidates(
        project: tuple[Path, list[str]], nsys_path: str, torch_module: object) -> None:
    repo, commits = project
    report = repo.parent / "bisect.md"
    proc = _perfgate("bisect", commits[0], commits[-1], "tiny", "--launches", "2", "--max-launches", "2",
                     "--report", str(report), cwd=repo)
    print(proc.stdout, proc.stderr[-3000:])
    assert proc.returncode == 1, proc.stderr[-3000:]
    culprit = commits[SLOWER]
    assert f"culprit: {culprit[:12]} 'slow the forward down (+20 % step)'" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("  ") and "launches per side" in line]
    assert 2 <= len(rows) <= 5
    verdicts = {row[0]: row[1] for row in rows}
    assert verdicts[commits[-1][:12]] == "REGRESSED" and verdicts[culprit[:12]] == "REGRESSED"
    assert all(v == ("REGRESSED" if commits.index(next(c for c in commits if c.startswith(k))) >= SLOWER
                     else "PASS") for k, v in verdicts.items())
    assert "workloads/tiny.py | 4 ++--" in proc.stdout                      # git diff --stat
    assert "diagnosis (first parent vs culprit" in proc.stdout and "forward" in proc.stdout
    md = report.read_text()
    assert md.startswith("## perfgate bisect: tiny") and f"`{culprit[:12]}`" in md
    # the user's tree untouched, the worktrees gone, the log written and reused by a rerun
    assert _git(repo, "status", "--porcelain") == "" and len(_git(repo, "worktree", "list").splitlines()) == 1
    logs = list((repo / ".perfgate" / "bisect").glob("tiny-*.jsonl"))
    assert len(logs) == 1 and len(logs[0].read_text().splitlines()) == len(rows)
    again = _perfgate("bisect", commits[0], commits[-1], "tiny", "--no-diagnosis", cwd=repo)
    assert again.returncode == 1 and f"culprit: {culprit[:12]}" in again.stdout
    assert f"({len(rows)} measurement(s) reused)" in again.stderr and "0 measured now" in again.stdout


def test_an_unchanged_range_has_no_culprit(project: tuple[Path, list[str]], nsys_path: str,
                                           torch_module: object) -> None:
    repo, commits = project
    proc = _perfgate("bisect", commits[0], commits[SLOWER - 1], "tiny", "--launches", "2", "--max-launches", "2",
                     cwd=repo)
    print(proc.stdout, proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no culprit: BAD is PASS against GOOD, not REGRESSED" in proc.stdout


def test_history_changes_finds_both_change_points_of_real_gated_runs(
        project: tuple[Path, list[str]], nsys_path: str, torch_module: object, tmp_path: Path) -> None:
    repo, commits = project
    env = {"PERFGATE_HISTORY_DIR": str(tmp_path / "history")}
    try:
        for commit in commits:
            _git(repo, "checkout", "-q", commit)
            proc = _perfgate("run", "tiny", "--launches", "2", "--report-dir", str(tmp_path / "r"), cwd=repo, env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        _git(repo, "checkout", "-q", "master" if "master" in _git(repo, "branch") else "main")
    proc = _perfgate("history", "tiny", "--changes", "--format", "json", cwd=repo, env=env)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    print(json.dumps(doc["change_points"], indent=1))
    assert [r["commit"] for r in doc["runs"]] == commits
    points = doc["change_points"]
    assert [(p["before_commit"], p["after_commit"]) for p in points] == [
        (commits[SLOWER - 1], commits[SLOWER]), (commits[SLIGHTLY_SLOWER - 1], commits[SLIGHTLY_SLOWER])]
    first, second = points
    assert first["ci_low"] < 0.20 < first["ci_high"] or 0.15 < first["change"] < 0.25
    assert 0.03 < second["change"] < 0.08 and not first["machine_changed"]
    text = _perfgate("history", "tiny", "--changes", cwd=repo, env=env)
    assert "change points: 2 in 12 run(s)" in text.stdout
