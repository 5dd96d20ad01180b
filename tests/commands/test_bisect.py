"""perfgate bisect: the search on fake measurements, the log that makes it resumable, the report,
and the errors; the end-to-end run under the real nsys is in tests/commands/test_bisect_real.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.commands.bisect_report import render_markdown_report, render_text
from perfgate.commands.bisect_search import (
    Measurement, append_log, bisect_commits, next_candidate, read_log)
from perfgate.errors import PerfgateError
from git_repo import git as _git

COMMITS = [f"{k:02d}" + "0" * 38 for k in range(1, 12)]   # 11 candidates after GOOD, the last is BAD


def fake(first_bad: int, verdicts: dict[int, str] | None = None) -> tuple[list[str], object]:
    measured: list[str] = []

    def measure(commit: str) -> Measurement:
        measured.append(commit)
        k = COMMITS.index(commit)
        verdict = (verdicts or {}).get(k) or ("REGRESSED" if k >= first_bad else "PASS")
        regressed = verdict == "REGRESSED"
        return Measurement(commit, verdict, step_change=0.2 if regressed else 0.0, launches_per_side=3,
                           step_ci=(0.1, 0.3) if regressed else (-0.05, 0.04))

    return measured, measure


@pytest.mark.parametrize("first_bad", range(len(COMMITS)))
def test_every_culprit_position_is_found_in_at_most_five_measurements(first_bad: int) -> None:
    measured, measure = fake(first_bad)
    outcome = bisect_commits(COMMITS, measure)
    assert outcome.culprit == COMMITS[first_bad]
    assert measured[0] == COMMITS[-1] and len(measured) <= 5


def test_bad_not_regressed_is_no_culprit_after_one_measurement() -> None:
    measured, measure = fake(99)
    outcome = bisect_commits(COMMITS, measure)
    assert outcome.no_culprit and outcome.culprit is None and measured == [COMMITS[-1]]
    assert outcome.reason == "BAD is PASS against GOOD, not REGRESSED"
    assert bisect_commits([], measure).no_culprit


def test_an_inconclusive_commit_is_skipped_and_its_neighbour_measured() -> None:
    assert next_candidate(-1, 10, set()) == 4 and next_candidate(-1, 10, {4}) == 3
    assert next_candidate(-1, 10, {3, 4}) == 5 and next_candidate(2, 4, {3}) is None
    measured, measure = fake(3, {4: "INCONCLUSIVE"})
    outcome = bisect_commits(COMMITS, measure)
    assert outcome.culprit == COMMITS[3] and COMMITS[4] in outcome.skipped
    assert measured[:3] == [COMMITS[-1], COMMITS[4], COMMITS[3]]


def test_all_skipped_or_budget_spent_leaves_the_suspects() -> None:
    measured, measure = fake(3, {k: "INCONCLUSIVE" for k in range(10)})
    outcome = bisect_commits(COMMITS, measure)
    assert not outcome.done and outcome.suspects == tuple(COMMITS) and "skipped" in outcome.reason
    calls = iter([True, True])
    outcome = bisect_commits(COMMITS, fake(3)[1], may_measure=lambda: next(calls, False))
    assert not outcome.done and "budget" in outcome.reason and outcome.suspects == tuple(COMMITS[:5])


def test_the_log_is_reused_by_a_rerun_of_the_same_range_only(tmp_path: Path) -> None:
    log = tmp_path / "b.jsonl"
    measured, measure = fake(3)

    def logged(commit: str) -> Measurement:
        found = measure(commit)
        append_log(log, "g" * 40, "b" * 40, "tiny", found)
        return found

    first = bisect_commits(COMMITS, logged)
    append_log(log, "g" * 40, "c" * 40, "tiny", Measurement(COMMITS[0], "REGRESSED"))   # another range
    known = read_log(log, "g" * 40, "b" * 40, "tiny")
    assert set(known) == set(measured) and all(m.reused for m in known.values())
    assert {c: (m.verdict, m.step_ci) for c, m in known.items()} == {   # the interval read back
        m.commit: (m.verdict, m.step_ci) for m in first.measured}
    assert {m.step_ci for m in known.values()} == {(0.1, 0.3), (-0.05, 0.04)}
    again, measure_again = fake(3)
    second = bisect_commits(COMMITS, measure_again, known=known)
    assert again == [] and second.culprit == first.culprit and all(m.reused for m in second.measured)
    assert read_log(tmp_path / "none.jsonl", "g", "b", "tiny") == {}
    log.write_text(log.read_text() + "{oops\n")
    with pytest.raises(PerfgateError, match=rf"^{log}:{len(measured) + 2}: not a perfgate bisect log line"):
        read_log(log, "g" * 40, "b" * 40, "tiny")


def test_the_reports_name_each_candidate_with_its_verdict_and_the_culprit() -> None:
    _, measure = fake(3)
    outcome = bisect_commits(COMMITS, measure)
    subjects = {c: f"change {k} | `x`" for k, c in enumerate(COMMITS)}
    text = render_text("tiny", "g" * 40, COMMITS[-1], outcome, subjects, " f.py | 2 +-", "REGRESSED: step")
    assert f"culprit: {COMMITS[3][:12]} 'change 3 | `x`'" in text
    assert f"  {COMMITS[4][:12]}  REGRESSED      +20.0 %" in text and "3 launches per side" in text
    assert "(3 launches per side) (95 % CI +10.0 .. +30.0 %)" in text and "(95 % CI -5.0 .. +4.0 %)" in text
    md = render_markdown_report("tiny", "g" * 40, COMMITS[-1], outcome, subjects, " f.py | 2 +-", "REGRESSED")
    assert md.startswith("## perfgate bisect: tiny") and "| REGRESSED | +20.0 % | +10.0 .. +30.0 % | change 4 \\| " in md
    assert "| PASS | +0.0 % | -5.0 .. +4.0 % |" in md
    assert "```text\n f.py | 2 +-\n```" in md


# --------------------------------------------------------------------------- the command's errors



@pytest.fixture()
def small_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "proj"
    (repo / "workloads").mkdir(parents=True)
    (repo / "pyproject.toml").write_text("[tool.perfgate]\nwarmup_steps = 2\n")
    (repo / "workloads" / "__init__.py").write_text("")
    (repo / "workloads" / "tiny.py").write_text("print('v0')\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "v0")
    for k in (1, 2):
        (repo / "workloads" / "tiny.py").write_text(f"print('v{k}')\n")
        _git(repo, "commit", "-q", "-am", f"v{k}")
    return repo


@pytest.mark.parametrize(("good", "bad", "message"), [
    ("no-such-ref", "HEAD", "argument GOOD: unknown git ref 'no-such-ref'"),
    ("HEAD~2", "nope", "argument BAD: unknown git ref 'nope'"),
    ("HEAD", "HEAD~2", "argument GOOD: 'HEAD' ("),
])
def test_bad_refs_are_errors_naming_the_argument(small_repo: Path, good: str, bad: str, message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from perfgate.cli import main

    assert main(["bisect", good, bad, "tiny", "--root", str(small_repo)]) == 2
    err = capsys.readouterr().err
    assert message in err, err
    if good == "HEAD":
        assert "is not an ancestor of BAD 'HEAD~2'" in err


def test_bad_options_are_errors_naming_them(small_repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfgate.cli import main

    assert main(["bisect", "HEAD~2", "HEAD", "tiny", "--root", str(small_repo), "--budget-s", "0"]) == 2
    assert "option --budget-s: must be > 0" in capsys.readouterr().err
    assert main(["bisect", "HEAD~2", "HEAD", "tiny", "--root", str(small_repo), "--launches", "1"]) == 2
    assert "option --launches: bisect needs 2 or more launches per side (got 1)" in capsys.readouterr().err
    assert main(["bisect", "HEAD~2", "HEAD", "nothing", "--root", str(small_repo)]) == 2
    assert "nothing" in capsys.readouterr().err
    (small_repo / "log.jsonl").write_text("{oops\n")
    assert main(["bisect", "HEAD~2", "HEAD", "tiny", "--root", str(small_repo), "--log",
                 str(small_repo / "log.jsonl")]) == 2
    assert "log.jsonl:1: not a perfgate bisect log line" in capsys.readouterr().err
    assert json.loads("{}") == {}
