"""The gate's verdict: ``compare_launches`` turns per-launch metric mappings of a baseline and a
current side into per-metric comparisons and one overall verdict, under a ComparePolicy. What the
metrics mean and the tolerance grammar are perfgate.gate.metric_specs.

Decision rule (docs/statistics.md): a gating metric REGRESSES only when it got worse beyond its
tolerance (relative AND absolute floor) AND the launch-level one-sided Student t-test on logs is
significant (p < alpha; Holm-adjusted across the secondary metrics). Beyond tolerance but not
significant is INCONCLUSIVE (more launches help). With one launch per side the tolerance decides.
"""
from __future__ import annotations

import fnmatch
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from perfgate.errors import ConfigError
from perfgate.gate import statistics
from perfgate.gate.metric_specs import LOWER, METRIC_SPECS, OFF, alpha_problem, spec_for
from perfgate.gate.wording import describe, fmt_metric_change, fmt_value
from perfgate.records.model import MetricComparison, Tolerance, Verdict, fails

__all__ = ["ComparePolicy", "Outcome", "compare_launches", "needs_more_launches"]

# --------------------------------------------------------------------------- policy and outcome


@dataclass(frozen=True)
class ComparePolicy:
    """How strict the gate is.

    ``tolerances``: metric name or fnmatch pattern -> Tolerance, overriding the spec defaults (an exact
    name beats a pattern; among patterns the longest wins). ``tolerance_overrides``: tables that beat
    ``tolerances``, highest first: a metric takes its tolerance from the first table with an entry
    for it (perfgate.settings.config's precedence: option > workload table > global table).
    ``alpha``: one-sided false-alarm budget per primary metric and for the secondary family (Holm). ``strict_new``: a missing baseline fails.
    ``gate_secondary``: False makes every non-primary metric report-only. ``gating``: metric name or
    pattern -> True/False overriding a spec's gating flag (e.g. {"sync_calls_per_step": True}).
    ``gate_alone``: metric names or patterns that gate on their own for this workload, as memory and
    energy do (e.g. ("kernels_per_step",) for an inference workload: a lost compilation fails even
    when latency holds).
    """

    tolerances: Mapping[str, Tolerance] = field(default_factory=dict)
    tolerance_overrides: tuple[Mapping[str, Tolerance], ...] = ()
    alpha: float = 0.01
    strict_new: bool = False
    gate_secondary: bool = True
    gating: Mapping[str, bool] = field(default_factory=dict)
    gate_alone: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        problem = alpha_problem(self.alpha)
        if problem:
            raise ConfigError(f"alpha: {problem}, got {self.alpha!r}")

    def tolerance_for(self, metric: str) -> Tolerance:
        for table in (*self.tolerance_overrides, self.tolerances):
            found = _lookup(table, metric)
            if found is not None:
                return found
        return spec_for(metric).default_tolerance

    def is_gating(self, metric: str) -> bool:
        spec = spec_for(metric)
        override = _lookup(self.gating, metric)
        gating = spec.gating if override is None else bool(override)
        if self.alone(metric) and override is None:
            gating = True
        elif not spec.primary and not self.gate_secondary:
            gating = False
        return gating and self.tolerance_for(metric) != OFF

    def alone(self, metric: str) -> bool:
        """Whether ``metric`` gates on its own (its spec's ``alone``, or ``gate_alone``), not
        behind a worse step time."""
        return spec_for(metric).alone or any(fnmatch.fnmatchcase(metric, p) for p in self.gate_alone)


def _lookup(table: Mapping[str, Any], metric: str) -> Any:
    """The value for ``metric``: its exact key, else the longest matching fnmatch pattern, else None."""
    if metric in table:
        return table[metric]
    hits = [p for p in table if fnmatch.fnmatchcase(metric, p)]
    return table[max(hits, key=len)] if hits else None


