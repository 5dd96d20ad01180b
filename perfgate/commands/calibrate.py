"""Calibration: measure how often the gate raises a false alarm and how often it catches a slowdown
of known size, on this machine, with the real statistics.

``run_pools`` launches an A/A pool (unchanged code) and pools with an injected slowdown in one
phase (``--slow-phase PHASE --slow-ms MS`` with MS = pct × the A/A median step time);
``evaluate_pools`` (pure) forms k-vs-k comparisons from disjoint subsets of the pools and counts
verdicts. ``add_parser`` registers ``perfgate calibrate``; results go to calibration.json and
calibration.md.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfgate.commands.calibration_file import AA, read_calibration
from perfgate.errors import ConfigError, PerfgateError
from perfgate.gate.compare import ComparePolicy, compare_launches
from perfgate.gate.sequential_looks import LaunchBudget
from perfgate.gate.statistics import coefficient_of_variation, disjoint_splits, upper_bound_95
from perfgate.records.model import Verdict

if TYPE_CHECKING:
    from perfgate.settings.config import Settings
    from perfgate.settings.workloads import WorkloadSpec

CV_METRICS = ("step_time_ms", "step_time_mean_ms")


# the pure helpers (coefficient_of_variation, upper_bound_95, disjoint_splits) live in perfgate.gate.statistics


@dataclass(frozen=True)
class RateRow:
    """Verdict counts over the comparisons of one pool against the A/A pool."""

    pool: str
    injected_fraction: float | None     # nominal injected slowdown (0.03 = 3 % of step time); None for A/A
    realized_change: float | None       # geometric-mean step_time_ms of the pool vs the A/A pool − 1
    comparisons: int
    regressed: int
    inconclusive: int
    phase_named: int                    # regressed comparisons whose regressed rows include the phase
    rate: float                         # regressed / comparisons
    upper_95: float                     # one-sided 95 % upper bound of the rate


@dataclass(frozen=True)
class CalibrationTable:
    """Accuracy of the gate at k launches per side, from A/A and injected-slowdown pools."""

    k: int
    alpha: float
    false_alarms: RateRow
    detection: list[RateRow]
    cv: dict[str, dict[str, float]]         # pool -> metric -> launch-to-launch CV
    launches: dict[str, int]
    gpu_s_per_comparison: float | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        aa = self.false_alarms
        lines = [
            f"#### k = {self.k} launches per side (alpha {self.alpha:g})",
            "",
            f"Launch-to-launch CV (A/A): step_time_ms {self.cv.get(AA, {}).get('step_time_ms', float('nan')):.2%}, "
            f"step_time_mean_ms {self.cv.get(AA, {}).get('step_time_mean_ms', float('nan')):.2%}"
            + (f"; GPU time per comparison {self.gpu_s_per_comparison:.0f} s" if self.gpu_s_per_comparison else ""),
            "",
            "| pool | injected | realized | comparisons | REGRESSED | rate | 95% upper | INCONCLUSIVE | phase named |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for row in [aa, *self.detection]:
            inj = "-" if row.injected_fraction is None else f"+{row.injected_fraction:.1%}"
            real = "-" if row.realized_change is None else f"{row.realized_change:+.1%}"
            lines.append(f"| {row.pool} | {inj} | {real} | {row.comparisons} | {row.regressed} | {row.rate:.1%} "
                         f"| {row.upper_95:.1%} | {row.inconclusive} | {row.phase_named} |")
        lines += [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


def _geomean(pool: Sequence[Mapping[str, float]], metric: str) -> float | None:
    vals = [float(m[metric]) for m in pool if metric in m and float(m[metric]) > 0]
    return float(np.exp(np.mean(np.log(vals)))) if vals else None


def _rate_row(name: str, injected: float | None, realized: float | None, outcomes: list[Any],
              phase_metric: str | None) -> RateRow:
    n = len(outcomes)
    regressed = [o for o in outcomes if o.verdict == Verdict.REGRESSED]
    named = sum(1 for o in regressed if phase_metric and any(c.metric == phase_metric for c in o.regressed))
    return RateRow(
        pool=name, injected_fraction=injected, realized_change=realized, comparisons=n,
        regressed=len(regressed), inconclusive=sum(1 for o in outcomes if o.verdict == Verdict.INCONCLUSIVE),
        phase_named=named, rate=len(regressed) / n if n else 0.0, upper_95=upper_bound_95(len(regressed), n))


def evaluate_pools(
    pools: Mapping[str, Sequence[Mapping[str, float]]],
    k: int,
    policy: ComparePolicy = ComparePolicy(),
    max_comparisons: int = 500,
    *,
    injected: Mapping[str, float] | None = None,
    phase: str | None = None,
    seed: int = 0,
    launch_wall_s: float | None = None,
) -> CalibrationTable:
    """Compare k A/A launches against k other A/A launches (disjoint), and k A/A launches against k
    launches of every other pool, with ``compare_launches(policy)``; count the verdicts.

    ``pools`` maps "aa" and any other labels to per-launch metric mappings; ``injected`` gives each
    non-A/A pool's nominal slowdown (fraction of step time); ``phase`` the phase it was injected in
    (to count detections that name it); ``launch_wall_s`` the mean wall time of one launch (GPU time
    per comparison = 2 k launches). A/A splits share launches across comparisons, so the rates are
    estimates for tuning, not independent trials."""
    if AA not in pools:
        raise ConfigError(f"evaluate_pools: no {AA!r} pool (got {', '.join(pools) or 'none'})")
    rng = np.random.default_rng(seed)
    aa = list(pools[AA])
    phase_metric = f"phase.{phase}.cpu_ms" if phase else None
    notes: list[str] = []
    splits = disjoint_splits(len(aa), len(aa), k, same_pool=True, max_comparisons=max_comparisons, rng=rng)
    if not splits:
        notes.append(f"A/A pool has {len(aa)} launches: at least {2 * k} are needed for k = {k}")
    aa_outcomes = [compare_launches([aa[i] for i in b], [aa[i] for i in h], policy) for b, h in splits]
    false_alarms = _rate_row(AA, None, 0.0, aa_outcomes, phase_metric)
    base_step = _geomean(aa, "step_time_ms")
    detection = []
    for name, pool in pools.items():
        if name == AA:
            continue
        pool = list(pool)
        pairs = disjoint_splits(len(aa), len(pool), k, same_pool=False, max_comparisons=max_comparisons, rng=rng)
        outcomes = [compare_launches([aa[i] for i in b], [pool[i] for i in h], policy) for b, h in pairs]
        step = _geomean(pool, "step_time_ms")
        realized = step / base_step - 1.0 if step and base_step else None
        detection.append(_rate_row(name, (injected or {}).get(name), realized, outcomes, phase_metric))
    cv = {name: {m: coefficient_of_variation([float(x[m]) for x in pool if m in x]) for m in CV_METRICS}
          for name, pool in pools.items()}
    return CalibrationTable(
        k=k, alpha=policy.alpha, false_alarms=false_alarms, detection=detection, cv=cv,
        launches={name: len(pool) for name, pool in pools.items()},
        gpu_s_per_comparison=2 * k * launch_wall_s if launch_wall_s is not None else None, notes=notes)


# --------------------------------------------------------------------------- running the pools


Launch = Callable[[str, Sequence[str]], tuple[Mapping[str, float], float]]


def run_pools(launch: Launch, *, launches: int, inject_pcts: Sequence[float], phase: str, knob: str = "--slow-ms",
              log: Callable[[str], None] = lambda s: None) -> tuple[dict[str, list[dict[str, float]]], dict[str, float], list[float]]:
    """Run the A/A pool and one pool per injected percentage, interleaved round by round so slow
    drift hits every pool alike. The first A/A launch sizes the injections (MS = pct/100 × its median
    step time). ``launch(label, extra_args) -> (metrics, wall_s)``. Returns pools, injected fractions,
    and every launch's wall time."""
    pools: dict[str, list[dict[str, float]]] = {AA: []}
    walls: list[float] = []
    metrics, wall = launch(f"{AA}-0", ())
    pools[AA].append(dict(metrics))
    walls.append(wall)
    step_ms = float(metrics["step_time_ms"])
    labels = {f"+{pct:g}%": pct / 100.0 for pct in inject_pcts}
    args = {label: ("--slow-phase", phase, knob, f"{frac * step_ms:.3f}") for label, frac in labels.items()}
    for label in labels:
        pools[label] = []
    log(f"A/A median step {step_ms:.2f} ms; injecting " + ", ".join(f"{a[3]} ms ({lab})" for lab, a in args.items()))
    for r in range(launches):
        order = [AA, *labels] if r % 2 == 0 else [*reversed(labels), AA]
        for label in order:
            if label == AA and r == 0:
                continue
            metrics, wall = launch(f"{label}-{r}", args.get(label, ()))
            pools[label].append(dict(metrics))
            walls.append(wall)
            log(f"  {label} launch {r}: step_time_ms {float(metrics['step_time_ms']):.3f}")
    return pools, labels, walls


