"""Regression attribution: which phases, which GPU idle time, which newly firing rules and which
kernels account for the change in step time between a baseline and a current run.

Phase CPU times per step add up to the mean step time together with the step's self time
(step - sum of phases), so the per-phase deltas plus ``unexplained_delta_ms`` equal the mean
step-time delta exactly."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from perfgate.diagnosis import resources
from perfgate.diagnosis import account
from perfgate.diagnosis.comm import collectives_changed, comm_reason, leads, runs_per_step
from perfgate.diagnosis.differences import moved_waits, straggler_reason
from perfgate.diagnosis.evidence import gap_idle_by_phase_ms, idle_ms_per_step, phase_ms, step_mean_ms
from perfgate.records.diagnosis import Attribution, Finding, KernelDelta, PhaseDelta
from perfgate.records.staleness import Staleness
from perfgate.records.facts import TraceFacts
from perfgate.records.model import Analysis, MetricComparison, Verdict

KERNEL_DELTAS_SHOWN = 10

def _pick(values: Sequence[Any], key: Callable[[Any], float]) -> Any:
    """The element whose key is the (lower) median of ``values``."""
    ordered = sorted(values, key=key)
    return ordered[(len(ordered) - 1) // 2]


def _one(value: Analysis | Sequence[Analysis]) -> Analysis:
    """An Analysis (:func:`as_the_table_sees` of a sequence)."""
    if isinstance(value, Analysis):
        return value
    if not value:
        raise ValueError("explain_regression: an empty sequence of launches")
    return as_the_table_sees(value)


def as_the_table_sees(launches: Sequence[Analysis]) -> Analysis:
    """The launches as the verdict's table states them: the median launch (its kernels, facts and
    GPU detail), its step's mean and median and each phase's CPU time per step at the table's
    centre over the launches (perfgate.gate.statistics.center), so that a reason's figures come
    from the same launches as the table's (a CPU trial once read ``optimizer x1.19`` from one
    launch beside the table's ``optimizer +80.6 %``)."""
    from perfgate.gate.metric_specs import spec_for
    from perfgate.gate.statistics import center

    one = median_launch(launches)
    if len(launches) == 1:
        return one
    summaries = [a.steps.summary_ms for a in launches]
    summary = replace(one.steps.summary_ms, mean=center([s.mean for s in summaries], True),
                      median=center([s.median for s in summaries], True))
    phases = {}
    for name, phase in one.phases.items():
        values = [a.phases[name].cpu_per_step_ms for a in launches if name in a.phases]
        phases[name] = replace(phase, cpu_per_step_ms=center(values, spec_for(f"phase.{name}.cpu_ms").log_scale))
    return replace(one, steps=replace(one.steps, summary_ms=summary), phases=phases)


def _phase_deltas(base: Analysis, cur: Analysis) -> tuple[PhaseDelta, ...]:
    names = list(dict.fromkeys([*base.phases, *cur.phases]))
    deltas = [PhaseDelta(n, phase_ms(base, n), phase_ms(cur, n)) for n in names]
    return tuple(sorted(deltas, key=lambda d: -d.delta_ms))


def _kernel_deltas(base: Analysis, cur: Analysis) -> tuple[KernelDelta, ...]:
    def per_step(a: Analysis) -> dict[str, tuple[float, float]]:
        if a.gpu is None or a.steps.count <= 0:
            return {}
        out: dict[str, tuple[float, float]] = {}
        for k in a.gpu.top_kernels:
            c, t = out.get(k.name, (0.0, 0.0))
            out[k.name] = (c + k.count / a.steps.count, t + k.total_ms / a.steps.count)
        return out

    b, c = per_step(base), per_step(cur)
    deltas = [KernelDelta(n, c.get(n, (0.0, 0.0))[0] - b.get(n, (0.0, 0.0))[0],
                          b.get(n, (0.0, 0.0))[1], c.get(n, (0.0, 0.0))[1])
              for n in dict.fromkeys([*b, *c])]
    deltas.sort(key=lambda d: -abs(d.ms_delta_per_step))
    return tuple(deltas[:KERNEL_DELTAS_SHOWN])


def _idle_by_phase(a: Analysis, facts: TraceFacts | None) -> dict[str, float]:
    if facts is not None and facts.idle_ms_per_step is not None:
        return dict(facts.idle_by_phase_ms)
    return gap_idle_by_phase_ms(a)


def _comparisons(comparisons: Any) -> tuple[MetricComparison, ...]:
    if comparisons is None:
        return ()
    rows = getattr(comparisons, "comparisons", comparisons)
    return tuple(r for r in rows if isinstance(r, MetricComparison))