@dataclass(frozen=True)
class Outcome:
    """Overall verdict, the per-metric rows (primary metrics first) and a one-line summary.
    ``strict``: judged with ``ComparePolicy.strict_new`` (a missing baseline fails); ``paired``: of
    interleaved pairs; ``within``: the metrics significant but within tolerance."""

    verdict: Verdict
    comparisons: list[MetricComparison]
    summary: str
    strict: bool = False
    n_baseline: int = 0
    n_current: int = 0
    paired: bool = False
    within: tuple[str, ...] = ()

    @property
    def failed(self) -> bool:
        """The verdict fails the build (model.fails: REGRESSED, or NEW under strict_new)."""
        return fails(self.verdict, self.strict)

    def row(self, metric: str) -> MetricComparison | None:
        return next((c for c in self.comparisons if c.metric == metric), None)

    @property
    def regressed(self) -> list[MetricComparison]:
        """Gating rows that regressed, worst first."""
        rows = [c for c in self.comparisons if c.gating and c.verdict == Verdict.REGRESSED]
        return sorted(rows, key=lambda c: -_worse_change(c))


def needs_more_launches(outcome: Outcome) -> bool:
    """True when more launches could settle the verdict: nothing failed and a gating metric is
    INCONCLUSIVE (beyond tolerance but not yet significant)."""
    if outcome.verdict in (Verdict.REGRESSED, Verdict.NEW, Verdict.ERROR):
        return False
    return any(c.gating and c.verdict == Verdict.INCONCLUSIVE for c in outcome.comparisons)


# --------------------------------------------------------------------------- comparing


def _values(launches: Sequence[Mapping[str, float]], metric: str) -> list[float]:
    out = []
    for launch in launches:
        v = launch.get(metric)
        if v is not None and math.isfinite(float(v)):
            out.append(float(v))
    return out


def _paired_values(baseline: Sequence[Mapping[str, float]], current: Sequence[Mapping[str, float]],
                   metric: str) -> tuple[list[float], list[float]]:
    """The values of ``metric`` in the pairs that measured it on both sides, side by side."""
    pairs = [(_values([b], metric), _values([c], metric)) for b, c in zip(baseline, current)]
    kept = [(b[0], c[0]) for b, c in pairs if b and c]
    return [b for b, _ in kept], [c for _, c in kept]


def _metric_order(names: Sequence[str]) -> list[str]:
    rank = {id(s): i for i, s in enumerate(METRIC_SPECS)}

    def key(name: str) -> tuple[int, int, str]:
        spec = spec_for(name)
        return (0 if spec.primary else 1, rank.get(id(spec), len(METRIC_SPECS)), name)

    return sorted(names, key=key)


def _worse_change(c: MetricComparison) -> float:
    if c.change is None:
        return math.inf if (c.delta or 0.0) != 0.0 else 0.0
    return c.change if c.direction == LOWER else -c.change


@dataclass(frozen=True)
class _Row:
    metric: str
    base: list[float]
    cur: list[float]
    test: statistics.ShiftTest | None
    log_scale: bool


