"""The confirmation against the base: before a gate run fails on its stored baseline (or stays
unclear against it, or credits the change with a speed-up), the base of the change is measured in
the same job, interleaved launch by launch with this checkout, and the pairs decide
(docs/statistics.md §6), but credit a speed-up only where the stored baseline found one too
(perfgate.gate.paired_looks.credited). A PASS of a workload too noisy for its stored baseline to
vouch for (``NoiseReport.too_noisy``) is checked the same way: the pairs can only fail it;
otherwise the stored PASS stands.

A stored baseline was recorded at another time, in another state of the machine: a neighbour's
load, a drifting clock or a new job on a shared runner shows as a slowdown of code that did not
change. A base launch beside each head launch shares the machine's state of the moment, and the
test on the pairs' differences (perfgate.gate.paired_looks) leaves it out.

``find_base``: the commit to measure (the option, a pull request's merge-base, or the commit the
baseline was recorded from); ``confirm``: the base checked out beside the repository (this
checkout when it is the base itself), the rounds in an order-balanced pattern through the gate's
one capture-and-analyze path, and the ``Confirmation`` record of what they decided. A base that
cannot be found, checked out or run leaves the stored verdict, with a note that says why.
"""
from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate.errors import ConfigError, PerfgateError
from perfgate.gate.paired_looks import (BASE, HEAD, PairLook, PairRun, credited, interval_ratio, pair_looks,
                                       run_pairs)
from perfgate.records.confirmation import Confirmation
from perfgate.records.model import Analysis, Verdict
from perfgate.records.notes import TO_DECIDE, WHY, Note
from perfgate.settings.config import Settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.system.git import (head_state, merge_base, project_checkout, pull_request_base, repo_root,
                                 resolve_ref)

if TYPE_CHECKING:
    from perfgate.baselines.store import Baseline
    from perfgate.gate.compare import ComparePolicy, Outcome

#: Pairs before the first look: a paired test of 2 pairs has one degree of freedom, and a look
#: that cannot decide only spends part of the run's false-alarm budget.
FIRST_LOOK_PAIRS = 3
#: The stored verdicts that ``confirm = "auto"`` confirms: one that would fail, one that is unclear,
#: and one that claims the code got faster (an unchanged rerun on a machine quieter than at the
#: recording was IMPROVED -20 % after one launch; a reviewer would credit the pull request).
CONFIRMED_VERDICTS = (Verdict.REGRESSED, Verdict.INCONCLUSIVE, Verdict.IMPROVED)

Progress = Callable[[str], None]

#: How the confirmation takes one launch: ``(spec, launch folder, k, kind, cwd) -> its Analysis``
#: (perfgate.pipeline.workload_run.launch_analysis, with the gate's settings).
LaunchAnalysis = Callable[[WorkloadSpec, Path, int, str, Path], Analysis]


def wanted(settings: Settings, stored: Verdict, noisy: bool = False) -> bool:
    """Whether the gate measures the base after the stored baseline's verdict ``stored``; ``noisy``:
    the baseline's launches are too noisy for its tolerance (a stored PASS of one launch there let
    +9 % slowdowns through in 1 of 2 runs on a shared H200: docs/measurements/confirmation.md)."""
    if settings.confirm == "never" or stored == Verdict.ERROR:
        return False
    return settings.confirm == "always" or stored in CONFIRMED_VERDICTS or (stored == Verdict.PASS and noisy)


def vouching(settings: Settings, stored: Verdict) -> bool:
    """Whether pairs measured after ``stored`` only check a PASS (``confirm = "auto"``): they can
    fail it, and otherwise the stored PASS stands."""
    return settings.confirm == "auto" and stored == Verdict.PASS


@dataclass(frozen=True)
class Base:
    """The commit the confirmation measures, how it was found and the checkout it is in."""

    commit: str
    how: str
    repo: Path


