"""Regression attribution: which phases, which GPU idle time, which newly firing rules and which
kernels account for the change in step time between a baseline and a current run.

Phase CPU times per step add up to the mean step time together with the step's self time
(step - sum of phases), so the per-phase deltas plus ``unexplained_delta_ms`` equal the mean
step-time delta exactly."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from perfgate.diagnosis.evidence import (
    BETWEEN_STEPS,
    data_phase,
    gap_idle_by_phase_ms,
    idle_ms_per_step,
    phase_ms,
    step_mean_ms,
)
from perfgate.diagnosis import resources
from perfgate.diagnosis.comm import collectives_changed, comm_reason, leads, runs_per_step, without_communication
from perfgate.diagnosis.differences import HOST_BOUND_IDLE, MIN_MS, differences, straggler_reason
from perfgate.diagnosis.facts import STEP_CODE, TraceFacts, facts_from_mapping
from perfgate.diagnosis.records import (
    Attribution,
    Diagnosis,
    Finding,
    KernelDelta,
    PhaseDelta,
    Reason,
)
from perfgate.diagnosis.rules import RULE_BY_ID
from perfgate.model import Analysis, MetricComparison, Verdict

KERNEL_DELTAS_SHOWN = 10
MIN_REASON_MS = 0.01            # deltas below this (ms/step) are not named as a reason

def _pick(values: Sequence[Any], key: Callable[[Any], float]) -> Any:
    """The element whose key is the (lower) median of ``values``."""
    ordered = sorted(values, key=key)
    return ordered[(len(ordered) - 1) // 2]


def _one(value: Analysis | Sequence[Analysis]) -> tuple[Analysis, TraceFacts | None, Diagnosis | None]:
    """An Analysis (the median launch of a sequence), its stored facts and stored diagnosis."""
    if isinstance(value, Analysis):
        analysis = value
    elif not value:
        raise ValueError("explain_regression: an empty sequence of launches")
    else:
        analysis = median_launch(value)
    stored = analysis.extra.get("diagnosis")
    if isinstance(stored, Diagnosis):
        facts = TraceFacts.from_dict(stored.facts) if stored.facts else None
        return analysis, facts, stored
    facts = facts_from_mapping({"diagnosis": stored}) if isinstance(stored, Mapping) else None
    return analysis, facts, None


def _phase_deltas(base: Analysis, cur: Analysis) -> tuple[PhaseDelta, ...]:
    names = list(dict.fromkeys([*base.phases, *cur.phases]))
    deltas = [PhaseDelta(n, phase_ms(base, n), phase_ms(cur, n)) for n in names]
    return tuple(sorted(deltas, key=lambda d: -d.delta_ms))


def _self_ms(a: Analysis) -> float:
    return step_mean_ms(a) - sum(p.cpu_per_step_ms for p in a.phases.values())


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
    deltas = [KernelDelta(n, b.get(n, (0.0, 0.0))[0], c.get(n, (0.0, 0.0))[0],
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


def _reasons(base: Analysis, cur: Analysis, new: tuple[Finding, ...], phases: tuple[PhaseDelta, ...],
             idle_phase: dict[str, float], base_facts: TraceFacts | None,
             cur_facts: TraceFacts | None, step_delta: float) -> list[Reason]:
    """Differences between the two runs that account for part of the step-time change, largest
    first: rules that newly fire (their condition changed), what changed among the kernels and
    synchronizations launched in each phase, and data loading. A rule that fires on both sides is a
    standing condition: never a reason."""
    out: list[Reason] = []
    for f in new:
        rule = RULE_BY_ID.get(f.rule)
        delta = rule.explains_ms(base, cur) if rule is not None else 0.0
        if f.cause is None or delta < MIN_REASON_MS:
            continue
        phase = f.phases[0] if f.phases else None
        out.append(Reason(f"rule:{f.rule}", phase, delta,
                          f"{_where(phase, delta, idle_phase, cur)}: {rule.phrase if rule else f.message}",
                          (rule.reason_cause if rule else None) or f.cause))
    by_phase = {p.name: p.delta_ms for p in phases}
    data = data_phase(cur)
    data_ms = by_phase.get(data, 0.0) + (by_phase.get(BETWEEN_STEPS, 0.0) if data != BETWEEN_STEPS else 0.0)
    if (base_facts is not None and cur_facts is not None and base_facts.kernels_by_phase
            and cur_facts.kernels_by_phase):
        idle_b, idle_c = idle_ms_per_step(base), idle_ms_per_step(cur)
        step = step_mean_ms(cur)
        host_bound = idle_c is not None and step > 0 and idle_c / step >= HOST_BOUND_IDLE
        host_ms = {**by_phase, STEP_CODE: _self_ms(cur) - _self_ms(base)}
        whole = {r.mechanism for r in out} & {"rule:no_mixed_precision", "rule:not_compiled"}
        skip = frozenset([*base_facts.kernels_by_phase, *cur_facts.kernels_by_phase]) if whole else frozenset()
        out += differences(   # NCCL kernels: perfgate.diagnosis.comm names their changes
            without_communication(base_facts.kernels_by_phase), without_communication(cur_facts.kernels_by_phase),
            base_facts.syncs_by_phase,
            cur_facts.syncs_by_phase, host_ms, host_bound,
            0.0 if idle_b is None or idle_c is None else idle_c - idle_b, data_ms,
            cur_facts.d2h_copies_per_step - base_facts.d2h_copies_per_step,
            cur_facts.fp64_kernels_per_step - base_facts.fp64_kernels_per_step, skip)
    if data_ms >= max(MIN_MS, 0.02 * step_delta) and not any(r.where in (data, BETWEEN_STEPS) for r in out):
        out.append(Reason("data_loading", data, data_ms,
                          f"{_where(data, data_ms, idle_phase, cur)}: the loop waits longer for its batches "
                          "(data loading outside the step's GPU work)", None))
    out = [_with_workers(r, base_facts, cur_facts) if r.mechanism in DATA_MECHANISMS else r for r in out]
    # a rule that names no phase (warm-up in the window, long gaps) is scored on the whole step's
    # distribution: it ranks behind a difference located in a phase of the same size
    return sorted(out, key=lambda r: -(_capped(r.ms, step_delta) if r.where is not None
                                       else 0.5 * _capped(r.ms, step_delta)))


DATA_MECHANISMS = ("rule:dataloader_blocking", "data_loading")


def _with_workers(reason: Reason, base: TraceFacts | None, cur: TraceFacts | None) -> Reason:
    """A data-loading reason with what the traces say about the DataLoader's workers: a change in
    their number is the likely edit; an unchanged number rules it out."""
    b = base.dataloader_workers if base is not None else None
    c = cur.dataloader_workers if cur is not None else None
    if b is None or c is None:
        return reason
    head = reason.text.split(": ", 1)[0]
    if c < b:
        return replace(reason, text=f"{head}: DataLoader workers went from {b} to {c}: the loop now waits "
                                    "for each batch", cause="workers")
    return replace(reason, text=f"{head}: the loop waits longer for each batch with the same {c} DataLoader "
                                "workers: a slower dataset or transform?", cause="input pipeline")


def _capped(ms: float, step_delta: float) -> float:
    """No difference accounts for more than the whole change."""
    return min(ms, step_delta) if step_delta > 0 else ms


def _first_reason(reasons: list[Reason], cur: Analysis, phases: tuple[PhaseDelta, ...],
                  idle_phase: dict[str, float], kernels: tuple[KernelDelta, ...],
                  step_delta: float) -> tuple[str, str | None]:
    if reasons:
        return reasons[0].text, reasons[0].cause
    top_phase = phases[0] if phases and phases[0].delta_ms >= MIN_REASON_MS else None
    if top_phase is not None:
        where = _where(top_phase.name, top_phase.delta_ms, idle_phase, cur)
        slower = [k for k in kernels if k.ms_delta_per_step >= MIN_REASON_MS]
        if slower:
            k = slower[0]
            return (f"{where}: kernel {k.name} {k.ms_delta_per_step:+.2f} ms/step "
                    f"({k.count_delta_per_step:+.1f} launches/step)"), None
        return f"{where}, with no change in what it launches or waits for", None
    if step_delta > 0:
        return f"step time {step_delta:+.2f} ms/step outside the instrumented phases (step self time)", None
    return f"no step-time regression ({step_delta:+.2f} ms/step)", None


def _where(phase: str | None, delta: float, idle_phase: dict[str, float], cur: Analysis) -> str:
    if phase is None:
        return f"{delta:+.1f} ms/step"
    idle = idle_phase.get(phase, 0.0)
    note = f" (GPU idle while {phase} open)" if idle >= MIN_REASON_MS and cur.gpu is not None else ""
    if phase == BETWEEN_STEPS:
        phase = "between steps (outside the step range: data wait or host work)"
    return f"{phase} {delta:+.1f} ms/step{note}"


def explain_regression(
    baseline: Analysis | Sequence[Analysis],
    current: Analysis | Sequence[Analysis],
    comparisons: Sequence[MetricComparison] | Any | None = None,
    *,
    baseline_trace: Any | None = None,
    current_trace: Any | None = None,
) -> Attribution:
    """Attribute the change from ``baseline`` to ``current``. Each side is an Analysis or a sequence
    of launches (the median launch by mean step time is used; a baseline's launches:
    ``Baseline.launch_analyses``, a file's: ``Analysis.from_dict``). ``comparisons``: MetricComparison rows or an object with
    ``.comparisons`` (compare.Outcome). Traces, when given, sharpen the rules (see TraceFacts)."""
    from perfgate.diagnosis.one_run import diagnose

    base, base_facts, base_diag = _one(baseline)
    cur, cur_facts, cur_diag = _one(current)
    if base_diag is None or baseline_trace is not None:
        base_diag = diagnose(base, baseline_trace, facts=base_facts)
    if cur_diag is None or current_trace is not None:
        cur_diag = diagnose(cur, current_trace, facts=cur_facts)
    if base_facts is None and base_diag.facts:
        base_facts = TraceFacts.from_dict(base_diag.facts)
    if cur_facts is None and cur_diag.facts:
        cur_facts = TraceFacts.from_dict(cur_diag.facts)

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
    reasons = _reasons(base, cur, new, phases, idle_phase_delta, base_facts, cur_facts, step_delta)
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
    if straggler is not None:
        reasons.insert(0, straggler)
    reason, cause = _first_reason(reasons, cur, phases, idle_phase_delta, kernels, step_delta)
    rows = _comparisons(comparisons)
    lead = resources.leading_reason(rows, base, cur)   # memory, energy, kernel launches per batch
    if lead is not None:
        reason, cause = lead[0], lead[1]
        notes += [f"also regressed: {t}" for t in lead[2]]
    else:
        notes += resources.notes(rows, base, cur)
    explained = min(max(step_delta, 0.0), sum(_capped(r.ms, step_delta) for r in reasons))
    regressed = tuple(c.metric for c in rows if c.verdict == Verdict.REGRESSED)
    return Attribution(
        step_mean_delta_ms=step_delta,
        step_median_delta_ms=cur.steps.summary_ms.median - base.steps.summary_ms.median,
        phase_deltas=phases,
        unexplained_delta_ms=_self_ms(cur) - _self_ms(base),
        gpu_idle_delta_ms=None if ib is None or ic is None else ic - ib,
        idle_by_phase_delta_ms=idle_phase_delta,
        new_findings=new, resolved_findings=resolved, kernel_deltas=kernels,
        first_reason=reason, cause=cause, regressed_metrics=regressed,
        baseline_bottleneck=None if partial else base_diag.bottleneck,
        current_bottleneck=cur_diag.bottleneck,
        notes=tuple(notes), reasons=tuple(reasons), explained_ms=explained,
    )


def median_launch(values: Sequence[Analysis]) -> Analysis:
    """The launch whose mean step time is the (lower) median of ``values``."""
    return _pick(list(values), step_mean_ms)