def compare_launches(
    baseline: Sequence[Mapping[str, float]] | None,
    current: Sequence[Mapping[str, float]],
    policy: ComparePolicy = ComparePolicy(),
    *,
    paired: bool = False,
) -> Outcome:
    """Compare per-launch metric mappings (each one launch's ``Analysis.metrics()``).

    Baseline None or empty -> NEW. A metric missing on one side -> NO-DATA row (non-gating). Per-metric
    verdicts PASS / REGRESSED / IMPROVED / INCONCLUSIVE; overall REGRESSED if any gating metric
    regressed, else INCONCLUSIVE if a primary metric is, else IMPROVED if a primary improved beyond
    tolerance, else PASS (NO-DATA when no primary metric could be compared).

    ``paired``: ``baseline[i]`` and ``current[i]`` are an interleaved pair (perfgate.gate.paired_looks):
    each metric is tested on the differences of the pairs that measured it on both sides
    (statistics.paired_shift_test), the rest as above.
    """
    if not current:
        raise ValueError("compare_launches() needs at least one current launch")
    if paired and baseline and len(baseline) != len(current):
        raise ValueError(f"paired compare_launches() needs pairs ({len(baseline)} != {len(current)} launches)")
    names = list(dict.fromkeys([m for launch in current for m in launch]
                               + [m for launch in (baseline or []) for m in launch]))
    names = _metric_order(names)
    if not baseline:
        return _new_outcome(names, current, policy)

    rows: list[_Row] = []
    no_data: list[MetricComparison] = []
    for metric in names:
        spec = spec_for(metric)
        b, c = _paired_values(baseline, current, metric) if paired else (_values(baseline, metric),
                                                                          _values(current, metric))
        if not b or not c:
            no_data.append(MetricComparison(
                metric=metric, unit=spec.unit, direction=spec.direction,
                baseline=statistics.center(b, spec.log_scale) if b else None,
                current=statistics.center(c, spec.log_scale) if c else None,
                change=None, delta=None, tolerance=policy.tolerance_for(metric),
                verdict=Verdict.NO_DATA, gating=False,
                note="missing in the current launches" if b else "not in the baseline"))
            continue
        log_scale = spec.log_scale and min(b + c) > 0
        test = statistics.paired_shift_test if paired else statistics.shift_test
        rows.append(_Row(metric, b, c, test(b, c, log_scale=log_scale, alpha=policy.alpha), log_scale))

    # Holm across each gating non-primary family, separately for the two directions: the
    # secondary family (behind step time) and the metrics that gate alone (memory, energy, ...).
    p_adj: dict[str, tuple[float, float]] = {}
    sizes: dict[str, int] = {}
    gated = [r for r in rows if r.test is not None and not spec_for(r.metric).primary and policy.is_gating(r.metric)]
    for family in ([r for r in gated if not policy.alone(r.metric)], [r for r in gated if policy.alone(r.metric)]):
        worse = [_p_worse(r) for r in family]
        better = [_p_better(r) for r in family]
        for r, pw, pb in zip(family, statistics.holm(worse), statistics.holm(better)):
            p_adj[r.metric], sizes[r.metric] = (pw, pb), len(family)

    judged = [_compare_row(r, policy, p_adj.get(r.metric), sizes.get(r.metric, 0)) for r in rows]
    comparisons = _order_rows(_gatekeep([row for row, _ in judged], policy) + no_data)
    within = tuple(row.metric for row, decision in judged if decision.significant_within_tolerance)
    return outcome_of(comparisons, timed_launches(baseline), timed_launches(current), strict=policy.strict_new,
                      within=within, paired=paired)


def outcome_of(comparisons: list[MetricComparison], n_baseline: int, n_current: int, *, strict: bool = False,
               within: tuple[str, ...] = (), paired: bool = False) -> Outcome:
    """The overall verdict of judged rows and its one line (:func:`compare_launches`'s last step)."""
    verdict = _overall(comparisons)
    return Outcome(verdict=verdict, comparisons=comparisons, summary=_summary(
        verdict, comparisons, n_baseline, n_current, within, paired=paired), strict=strict,
        n_baseline=n_baseline, n_current=n_current, paired=paired, within=within)


def timed_launches(launches: Sequence[Mapping[str, float]]) -> int:
    """How many launches measured step time: a profile launch's mapping holds only the GPU facts
    the timing launches lack (``baseline.profile_metrics``), so it is not counted (all are when none did)."""
    return sum(1 for m in launches if any(spec_for(k).primary for k in m)) or len(launches)