def calibration_launcher(spec: WorkloadSpec, settings: Settings, run_dir: Path,
                         base_args: Sequence[str] = ()) -> Launch:
    """The real launcher: the gate's perfgate.pipeline.workload_run.launch_capture_and_analysis;
    artifacts in ``run_dir/<label>/``."""

    def launch(label: str, extra_args: Sequence[str]) -> tuple[Mapping[str, float], float]:
        from perfgate.capture.command import TIMING
        from perfgate.pipeline.workload_run import launch_capture_and_analysis

        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
        capture, analysis = launch_capture_and_analysis(spec, settings, run_dir / safe, 0, TIMING,
                                            extra_args=(*base_args, *extra_args))
        return analysis.metrics(), capture.wall_s

    return launch


# --------------------------------------------------------------------------- CLI


def _csv_numbers(text: str, what: str, kind: Callable[[str], float] = float) -> list[Any]:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"option {what}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"option {what}: expected positive numbers, got {text!r}")
    return values


@dataclass(frozen=True)
class SequentialTable:
    """Accuracy of the gate as it runs: a baseline of ``record_launches`` A/A launches, then current
    launches drawn one at a time (perfgate.gate.sequential_looks.run_looks) within ``budget``."""

    record_launches: int
    budget: LaunchBudget
    alpha: float
    rows: list[RateRow]
    mean_launches: dict[str, float]         # pool -> current launches a run took, on average

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_markdown(self) -> str:
        b = self.budget
        lines = [f"#### As the gate runs: {self.record_launches} baseline launches, then {b.min_launches} to "
                 f"{b.max_launches} launches, alpha {self.alpha:g} over {b.looks} look{'s' if b.looks != 1 else ''}",
                 "", "| pool | injected | realized | runs | REGRESSED | rate | 95% upper | INCONCLUSIVE | launches per run |",
                 "|---|---|---|---|---|---|---|---|---|"]
        for row in self.rows:
            inj = "-" if row.injected_fraction is None else f"+{row.injected_fraction:.1%}"
            real = "-" if row.realized_change is None else f"{row.realized_change:+.1%}"
            lines.append(f"| {row.pool} | {inj} | {real} | {row.comparisons} | {row.regressed} | {row.rate:.1%} "
                         f"| {row.upper_95:.1%} | {row.inconclusive} | {self.mean_launches[row.pool]:.2f} |")
        return "\n".join(lines) + "\n"


