"""Same-job A/B mode: measure a base and a head commit in the same job on the same GPU,
interleaved (base, head, head, base, base, head, ...), and decide with the launch-level statistics.

``run_ab`` holds the schedule and the sequential decision and takes the launcher as a function
(``launch(side, k) -> metrics``), so it is testable without nsys; ``capture_launcher`` is the real
launcher (the gate's perfgate.pipeline.workload_run.launch_analysis, in a git worktree) and
``project_checkout`` checks a ref out beside the repository. ``add_parser`` registers ``perfgate ab``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.errors import ConfigError, PerfgateError
from perfgate.gate.compare import ComparePolicy, Outcome
from perfgate.gate.paired_looks import BASE, HEAD, PairLauncher, pair_looks, run_pairs
from perfgate.gate.wording import describe
from perfgate.records.model import Verdict
from perfgate.system.git import project_checkout, repo_root

if TYPE_CHECKING:
    from perfgate.settings.config import Settings
    from perfgate.settings.workloads import WorkloadSpec

Launcher = PairLauncher
WORKTREE = "WORKTREE"  # --head value meaning "the current checkout, uncommitted changes included"


@dataclass(frozen=True)
class AbResult:
    """The decision and everything it rests on: per-launch metrics of each side and the launch order."""

    outcome: Outcome
    base: list[dict[str, float]]
    head: list[dict[str, float]]
    order: list[tuple[str, int]]
    looks: int                                   # how often the decision was evaluated
    history: list[Verdict] = field(default_factory=list)  # the verdict at each look

    @property
    def launches_per_side(self) -> int:
        return len(self.base)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.outcome.verdict.value,
            "failed": self.outcome.failed,
            "summary": self.outcome.summary,
            "launches_per_side": self.launches_per_side,
            "looks": self.looks,
            "history": [v.value for v in self.history],
            "order": [f"{side}-{k}" for side, k in self.order],
            "base": self.base,
            "head": self.head,
            "comparisons": [
                {"metric": c.metric, "verdict": c.verdict.value, "gating": c.gating, "baseline": c.baseline,
                 "current": c.current, "change": c.change, "p_value": c.p_value, "ci_low": c.ci_low,
                 "ci_high": c.ci_high, "note": c.note}
                for c in self.outcome.comparisons
            ],
        }


def run_ab(
    launch: Launcher,
    *,
    launches: int = 3,
    max_launches: int | None = None,
    add_launches: int | None = None,
    policy: ComparePolicy = ComparePolicy(),
) -> AbResult:
    """Run ``launches`` interleaved rounds (one base and one head launch each), compare the pairs,
    and while the outcome is INCONCLUSIVE (``needs_more_launches``) add ``add_launches`` rounds
    (default: as many as at first) up to ``max_launches`` per side (default: ``launches``, i.e. no
    extra rounds): perfgate.gate.paired_looks.run_pairs, each look at Pocock's level for them, so
    the whole run raises a false alarm with chance ``policy.alpha``, not once per look."""
    if launches < 1:
        raise ConfigError(f"option --launches: must be >= 1 (got {launches})")
    cap = launches if max_launches is None else max_launches
    if cap < launches:
        raise ConfigError(f"option --max-launches: must be >= --launches ({cap} < {launches})")
    step = launches if add_launches is None else add_launches
    if step < 1:
        raise ConfigError(f"option --add-launches: must be >= 1 (got {step})")
    run = run_pairs(launch, policy, pair_looks(launches, cap, step))
    return AbResult(run.outcome, run.base, run.head, run.order, len(run.looks),
                    [look.outcome.verdict for look in run.looks])


# --------------------------------------------------------------------------- the real launcher


def capture_launcher(spec: WorkloadSpec, settings: Settings, trees: Mapping[str, Path], run_dir: Path,
                     extra_args: Sequence[str] = ()) -> Launcher:
    """A launcher that captures ``spec`` under nsys with cwd = the side's worktree (artifacts in
    ``run_dir/<side>-<k>/``) and returns the analysis' metrics."""

    def launch(side: str, k: int) -> Mapping[str, float]:
        from perfgate.capture.command import TIMING
        from perfgate.pipeline.workload_run import launch_analysis

        return launch_analysis(spec, settings, run_dir / f"{side}-{k}", k, TIMING, cwd=trees[side],
                              extra_args=extra_args).metrics()

    return launch