def _gatekeep(rows: list[MetricComparison], policy: ComparePolicy) -> list[MetricComparison]:
    """Serial gatekeeping: the secondary family (phases, GPU idle) gates only beside a primary
    step-time metric that REGRESSED (worse beyond its tolerance: significantly, or by the tolerance
    alone with one launch per side); it then names where the time went. Otherwise a secondary
    regression is reported, never gating: where the CPU waits moves between phases of a GPU-bound
    step without slowing training (A/A runs on an H100 showed phase.backward.cpu_ms moving 24 %
    while step time moved 0.1 %). A step time that is significantly worse but within its tolerance
    does not open the family: a steady job drifts by that much between a recording and a later run
    (an unchanged 2-rank DDP rerun on an H100 failed so, most likely: +1.4 %, significant, with
    forward's CPU time +17 %), and neither does one beyond its tolerance but not significant (a
    noisy workload's drift). Metrics that gate alone (``policy.alone``: memory, energy) are not
    behind this gate."""
    primaries = [r for r in rows if spec_for(r.metric).primary and r.gating]
    if any(r.verdict == Verdict.REGRESSED for r in primaries):
        return rows
    closed = "not gating: step time is not worse beyond its tolerance (secondary metrics gate only behind it)"
    return [replace(r, gating=False, note="; ".join(filter(None, (r.note, closed))))
            if r.gating and not spec_for(r.metric).primary and not policy.alone(r.metric)
            and r.verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE)
            else r for r in rows]


def _order_rows(rows: list[MetricComparison]) -> list[MetricComparison]:
    order = {m: i for i, m in enumerate(_metric_order([r.metric for r in rows]))}
    return sorted(rows, key=lambda r: order[r.metric])


def _p_worse(r: _Row) -> float:
    assert r.test is not None
    return r.test.p_increase if spec_for(r.metric).direction == LOWER else r.test.p_decrease


def _p_better(r: _Row) -> float:
    assert r.test is not None
    return r.test.p_decrease if spec_for(r.metric).direction == LOWER else r.test.p_increase


def _compare_row(r: _Row, policy: ComparePolicy, adjusted: tuple[float, float] | None,
                 family_size: int) -> tuple[MetricComparison, statistics.Decision]:
    """The row of one metric, and the decision that gave its verdict."""
    spec = spec_for(r.metric)
    tol = policy.tolerance_for(r.metric)
    base, cur = statistics.center(r.base, r.log_scale), statistics.center(r.cur, r.log_scale)
    delta = cur - base
    change = cur / base - 1.0 if base != 0 else None
    sign = 1.0 if spec.direction == LOWER else -1.0
    if change is not None:
        worse_change = sign * change
    else:
        worse_change = math.copysign(math.inf, sign * delta) if delta != 0 else 0.0
    ci_low = ci_high = p_worse = p_better = None
    notes: list[str] = []
    if r.test is not None:
        if r.log_scale:
            ci_low, ci_high = math.expm1(r.test.ci_low), math.expm1(r.test.ci_high)
        elif base != 0:
            ci_low, ci_high = r.test.ci_low / base, r.test.ci_high / base
        p_worse, p_better = _p_worse(r), _p_better(r)
        if adjusted is not None:
            p_worse, p_better = adjusted
            which = "metrics gating alone" if policy.alone(r.metric) else "secondary metrics"
            notes.append(f"p Holm-adjusted over {family_size} {which}")
    decision = statistics.decide(
        worse_change=worse_change, worse_delta=sign * delta,
        rel_tolerance=tol.rel, abs_tolerance=tol.abs,
        p_worse=p_worse, p_better=p_better, alpha=policy.alpha,
        untested_note=_untested_note(r),
    )
    if decision.note:
        notes.insert(0, decision.note)
    if spec.log_scale and not r.log_scale:
        notes.append("compared as a difference (a value <= 0)")
    if tol == OFF:
        notes.append("tolerance off: reported only")
    return MetricComparison(
        metric=r.metric, unit=spec.unit, direction=spec.direction, baseline=base, current=cur,
        change=change, delta=delta, tolerance=tol, verdict=decision.verdict,
        gating=policy.is_gating(r.metric), p_value=p_worse, ci_low=ci_low, ci_high=ci_high,
        note="; ".join(notes)), decision


