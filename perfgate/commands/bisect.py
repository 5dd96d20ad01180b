"""``perfgate bisect GOOD BAD [WORKLOAD]``: the commit that made a workload slower.

The candidates are the first-parent commits from GOOD (exclusive) to BAD. BAD is measured against
GOOD first (not REGRESSED: no culprit, exit 0); then a binary search (perfgate.commands.bisect_search)
measures each candidate against GOOD with the A/B machinery (perfgate.commands.ab.run_ab_refs:
interleaved launches in this job, each side in its own git worktree beside the repository, the user's tree
never touched). The culprit is printed with its subject, ``git diff --stat`` and the diagnosis
between its first parent and it (one more capture of each, diffed by perfgate.diagnosis), and
written as Markdown with ``--report``. Each measurement is appended to a JSONL log (``--log``,
default ``.perfgate/bisect/``); a rerun of the same GOOD, BAD and WORKLOAD reuses it, so a
bisection stopped by ``--budget-s`` or Ctrl-C goes on where it stopped.

Exit codes: 1 a culprit was found, 0 no culprit (BAD is not slower than GOOD), 2 an error or an
unfinished search (budget spent, every commit left skipped: the suspects are printed).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.commands.bisect_search import (
    BisectOutcome, Measurement, append_log, bisect_commits, read_log)
from perfgate.errors import ConfigError, WorkloadFailedError

if TYPE_CHECKING:
    from perfgate.gate.compare import ComparePolicy
    from perfgate.settings.config import Settings
    from perfgate.settings.workloads import WorkloadSpec

EXIT_CULPRIT, EXIT_NO_CULPRIT, EXIT_UNFINISHED = 1, 0, 2


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


@dataclass(frozen=True)
class Range:
    """GOOD and BAD resolved, and the candidates between them (first parents, oldest first)."""

    repo: Path
    good: str
    bad: str
    commits: tuple[str, ...]


def commit_range(repo: Path, good: str, bad: str) -> Range:
    """The first-parent commits after ``good`` up to ``bad``; ConfigError naming the argument for an
    unknown ref, and when GOOD is not an ancestor of BAD."""
    ids = {}
    for name, ref in (("GOOD", good), ("BAD", bad)):
        proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise ConfigError(f"argument {name}: unknown git ref {ref!r} in {repo}")
        ids[name] = proc.stdout.strip()
    ancestor = subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", ids["GOOD"], ids["BAD"]],
                              capture_output=True, text=True)
    if ancestor.returncode != 0:
        raise ConfigError(f"argument GOOD: {good!r} ({ids['GOOD'][:12]}) is not an ancestor of BAD {bad!r} "
                          f"({ids['BAD'][:12]}); bisect needs GOOD older than BAD on one history")
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{ids['GOOD']}..{ids['BAD']}")
    return Range(repo, ids["GOOD"], ids["BAD"], tuple(listed.split()))


def subject(repo: Path, commit: str) -> str:
    return _git(repo, "log", "-1", "--format=%s", commit)


def ab_measure(spec: WorkloadSpec, settings: Settings, span: Range, policy: ComparePolicy, *, launches: int,
               max_launches: int, run_dir: Path) -> Any:
    """``measure(commit)``: the commit A/B'd against GOOD with perfgate.commands.ab.run_ab_refs;
    a commit whose workload fails to run is an ERROR (skipped like ``git bisect skip``)."""
    from perfgate.commands.ab import run_ab_refs
    from perfgate.gate.statistics import geometric_mean

    def measure(commit: str) -> Measurement:
        print(f"perfgate: bisect: measuring {commit[:12]} {subject(span.repo, commit)!r} against GOOD "
              f"{span.good[:12]}", file=sys.stderr, flush=True)
        try:
            result = run_ab_refs(spec, settings, base=span.good, head=commit, launches=launches,
                                 max_launches=max_launches, policy=policy, run_dir=run_dir / commit[:12])
        except WorkloadFailedError as exc:
            return Measurement(commit, "ERROR", summary=f"the workload failed: {exc}")
        steps = [[m["step_time_ms"] for m in side if m.get("step_time_ms", 0) > 0]
                 for side in (result.base, result.head)]
        change = geometric_mean(steps[1]) / geometric_mean(steps[0]) - 1 if all(steps) else None
        row = next((c for c in result.outcome.comparisons if c.metric == "step_time_ms"), None)
        ci = (row.ci_low, row.ci_high) if row is not None and row.ci_low is not None and row.ci_high is not None \
            else None
        return Measurement(commit, result.outcome.verdict.value, summary=result.outcome.summary,
                           step_change=change, launches_per_side=result.launches_per_side, step_ci=ci)

    return measure


def parent_diagnosis(spec: WorkloadSpec, settings: Settings, repo: Path, culprit: str, policy: ComparePolicy,
                     run_dir: Path) -> str:
    """One capture of the culprit's first parent and one of the culprit, each checked out beside
    the repository, compared and diffed by perfgate.diagnosis (reasons, explained share, phase deltas)."""
    from perfgate.capture.command import TIMING
    from perfgate.system.git import project_checkout
    from perfgate.diagnosis.render import render_attribution_text
    from perfgate.gate.compare import compare_launches
    from perfgate.pipeline.inputs import explain_change
    from perfgate.pipeline.workload_run import launch_analysis

    analyses = []
    for name, ref in (("parent", f"{culprit}^"), ("culprit", culprit)):
        with project_checkout(repo, ref, settings.root, (settings.artifacts_dir, settings.report_dir), name) as tree:
            analyses.append(launch_analysis(spec, settings, run_dir / f"diagnosis-{name}", 0, TIMING, cwd=tree))
    outcome = compare_launches([analyses[0].metrics()], [analyses[1].metrics()], policy)
    attribution = explain_change(analyses[:1], analyses[1:], outcome)
    text = f"{outcome.summary}\n"
    return text + (render_attribution_text(attribution) if attribution is not None
                   else "no diagnosis of the difference (perfgate.diagnosis made none)")


# --------------------------------------------------------------------------- CLI


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``perfgate bisect GOOD BAD [WORKLOAD]``."""
    from perfgate.settings.options import add_command_options

    p = subparsers.add_parser(
        "bisect", help="find the commit that made a workload slower (binary search of A/B measurements)",
        description="Measure first-parent commits between GOOD and BAD against GOOD, interleaved in this job "
                    "(perfgate ab), and binary-search the first REGRESSED one. Exit 1 culprit found, 0 no "
                    "culprit, 2 error or unfinished (docs/bisect.md).")
    p.add_argument("good", metavar="GOOD", help="git ref of a commit without the slowdown")
    p.add_argument("bad", metavar="BAD", help="git ref of a later commit with it")
    p.add_argument("workloads", nargs="?", default=None, metavar="WORKLOAD",
                   help="the workload (default: the only enabled one)")
    p.add_argument("--report", type=Path, default=None, metavar="FILE", help="write a Markdown report")
    p.add_argument("--log", type=Path, default=None, metavar="FILE",
                   help="JSONL log of the measurements, reused by a rerun (default .perfgate/bisect/...)")
    p.add_argument("--budget-s", dest="bisect_budget_s", type=float, default=None, metavar="S",
                   help="start no new measurement after S seconds (default: no limit)")
    p.add_argument("--no-diagnosis", action="store_true", help="skip the parent-vs-culprit capture")
    add_command_options(p)   # --launches K per side (default 3), --max-launches (default 3 x K), --root, ...
    p.set_defaults(func=cmd_bisect)
    return p