def run_ab_refs(
    spec: WorkloadSpec,
    settings: Settings,
    *,
    base: str,
    head: str | None = None,
    launches: int = 3,
    max_launches: int | None = None,
    policy: ComparePolicy | None = None,
    run_dir: Path | None = None,
) -> AbResult:
    """A/B of ``spec`` between git refs of the project at ``settings.root``. ``head`` None or
    "WORKTREE" measures the current checkout (uncommitted changes included); any ref, HEAD included,
    is checked out beside the repository like ``base`` (perfgate.system.git.project_checkout: the
    files git ignores at the project's top, its data, linked in)."""
    from perfgate.pipeline.workload_run import compare_policy, new_run_dir

    repo = repo_root(settings.root)
    run_dir = run_dir or new_run_dir(settings.artifacts_dir, f"ab-{spec.full_name}")
    policy = policy or compare_policy(settings, spec)
    own = (settings.artifacts_dir, settings.report_dir)
    with contextlib.ExitStack() as stack:
        trees = {BASE: stack.enter_context(project_checkout(repo, base, settings.root, own, BASE))}
        if head is None or head == WORKTREE:
            trees[HEAD] = settings.root
        else:
            trees[HEAD] = stack.enter_context(project_checkout(repo, head, settings.root, own, HEAD))
        result = run_ab(capture_launcher(spec, settings, trees, run_dir), launches=launches,
                        max_launches=max_launches, policy=policy)
    (run_dir / "ab.json").write_text(json.dumps(
        {"workload": spec.full_name, "base": base, "head": head or WORKTREE, **result.to_dict()},
        indent=2, sort_keys=True, default=str))
    return result


# --------------------------------------------------------------------------- CLI


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``perfgate ab --base REF [--head REF] [WORKLOAD...] --launches K``."""
    from perfgate.settings.options import add_command_options

    p = subparsers.add_parser(
        "ab", help="A/B: measure two commits interleaved in this job and compare them",
        description="Measure the base and the head commit of the project in the same job on the same "
                    "machine, interleaved (base/head, head/base, ...), K launches each, and decide with the "
                    "launch-level statistics. Exit 0 pass, 1 regression, 2 error.")
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads to compare (default: all enabled)")
    p.add_argument("--base", required=True, metavar="REF", help="git ref of the baseline side (e.g. origin/main)")
    p.add_argument("--head", default=None, metavar="REF",
                   help=f"git ref of the candidate side (default: the current checkout, {WORKTREE})")
    # --max-launches comes with the gate options: here, the most launches per side while INCONCLUSIVE
    # (default: 3 x --launches)
    p.add_argument("--alpha", type=float, default=None, help="false-alarm budget per primary metric (default 0.01)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    add_command_options(p)   # --max-launches N: add launches while INCONCLUSIVE, up to N per side (default 3 x K)
    p.set_defaults(func=cmd_ab)
    return p


def cmd_ab(args: argparse.Namespace) -> int:
    """``perfgate ab``: 0 pass (or improved / inconclusive at the cap), 1 regression, 2 error."""
    from dataclasses import replace

    from perfgate.settings.options import settings_from_args
    from perfgate.pipeline.workload_run import compare_policy
    from perfgate.commands.run import specs_on_this_machine

    try:
        launches = args.launches if args.launches is not None else 3
        # --launches and --max-launches are this command's own (per side), not the gate's launch design
        settings = settings_from_args(argparse.Namespace(**{**vars(args), "launches": None, "max_launches": None}))
        specs = specs_on_this_machine(settings)
        results: dict[str, AbResult] = {}
        for spec in specs:
            policy = compare_policy(settings, spec)
            if args.alpha is not None:
                policy = replace(policy, alpha=args.alpha)
            print(f"perfgate: A/B {spec.full_name}: {args.base} vs {args.head or WORKTREE}, "
                  f"{launches} launches per side", file=sys.stderr, flush=True)
            results[spec.full_name] = run_ab_refs(
                spec, settings, base=args.base, head=args.head, launches=launches,
                max_launches=args.max_launches if args.max_launches is not None else 3 * launches, policy=policy)
    except PerfgateError as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
        return 2
    if args.format == "json":
        print(json.dumps({name: r.to_dict() for name, r in results.items()}, indent=2, sort_keys=True, default=str))
    else:
        for name, r in results.items():
            print(f"{name}: {r.outcome.summary}")
            for c in r.outcome.comparisons:
                print(f"  {str(c.verdict):<12} {describe(c)}{'' if c.gating else ' (not gating)'}")
    return 1 if any(r.outcome.failed for r in results.values()) else 0