def explain_regression(
    baseline: Analysis | Sequence[Analysis],
    current: Analysis | Sequence[Analysis],
    comparisons: Sequence[MetricComparison] | Any | None = None,
    *,
    provenance: Staleness | None = None,
    same_code: bool = False,
    machine: str | None = None,
) -> Attribution:
    """Attribute the change from ``baseline`` to ``current``, slower or faster. Each side is an
    Analysis or a sequence of launches (the median launch by mean step time is used; a baseline's
    launches: ``Baseline.launch_analyses``, a file's: ``Analysis.from_dict``). ``comparisons``:
    MetricComparison rows or an object with ``.comparisons`` (compare.Outcome). Each side's facts
    (``Analysis.facts``, TraceFacts) sharpen the rules. ``provenance``: how the baseline differs
    from this run's code and software (perfgate.baselines.provenance), said first; the reasons a
    software change may explain too are named. ``same_code``: both sides ran the same code, so a
    slower step in which every part grew alike is the machine (perfgate.diagnosis.machine), said
    with ``machine`` (how its state differed), and no reason guesses at an edit or names a likely
    change."""
    from perfgate.diagnosis.machine import (slower_machine_reason, unchanged_code_reason,
                                          unchanged_code_text)
    from perfgate.diagnosis.one_run import diagnose

    base, cur = _one(baseline), _one(current)
    base_facts, cur_facts = base.facts, cur.facts
    base_diag, cur_diag = diagnose(base), diagnose(cur)

    before = {f.rule for f in base_diag.findings}
    after = {f.rule for f in cur_diag.findings}
    notes: list[str] = []
    partial = base.gpu is None and cur.gpu is not None
    if partial:
        notes.append("the baseline keeps no GPU detail (gpu, gpu_idle): rules, kernels and idle "
                     "by phase are not compared")
        new: tuple[Finding, ...] = ()
        resolved: tuple[Finding, ...] = ()
    else:
        new = tuple(f for f in cur_diag.findings if f.rule not in before)
        resolved = tuple(f for f in base_diag.findings if f.rule not in after)
    phases = _phase_deltas(base, cur)
    idle_b, idle_c = _idle_by_phase(base, base_facts), _idle_by_phase(cur, cur_facts)
    idle_phase_delta = {} if partial or base.gpu_idle is None or cur.gpu_idle is None else {
        p: idle_c.get(p, 0.0) - idle_b.get(p, 0.0) for p in dict.fromkeys([*idle_b, *idle_c])}
    ib, ic = idle_ms_per_step(base), idle_ms_per_step(cur)
    kernels = () if partial else _kernel_deltas(base, cur)
    step_delta = step_mean_ms(cur) - step_mean_ms(base)
    code_changed = provenance is not None and bool(provenance.code or provenance.edits)
    reasons, unlocated = account.reasons(base, cur, new, resolved, phases, idle_phase_delta, base_facts, cur_facts,
                                  step_delta, kernels, code_changed)
    comm = None if step_delta <= 0 else comm_reason(
        base.comm, cur.comm, step_delta, base_facts.kernels_by_phase if base_facts else None,
        cur_facts.kernels_by_phase if cur_facts else None,
        runs_per_step(base.phases, base.steps.count), runs_per_step(cur.phases, cur.steps.count))
    if comm is not None:          # what changed in communication, before the phases it shows in
        reasons.insert(0 if leads(comm, step_delta) else len(reasons), comm)
    # which rank: said before what changed in the job's phases; but where the collectives per step
    # changed, the ranks wait for each other at more points, and a skew they had before grows with
    # them: that is no slow rank
    straggler = (straggler_reason(base.ranks, cur.ranks, step_delta)
                 if step_delta > 0 and not collectives_changed(comm) else None)
    slower_machine = slower_machine_reason(phases, step_mean_ms(base), step_mean_ms(cur), machine) if same_code else None
    if slower_machine is not None:
        reasons, unlocated, comm, straggler = [slower_machine], [], None, None
    elif same_code:           # what moved, but no edit: none was made
        reasons = [unchanged_code_reason(r) for r in reasons]
    if straggler is not None:
        reasons.insert(0, straggler)
    else:         # a wait that moved between ranks (no rank is slower); beside a straggler it is its wait
        notes += moved_waits(base.ranks, cur.ranks, step_delta)
    reason, cause = account.first_reason(reasons, step_delta)
    notes += account.other_way(base, cur, new, resolved, phases, idle_phase_delta, base_facts, cur_facts, step_delta)
    rows = _comparisons(comparisons)
    lead = resources.leading_reason(rows, base, cur)   # memory, energy, kernel launches per batch
    if lead is not None:
        reason, cause = (unchanged_code_text(lead[0]), None) if same_code else (lead[0], lead[1])
        notes += [f"also regressed: {t}" for t in lead[2]]
    else:
        notes += resources.notes(rows, base, cur)
    explained = min(abs(step_delta), sum(account.shares([r.ms for r in reasons], step_delta)))
    regressed = tuple(c.metric for c in rows if c.verdict == Verdict.REGRESSED)
    return Attribution(
        step_mean_delta_ms=step_delta,
        step_median_delta_ms=cur.steps.summary_ms.median - base.steps.summary_ms.median,
        phase_deltas=phases,
        unexplained_delta_ms=account.self_ms(cur) - account.self_ms(base),
        gpu_idle_delta_ms=None if ib is None or ic is None else ic - ib,
        idle_by_phase_delta_ms=idle_phase_delta,
        new_findings=new, resolved_findings=resolved, kernel_deltas=kernels,
        first_reason=reason, cause=cause, regressed_metrics=regressed,
        baseline_bottleneck=None if partial else base_diag.bottleneck,
        current_bottleneck=cur_diag.bottleneck,
        notes=tuple(notes), reasons=tuple(reasons), explained_ms=explained, unlocated=tuple(unlocated),
        baseline_differs=provenance.text() if provenance is not None and provenance.stale else None,
        software_explains=account.software_explains(reasons, provenance),
    )


def median_launch(values: Sequence[Analysis]) -> Analysis:
    """The launch whose mean step time is the (lower) median of ``values``."""
    return _pick(list(values), step_mean_ms)