def find_base(settings: Settings, recorded_commit: str | None, env: Mapping[str, str] | None = None) -> Base | str:
    """The base of the change in the checkout at ``settings.root``: the merge-base of HEAD with
    ``confirm_base`` when it is set (the branch the change merges into, or a commit before it; a
    ConfigError for a ref git does not know: the user's setting is wrong), else the merge-base of
    HEAD with the pull request's target branch, else ``recorded_commit`` (the baseline's). A
    string says why there is none."""
    env = os.environ if env is None else env
    try:
        repo = repo_root(settings.root)
    except ConfigError:
        return f"{settings.root} is not in a git checkout"
    if settings.confirm_base != "auto":
        ref, where = settings.confirm_base, settings.sources.get("confirm_base", settings.option("confirm_base"))
        try:
            commit = resolve_ref(repo, ref)
        except ConfigError:
            raise ConfigError(f"{where}: unknown git ref {ref!r} in {repo}") from None
        fork = merge_base(repo, commit)
        if fork is None or fork == commit:
            return Base(commit, f"{ref}, from {where}", repo)
        return Base(fork, f"the merge-base of HEAD with {ref}, from {where}", repo)
    try:
        found = pull_request_base(repo, env)
    except ConfigError as exc:
        return str(exc)
    if found is not None:
        return Base(found[0], found[1], repo)
    if not recorded_commit:
        return ("no base known: not a pull request's job (GITHUB_BASE_REF unset), confirm_base unset, and the "
                "baseline records no commit")
    try:
        return Base(resolve_ref(repo, recorded_commit), "the commit the baseline was recorded from", repo)
    except ConfigError:
        return f"the baseline's commit {recorded_commit[:12]} is not in this checkout (a shallow clone?)"


def pull_request_commit(settings: Settings, env: Mapping[str, str] | None = None) -> str | None:
    """The base a change is judged from when one is known without the baseline (``confirm_base``,
    a pull request's merge-base): what staleness compares the baseline with. None otherwise."""
    base = find_base(settings, None, env)
    return base.commit if isinstance(base, Base) else None


@dataclass(frozen=True)
class ConfirmRun:
    """The confirmation's record, and the launches it took (empty when it was skipped): each
    side's timing launches in pair order, and the base's profile launch when one was taken."""

    record: Confirmation
    base: tuple[Analysis, ...] = ()
    head: tuple[Analysis, ...] = ()
    outcome: Outcome | None = None
    base_profile: Analysis | None = None


    def undecided_notes(self, workload: str) -> tuple[Note, ...]:
        """Why pairs that ended INCONCLUSIVE could not decide, and what to do about it."""
        record = self.record
        if record.verdict != str(Verdict.INCONCLUSIVE):
            return ()
        level = f"; each look needs p < {record.level:.2g}" if record.level is not None else ""
        return (Note(WHY, f"the change is beyond tolerance but not significant after {record.pairs} pairs with the "
                          f"base ({record.stopped}{level})."),
                Note(TO_DECIDE, f"raise max_launches (the most pairs; {record.pairs} were taken), run {workload} on a "
                                "quieter machine, or make its steps steadier (more measured steps)"))


def skipped(stored: Outcome, why: str, vouch: bool = False) -> ConfirmRun:
    return ConfirmRun(Confirmation(str(stored.verdict), stored.summary, skipped=why, vouch=vouch))


def confirm_if_wanted(spec: WorkloadSpec, settings: Settings, baseline: Baseline | None, stored: Outcome,
                      policy: ComparePolicy, run_dir: Path, launch_analysis: LaunchAnalysis, *, cwd: Path | None,
                      gpu_count: int, say: Progress, started: float, profile_base: bool,
                      noisy: bool = False) -> ConfirmRun | None:
    """The confirmation of ``stored`` (the verdict against ``baseline``) when the settings want one
    (:func:`wanted`; ``noisy``: the baseline is too noisy for its tolerance): skipped with the reason
    when there is no base; its first look is taken even when ``budget_s`` (counted from ``started``)
    is spent."""
    if baseline is None or not wanted(settings, stored.verdict, noisy):
        return None
    base = find_base(settings, baseline.provenance.get("git_commit"))
    if isinstance(base, str):
        return skipped(stored, base, vouching(settings, stored.verdict))
    left = max(settings.budget_s - (time.monotonic() - started), 1e-9) if settings.budget_s else 0.0
    return confirm(spec, settings, base, stored, policy, run_dir, launch_analysis, cwd=cwd, gpu_count=gpu_count,
                   say=say, budget_s=left, profile_base=profile_base)