def cmd_bisect(args: argparse.Namespace) -> int:
    """``perfgate bisect``: 1 culprit, 0 no culprit, 2 error or unfinished."""
    from perfgate.commands.bisect_report import render_markdown_report, render_text
    from perfgate.pipeline.workload_run import compare_policy, new_run_dir
    from perfgate.settings.options import settings_from_args
    from perfgate.commands.run import specs_on_this_machine

    launches = args.launches if args.launches is not None else 3
    max_launches = args.max_launches if args.max_launches is not None else 3 * launches
    if launches < 2:   # seen on a busy CPU: 1 vs 1 launch named an unchanged commit +16.7 % REGRESSED
        raise ConfigError(f"option --launches: bisect needs 2 or more launches per side (got {launches}): with "
                          "one a side there is no significance test, only the tolerance, and one noisy launch "
                          "sends the search the wrong way and names an innocent commit")
    if args.bisect_budget_s is not None and args.bisect_budget_s <= 0:
        raise ConfigError(f"option --budget-s: must be > 0 (got {args.bisect_budget_s})")
    workload = args.workloads
    args.workloads = [workload] if workload else []
    settings = settings_from_args(argparse.Namespace(**{**vars(args), "launches": None, "max_launches": None}))
    specs = specs_on_this_machine(settings)
    if len(specs) != 1:
        raise ConfigError(f"argument WORKLOAD: name one workload to bisect (enabled: "
                          f"{', '.join(s.full_name for s in specs) or 'none'})")
    spec = specs[0]
    repo = Path(_git(settings.root, "rev-parse", "--show-toplevel"))
    span = commit_range(repo, args.good, args.bad)
    log = args.log or settings.root / ".perfgate" / "bisect" / f"{spec.full_name}-{span.good[:12]}-{span.bad[:12]}.jsonl"
    known = read_log(log, span.good, span.bad, spec.full_name)
    policy = compare_policy(settings, spec)
    run_dir = new_run_dir(settings.artifacts_dir, f"bisect-{spec.full_name}")
    print(f"perfgate: bisect {spec.full_name}: {len(span.commits)} commit(s) after GOOD {span.good[:12]} up to "
          f"BAD {span.bad[:12]}, {launches} launches per side; log {log}"
          + (f" ({len(known)} measurement(s) reused)" if known else ""), file=sys.stderr, flush=True)
    measure = ab_measure(spec, settings, span, policy, launches=launches, max_launches=max_launches, run_dir=run_dir)
    started = time.monotonic()

    def logged(commit: str) -> Measurement:
        found = measure(commit)
        append_log(log, span.good, span.bad, spec.full_name, found)
        print(f"perfgate: bisect: {commit[:12]} {found.verdict}", file=sys.stderr, flush=True)
        return found

    outcome: BisectOutcome = bisect_commits(
        span.commits, logged, known=known,
        may_measure=lambda: args.bisect_budget_s is None or time.monotonic() - started < args.bisect_budget_s)
    diagnosis = diff_stat = None
    if outcome.culprit is not None:
        diff_stat = _git(repo, "diff", "--stat", f"{outcome.culprit}^", outcome.culprit)
        if not args.no_diagnosis:
            diagnosis = parent_diagnosis(spec, settings, repo, outcome.culprit, policy, run_dir)
    subjects = {c: subject(repo, c) for c in {*span.commits, span.good}}
    text = render_text(spec.full_name, span.good, span.bad, outcome, subjects, diff_stat, diagnosis)
    from perfgate.report.escape import terminal_text

    print(terminal_text(text))
    if args.report is not None:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(render_markdown_report(spec.full_name, span.good, span.bad, outcome, subjects,
                                                      diff_stat, diagnosis), encoding="utf-8")
        print(f"perfgate: report {args.report}", file=sys.stderr)
    if outcome.culprit is not None:
        return EXIT_CULPRIT
    return EXIT_NO_CULPRIT if outcome.no_culprit else EXIT_UNFINISHED