def evaluate_sequential(
    pools: Mapping[str, Sequence[Mapping[str, float]]], record_launches: int, budget: LaunchBudget,
    policy: ComparePolicy = ComparePolicy(), runs: int = 200, *,
    injected: Mapping[str, float] | None = None, seed: int = 0,
) -> SequentialTable:
    """``runs`` gate runs per pool: a random ``record_launches`` of the A/A pool as the baseline, the
    current launches drawn in random order from the rest of the A/A pool (false alarms) or from an
    injected pool (detections), with the gate's adaptive looks."""
    from perfgate.gate.sequential_looks import run_looks

    if AA not in pools:
        raise ConfigError(f"evaluate_sequential: no {AA!r} pool (got {', '.join(pools) or 'none'})")
    rng = np.random.default_rng(seed)
    aa = list(pools[AA])
    if len(aa) < record_launches + budget.max_launches:
        raise ConfigError(f"the A/A pool has {len(aa)} launches: a baseline of {record_launches} and up to "
                          f"{budget.max_launches} current launches need {record_launches + budget.max_launches}")
    base_step = _geomean(aa, "step_time_ms")
    rows, mean_launches = [], {}
    for name, pool in pools.items():
        pool = list(pool)
        if name != AA and len(pool) < budget.max_launches:
            continue
        outcomes, used = [], []
        for _ in range(runs):
            order = rng.permutation(len(aa))
            baseline = [aa[i] for i in order[:record_launches]]
            stream = ([aa[i] for i in order[record_launches:]] if name == AA
                      else [pool[i] for i in rng.permutation(len(pool))])
            run = run_looks(baseline, lambda k: stream[k], policy, budget, clock=lambda: 0.0)
            outcomes.append(run.outcome)
            used.append(len(run.current))
        step = _geomean(pool, "step_time_ms")
        realized = step / base_step - 1.0 if step and base_step else None   # the A/A pool: 0.0
        rows.append(_rate_row(name, None if name == AA else (injected or {}).get(name), realized, outcomes, None))
        mean_launches[name] = float(np.mean(used))
    return SequentialTable(record_launches=record_launches, budget=budget, alpha=policy.alpha, rows=rows,
                           mean_launches=mean_launches)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``perfgate calibrate WORKLOAD --launches N --inject 2,3,5 --phase forward --k 3,5``."""
    from perfgate.settings.options import add_command_options

    p = subparsers.add_parser(
        "calibrate", help="measure false-alarm and detection rates of the gate on this machine",
        description="Run an A/A pool of N launches of WORKLOAD and pools with an injected slowdown in one "
                    "phase, then compare disjoint k-vs-k subsets with the gate's statistics. Writes "
                    "calibration.json and calibration.md.")
    p.add_argument("workloads", nargs=1, metavar="WORKLOAD", help="the workload to calibrate")
    p.add_argument("--inject", default="2,3,5", metavar="PCTS", help="injected slowdowns in %% of step time")
    p.add_argument("--phase", default=None,
                   help="phase that gets the slowdown (workload --slow-phase; default forward, or the phase "
                        "recorded in --from-json)")
    p.add_argument("--k", dest="k_values", default="3,5", metavar="KS", help="launches per side to evaluate")
    p.add_argument("--max-comparisons", type=int, default=500, metavar="N",
                   help="comparisons per pool and k, and simulated gate runs per pool (default 500)")
    p.add_argument("--inject-on", choices=("cpu", "gpu"), default="cpu",
                   help="cpu: a sleep in the phase (--slow-ms); gpu: a spinning GPU kernel launched in it "
                        "(--slow-gpu-ms), which slows a GPU-bound step where a sleep hides (default cpu)")
    p.add_argument("--workload-args", default="", metavar="ARGS",
                   help="extra arguments for every launch of the workload (one string, split like a shell)")
    p.add_argument("--pool", type=int, default=None, metavar="N",
                   help="launches per pool (default 20; --launches is taken as this too)")
    p.add_argument("--alpha", type=float, default=None, help="false-alarm budget (default 0.01)")
    p.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder (default: the run folder)")
    p.add_argument("--from-json", type=Path, default=None, metavar="FILE",
                   help="re-evaluate the pools of an earlier calibration.json instead of launching")
    add_command_options(p)
    p.set_defaults(func=cmd_calibrate)
    return p


def cmd_calibrate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from perfgate.settings.options import settings_from_args
    from perfgate.commands.run import specs_on_this_machine
    from perfgate.pipeline.workload_run import compare_policy, new_run_dir

    try:
        ks = _csv_numbers(args.k_values, "--k", int)
        pcts = _csv_numbers(args.inject, "--inject")
        pool_size = args.pool if args.pool is not None else args.launches
        args.launches = None   # the pool size, not the gate's fixed design
        settings = settings_from_args(args)
        spec = specs_on_this_machine(settings)[0]
        policy = compare_policy(settings, spec)
        if args.alpha is not None:
            policy = replace(policy, alpha=args.alpha)
        if args.from_json is not None:
            data = read_calibration(args.from_json)
            pools, injected, walls = data["pools"], data["injected"], data["launch_wall_s"]
            phase = args.phase or data.get("phase") or "forward"
            out = args.out or args.from_json.parent
        else:
            n = pool_size if pool_size is not None else 20
            if n < 2 * min(ks):
                raise ConfigError(f"option --launches: {n} is too few for k = {min(ks)} (need >= {2 * min(ks)})")
            phase = args.phase or "forward"
            run_dir = new_run_dir(settings.artifacts_dir, f"calibrate-{spec.full_name}")
            out = args.out or run_dir
            pools, injected, walls = run_pools(
                calibration_launcher(spec, settings, run_dir, shlex.split(args.workload_args)), launches=n,
                inject_pcts=pcts, phase=phase,
                knob="--slow-gpu-ms" if args.inject_on == "gpu" else "--slow-ms",
                log=lambda s: print(s, file=sys.stderr, flush=True))
    except PerfgateError as exc:
        print(f"perfgate: error: {exc}", file=sys.stderr)
        return 2
    mean_wall = float(np.mean(walls)) if walls else None
    tables = [evaluate_pools(pools, k, policy, args.max_comparisons, injected=injected, phase=phase,
                             launch_wall_s=mean_wall) for k in ks]
    try:
        gate = [evaluate_sequential(pools, settings.record_launches, settings.budget, policy, args.max_comparisons,
                                    injected=injected)]
    except ConfigError as exc:
        print(f"perfgate: note: no evaluation of the adaptive gate: {exc}", file=sys.stderr)
        gate = []
    out.mkdir(parents=True, exist_ok=True)
    (out / "calibration.json").write_text(json.dumps(
        {"workload": spec.full_name, "phase": phase, "injected": injected, "pools": pools,
         "launch_wall_s": walls, "tables": [t.to_dict() for t in tables],
         "gate": [g.to_dict() for g in gate]}, indent=2, sort_keys=True, default=str))
    md = f"### Calibration of {spec.full_name}\n\n" + "\n".join([*(g.to_markdown() for g in gate), *(t.to_markdown() for t in tables)])
    (out / "calibration.md").write_text(md)
    print(md)
    print(f"perfgate: calibration written to {out}", file=sys.stderr)
    return 0