def confirm(spec: WorkloadSpec, settings: Settings, base: Base, stored: Outcome, policy: ComparePolicy,
            run_dir: Path, launch_analysis: LaunchAnalysis, *, cwd: Path | None = None, gpu_count: int = 0,
            say: Progress = lambda line: None, budget_s: float = 0.0, profile_base: bool = False) -> ConfirmRun:
    """Measure ``base`` and this checkout in interleaved pairs (``run_dir/confirm/<side>-<k>/``),
    from FIRST_LOOK_PAIRS to ``settings.max_launches`` pairs, and decide on them; with
    ``profile_base``, a changed verdict (REGRESSED, IMPROVED) adds the base's CUDA-traced profile
    launch (``run_dir/confirm/base-profile/``) for the diagnosis. The base runs as its own
    pyproject.toml declares the workload (``gpu_count`` GPUs size it), this checkout as ``spec``
    says: arguments a change added are the change's. A base that cannot be checked out, does not
    declare the workload or does not run gives a skipped record (the stored verdict stands)."""
    from perfgate.capture.command import PROFILE, TIMING

    head_tree = (cwd or settings.root).resolve()
    vouch = vouching(settings, stored.verdict)
    analyses: dict[str, list[Analysis]] = {BASE: [], HEAD: []}
    started = time.monotonic()
    try:
        with _base_tree(base, head_tree, settings) as base_tree:
            trees = {BASE: base_tree, HEAD: head_tree}
            specs = {BASE: _base_spec(spec, settings, base_tree, gpu_count), HEAD: spec}

            def launch(side: str, k: int) -> Mapping[str, float]:
                analysis = launch_analysis(specs[side], run_dir / "confirm" / f"{side}-{k}", k, TIMING, trees[side])
                analyses[side].append(analysis)
                say(f"{spec.full_name}: confirming against the base {base.commit[:12]}: {side} launch {k + 1}: "
                    f"step {analysis.steps.time_ms:.4g} ms; {time.monotonic() - started:.0f} s")
                return analysis.metrics()

            def on_look(look: PairLook) -> None:
                say(f"{spec.full_name}: after {look.pairs} pairs: {look.outcome.summary.splitlines()[0]}")

            looks = pair_looks(min(FIRST_LOOK_PAIRS, settings.max_launches), max(settings.max_launches, 1))
            run = run_pairs(launch, policy, looks, budget_s=budget_s, on_look=on_look)
            outcome = credited(run.outcome, stored.verdict)
            base_profile = None
            decides = not vouch or outcome.verdict == Verdict.REGRESSED
            if profile_base and decides and outcome.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
                base_profile = launch_analysis(specs[BASE], run_dir / "confirm" / "base-profile", 0, PROFILE, base_tree)
    except PerfgateError as exc:
        return skipped(stored, f"the base {base.commit[:12]} ({base.how}) could not be measured: {exc}", vouch)
    record = replace(_record(stored, base, run, outcome, policy.alpha), vouch=vouch)
    if not decides:     # a checked PASS with no regression found: the stored PASS stands
        return ConfirmRun(record, tuple(analyses[BASE]), tuple(analyses[HEAD]))
    return ConfirmRun(record, tuple(analyses[BASE]), tuple(analyses[HEAD]), outcome, base_profile)


def _base_spec(spec: WorkloadSpec, settings: Settings, base_root: Path, gpu_count: int) -> WorkloadSpec:
    """The workload as the base's pyproject.toml declares it (its module, arguments, launcher);
    ConfigError where the base does not declare it."""
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import discover_workloads

    pyproject = base_root / settings.pyproject.relative_to(settings.root) if settings.pyproject else None
    found = load_settings(base_root, pyproject=pyproject if pyproject and pyproject.is_file() else None,
                          overrides={"size": settings.size, "skip_steps": settings.skip_steps})
    declared = [s for s in discover_workloads(found, gpu_count) if (s.name, s.variant) == (spec.name, spec.variant)]
    if not declared:
        raise ConfigError(f"the base does not declare the workload {spec.full_name}")
    return declared[0]


def _record(stored: Outcome, base: Base, run: PairRun, outcome: Outcome, alpha: float) -> Confirmation:
    steps = [(b.get("step_time_ms"), h.get("step_time_ms")) for b, h in zip(run.base, run.head)]
    kept = [(b, h) for b, h in steps if b is not None and h is not None]
    return Confirmation(
        stored_verdict=str(stored.verdict), stored_summary=stored.summary, base_commit=base.commit, base_how=base.how,
        verdict=str(outcome.verdict), summary=outcome.summary, pairs=run.pairs,
        order=tuple(f"{side}-{k}" for side, k in run.order),
        base_step_ms=tuple(round(b, 6) for b, _ in kept), head_step_ms=tuple(round(h, 6) for _, h in kept),
        interval_ratio=interval_ratio([b for b, _ in kept], [h for _, h in kept], alpha),
        level=run.level, stopped=run.stopped)


@contextlib.contextmanager
def _base_tree(base: Base, head_tree: Path, settings: Settings) -> Iterator[Path]:
    """Where the base runs: this checkout when it is the base itself (its HEAD, nothing
    uncommitted), else the project as the base has it (perfgate.system.git.project_checkout:
    beside the repository, ignored files linked in but perfgate's own folders)."""
    commit, dirty = head_state(base.repo)
    if commit == base.commit and not dirty:
        yield head_tree
        return
    with project_checkout(base.repo, base.commit, head_tree, (settings.artifacts_dir, settings.report_dir)) as tree:
        yield tree