def _untested_note(r: _Row) -> str:
    if len(r.base) < 2 and len(r.cur) < 2:
        return "one launch per side: tolerance only, no significance test (use 3+ launches)"
    return "no launch-to-launch variance: tolerance only"


def _overall(rows: list[MetricComparison]) -> Verdict:
    if any(r.gating and r.verdict == Verdict.REGRESSED for r in rows):
        return Verdict.REGRESSED
    primaries = [r for r in rows if spec_for(r.metric).primary and r.verdict != Verdict.NO_DATA]
    if not primaries:
        return Verdict.NO_DATA
    if any(r.verdict == Verdict.INCONCLUSIVE for r in primaries):
        return Verdict.INCONCLUSIVE
    if any(r.verdict == Verdict.IMPROVED for r in primaries):
        return Verdict.IMPROVED
    return Verdict.PASS


def _new_outcome(names: list[str], current: Sequence[Mapping[str, float]], policy: ComparePolicy) -> Outcome:
    rows = []
    for metric in names:
        spec = spec_for(metric)
        c = _values(current, metric)
        rows.append(MetricComparison(
            metric=metric, unit=spec.unit, direction=spec.direction, baseline=None,
            current=statistics.center(c, spec.log_scale) if c else None, change=None, delta=None,
            tolerance=policy.tolerance_for(metric), verdict=Verdict.NEW, gating=False, note="no baseline"))
    step = next((r for r in rows if r.metric == "step_time_ms" and r.current is not None), None)
    what = f"; step_time_ms {fmt_value(step.current, 'ms')}" if step else ""
    n = timed_launches(current)
    summary = f"NEW: no baseline{what} ({n} launch{'es' if n != 1 else ''})"
    if policy.strict_new:
        summary += "; strict mode: a missing baseline fails"
    return Outcome(verdict=Verdict.NEW, comparisons=rows, summary=summary, strict=policy.strict_new,
                   n_baseline=0, n_current=n)


# --------------------------------------------------------------------------- words


def _summary(verdict: Verdict, rows: list[MetricComparison], n_b: int, n_c: int,
             within: Collection[str] = (), *, paired: bool = False) -> str:
    """The outcome's one line; ``within``: the metrics whose change is significant but within
    tolerance (statistics.Decision), named after a PASS or IMPROVED when they gate."""
    launches = (f"{n_c} interleaved pair{'s' if n_c != 1 else ''}" if paired
                else f"{n_b} vs {n_c} launch{'es' if max(n_b, n_c) != 1 else ''}")
    if verdict == Verdict.REGRESSED:
        bad = sorted((r for r in rows if r.gating and r.verdict == Verdict.REGRESSED), key=lambda r: -_worse_change(r))
        return "REGRESSED: " + "; ".join(describe(r) for r in bad) + f" [{launches}]"
    if verdict == Verdict.INCONCLUSIVE:
        unsure = [r for r in rows if r.gating and r.verdict == Verdict.INCONCLUSIVE]
        return ("INCONCLUSIVE: " + "; ".join(describe(r) for r in unsure)
                + f" beyond tolerance but not significant [{launches}]; more launches needed")
    if verdict == Verdict.NO_DATA:
        return f"NO-DATA: no step-time metric on both sides [{launches}]"
    primary = [r for r in rows if spec_for(r.metric).primary and r.verdict != Verdict.NO_DATA]
    text = f"{verdict}: " + "; ".join(describe(r) for r in primary) + f" [{launches}]"
    warned = [r for r in rows if r.gating and r.metric in within]
    if warned:
        text += "; significant but within tolerance: " + ", ".join(f"{r.metric} {fmt_metric_change(r)}" for r in warned)
    return text
