"""One account of a change between two runs: the reasons, in the direction of the change (what
made a slower run slower, a faster one faster), each a difference located where it happened and
credited with the milliseconds per step it accounts for; the host time no difference locates; the
largest differences that went the other way; the reasons a software change may explain too. The
explained/unexplained line, the reasons, the kernel table, the rules that stop firing and the
bottleneck change all come from this one comparison (perfgate.diagnosis.attribution)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from perfgate.diagnosis.comm import without_communication
from perfgate.diagnosis.differences import HOST_BOUND_IDLE, MECHANISM_ORDER, MIN_PER_STEP, MODEL_PHASE, differences
from perfgate.diagnosis.evidence import (BETWEEN_STEPS, data_phase, gpu_active, idle_ms_per_step, made_by,
                                        step_mean_ms, workers_words)
from perfgate.diagnosis.faster import FASTER_KERNELS, faster_differences
from perfgate.diagnosis.host import data_reason, host_reasons, machine_reason
from perfgate.diagnosis.mechanisms import families_from_names, replacements
from perfgate.diagnosis.model_change import (MODEL_MECHANISMS, model_change, spread_syncs, told_as_model_change,
                                             work)
from perfgate.records.diagnosis import Finding, KernelDelta, PhaseDelta, Reason
from perfgate.diagnosis.rules import RULE_BY_ID
from perfgate.records.staleness import Staleness
from perfgate.records.facts import STEP_CODE, TraceFacts
from perfgate.records.model import Analysis

MIN_REASON_MS = 0.01            # deltas below this (ms/step) are not named as a reason


def self_ms(a: Analysis) -> float:
    return step_mean_ms(a) - sum(p.cpu_per_step_ms for p in a.phases.values())


def _rule_reasons(base: Analysis, cur: Analysis, changed: tuple[Finding, ...], idle_phase: dict[str, float],
                  faster: bool) -> list[Reason]:
    """The rules whose condition changed, each credited with its own evidence's change: those that
    fire only now for a slower run, those that no longer fire for a faster one."""
    out: list[Reason] = []
    for f in changed:
        rule = RULE_BY_ID.get(f.rule)
        delta = rule.explains_ms(base, cur) if rule is not None else 0.0
        ms = -delta if faster else delta
        if f.cause is None or ms < MIN_REASON_MS:
            continue
        side = base if faster else cur
        phase = f.phases[0] if f.phases and f.phases[0] in side.phases else None   # a phase this run has
        what = f"no longer: {f.message}" if faster else (rule.phrase if rule else f.message)
        out.append(Reason(f"rule:{f.rule}", phase, ms, f"{_where(phase, delta, idle_phase, cur)}: {what}",
                          (rule.reason_cause if rule else None) or f.cause))
    return out


def reasons(base: Analysis, cur: Analysis, new: tuple[Finding, ...], resolved: tuple[Finding, ...],
            phases: tuple[PhaseDelta, ...], idle_phase: dict[str, float], base_facts: TraceFacts | None,
            cur_facts: TraceFacts | None, step_delta: float,
            kernels: tuple[KernelDelta, ...] = (), code_changed: bool = False) -> tuple[list[Reason], list[Reason]]:
    """Differences between the two runs that account for part of the step-time change, the
    largest share first, in the direction of the change (what made a slower run slower, what made
    a faster one faster): rules whose condition changed, what changed among the kernels and
    synchronizations launched in each place, data loading, every phase changing together (the
    machine), and host time no other reason locates (returned apart on a GPU run with other
    reasons: the unlocated rest). A rule that fires on both sides is a standing condition: never a
    reason. ``code_changed``: the provenance says the code differs (the compute phases growing
    together are then the model's work, not the machine's: host.machine_reason)."""
    faster = step_delta < 0
    out = _rule_reasons(base, cur, resolved if faster else new, idle_phase, faster)
    by_phase = {p.name: p.delta_ms for p in phases}
    data = data_phase(cur)
    data_ms = by_phase.get(data, 0.0) + (by_phase.get(BETWEEN_STEPS, 0.0) if data != BETWEEN_STEPS else 0.0)
    located: set[str] = set()
    if (base_facts is not None and cur_facts is not None and base_facts.kernels_by_phase
            and cur_facts.kernels_by_phase):
        idle_b, idle_c = idle_ms_per_step(base), idle_ms_per_step(cur)
        step = step_mean_ms(cur if not faster else base)
        idle = idle_c if not faster else idle_b
        host_bound = idle is not None and step > 0 and idle / step >= HOST_BOUND_IDLE
        host_ms = {**by_phase, STEP_CODE: self_ms(cur) - self_ms(base)}
        idle_delta = 0.0 if idle_b is None or idle_c is None else idle_c - idle_b
        placed = (without_communication(base_facts.kernels_by_phase), without_communication(cur_facts.kernels_by_phase))
        fb, fc = base_facts.kernels_by_family, cur_facts.kernels_by_family
        if faster:
            found = faster_differences(*placed, base_facts.syncs_by_phase, cur_facts.syncs_by_phase, host_ms,
                                       host_bound, idle_delta, base_families=fb, cur_families=fc)
            change = model_change(work(base, base_facts), work(cur, cur_facts))
            if change is not None:     # a model change that made the step faster: the kernels chosen for it
                found = told_as_model_change(found, change, KERNEL_MECHANISMS, faster=True)
        else:   # NCCL kernels: perfgate.diagnosis.comm names their changes
            found = differences(*placed, base_facts.syncs_by_phase, cur_facts.syncs_by_phase, host_ms, host_bound,
                                idle_delta, data_ms, cur_facts.d2h_copies_per_step - base_facts.d2h_copies_per_step,
                                _fp64_added(base_facts, cur_facts), base_families=fb, cur_families=fc)
            change = model_change(work(base, base_facts), work(cur, cur_facts))
            if change is not None:
                found = told_as_model_change(found, change, KERNEL_MECHANISMS)
                found = spread_syncs(found, change, base_facts.syncs_by_phase, cur_facts.syncs_by_phase,
                                     base.steps.count, cur.steps.count)
        out = _one_account(out, found)
        if any(r.where is not None and MODEL_PHASE.search(r.where) and r.mechanism in KERNEL_MECHANISMS for r in out):
            located |= {p.name for p in phases if MODEL_PHASE.search(p.name)}   # one reason for the model's phases
    located |= {r.where for r in out if r.where is not None}
    if not any(r.mechanism in DATA_MECHANISMS for r in out):
        reason = data_reason(data, by_phase, step_delta, _idle_note(data, idle_phase, cur), None)
        if reason is not None:
            out.append(reason)
    located |= {data, BETWEEN_STEPS} if any(r.mechanism in DATA_MECHANISMS for r in out) else set()
    out = [_with_workers(r, base_facts, cur_facts, not faster) if r.mechanism in DATA_MECHANISMS else r
           for r in out]
    if not any(r.mechanism in KERNEL_MECHANISMS for r in out):
        machine = machine_reason(phases, step_mean_ms(base), step_delta, code_changed)
        if machine is not None:   # the phases' changes are the machine's: not reasons of their own
            out = [r for r in out if r.mechanism not in DATA_MECHANISMS] + [machine]
            located |= {p.name for p in phases} | {STEP_CODE}
    gpu = gpu_active(cur) or gpu_active(base)
    if gpu and not (base_facts and base_facts.kernels_by_phase and cur_facts and cur_facts.kernels_by_phase):
        overall = _kernel_time(base, cur, kernels, step_delta)   # no places: the kernels of the whole step
        out += [overall] if overall is not None else []
    host = host_reasons(phases, self_ms(cur) - self_ms(base), located, step_delta, gpu)
    # on a GPU run, host time with the same kernels and synchronizations is what the traces do not
    # locate (a launch-bound step's host time moves between launches by a millisecond or two): said
    # beside the unexplained rest, a reason only when nothing else is
    unlocated = host if gpu and out else []
    out += [] if unlocated else host
    # a rule that names no phase (warm-up in the window, long gaps) is scored on the whole step's
    # distribution: it ranks behind a difference located in a phase of the same size
    return sorted(out, key=lambda r: -(capped(r.ms, step_delta) if r.where is not None
                                       else 0.5 * capped(r.ms, step_delta))), unlocated


FP64_GREW = 2.0        # float64 kernels per step at least this many times the base's: new float64 work


def _fp64_added(base: TraceFacts, cur: TraceFacts) -> float:
    """float64 kernels per step that appeared: none where the base ran nearly as many (5 -> 6 in a
    wider model is more of the same work, not a round trip through double)."""
    b, c = base.fp64_kernels_per_step, cur.fp64_kernels_per_step
    return c - b if c - b >= MIN_PER_STEP and c >= FP64_GREW * b else 0.0


def _top_kernels(a: Analysis) -> dict[str, list[float]]:
    """Kernel name -> [launches, ms] per step of the analysis's top kernels."""
    if a.gpu is None or a.steps.count <= 0:
        return {}
    out: dict[str, list[float]] = {}
    for k in a.gpu.top_kernels:
        c, m = out.get(k.name, [0.0, 0.0])
        out[k.name] = [c + k.count / a.steps.count, m + k.total_ms / a.steps.count]
    return out


def _kernel_time(base: Analysis, cur: Analysis, kernels: tuple[KernelDelta, ...], step_delta: float) -> Reason | None:
    """Without the traces' places (a baseline that keeps its top kernels only): the GPU kernel time
    of the whole step that changed the way the step did, told as a change of mechanism when the top
    kernels show one, else by the kernels that changed most; never "the same kernels" beside a
    kernel table that lists a change."""
    if base.gpu is None or cur.gpu is None:
        return None
    sign = 1.0 if step_delta >= 0 else -1.0
    moved = [k for k in kernels if sign * k.ms_delta_per_step >= MIN_REASON_MS]
    # all kernels' time where the record keeps it, else the top kernels' (the larger change this way)
    net = max(float(cur.gpu.kernel_ms_per_step or 0.0) - float(base.gpu.kernel_ms_per_step or 0.0),
              sum(k.ms_delta_per_step for k in kernels), key=lambda v: sign * v)
    if sign * net < MIN_REASON_MS or not moved:
        return None
    stories = replacements(families_from_names(_top_kernels(base)), families_from_names(_top_kernels(cur)))
    if stories:
        return Reason(f"replaced:{stories[0].kind}", "GPU kernels", sign * net,
                      f"{stories[0].text} ({stories[0].evidence()}; {net:+.2f} ms/step GPU kernel time)",
                      stories[0].cause)
    top = ", ".join(f"{k.name} {k.ms_delta_per_step:+.2f} ms/step ({k.count_delta_per_step:+.1f} launches/step)"
                    for k in moved[:3])
    return Reason("kernels", "GPU kernels", sign * net, f"GPU kernel time {net:+.2f} ms/step: {top}", None)


#: reasons that are changes of the kernels launched (a place's reason covers its host time too)
KERNEL_MECHANISMS = (*MECHANISM_ORDER, FASTER_KERNELS, "replaced:attention", "replaced:precision",
                     "replaced:compile", "replaced:graphs", "replaced:optimizer", "replaced:convolution",
                     "replaced:library", *MODEL_MECHANISMS)
#: a whole-step rule, and the replacements that tell its change kernel by kernel
TOLD_BY = {"rule:no_mixed_precision": ("replaced:precision",),
           "rule:not_compiled": ("replaced:compile", "replaced:graphs")}


def _one_account(rules: list[Reason], kernels: list[Reason]) -> list[Reason]:
    """The rules' reasons and the kernel differences, each change told once: a whole-step rule
    (precision, compile) is left to the kernel differences of the model's phases when there are
    any (they name the kernels, located); it stands for them only when there are none."""
    model = any(r.where is not None and MODEL_PHASE.search(r.where) and r.mechanism in KERNEL_MECHANISMS
                for r in kernels)
    told = {m for r in kernels for m in TOLD_BY if r.mechanism in TOLD_BY[m]}
    return [r for r in rules if r.mechanism not in told and not (model and r.mechanism in TOLD_BY)] + kernels


DATA_MECHANISMS = ("rule:dataloader_blocking", "data_loading")


def _with_workers(reason: Reason, base: TraceFacts | None, cur: TraceFacts | None, slower: bool) -> Reason:
    """A data-loading reason with what the traces say about the DataLoader's workers: a change in
    their number is the likely edit; an unchanged number rules it out."""
    head = _head(reason.text)
    if base is not None and cur is not None and base.dataloader is False and cur.dataloader is False:
        function = made_by(cur) or made_by(base)     # the function autostep found making them
        if slower and function:
            return replace(reason, text=f"{head}: batches made by {function} (no DataLoader on either side) "
                                        "take longer to make: a slower batch preparation?", cause="input pipeline")
        if slower:     # a DataLoader only where one exists: this loop makes its own batches
            return replace(reason, text=f"{head}: the program makes its own batches (no DataLoader on either "
                                        "side) and takes longer to make them: a slower batch preparation?",
                           cause="input pipeline")
        made = f"batches made by {function}" if function else "batches the program makes itself"
        return replace(reason, text=f"{reason.text}, with {made} (no DataLoader)", cause="input pipeline")
    b = base.dataloader_workers if base is not None else None
    c = cur.dataloader_workers if cur is not None else None
    if b is None or c is None:
        return reason
    if c < b:
        return replace(reason, text=f"{head}: DataLoader workers went from {b} to {c}: the loop now waits "
                                    "for each batch", cause="workers")
    if c > b:
        return replace(reason, text=f"{head}: DataLoader workers went from {b} to {c}", cause="workers")
    same = (f"the same {workers_words(c)}" if c else
            "no loader worker processes on either side (batches made in the training process)")
    if slower:
        return replace(reason, text=f"{head}: the loop waits longer for each batch with {same}: a slower "
                                    "dataset or transform?", cause="input pipeline")
    return replace(reason, text=f"{reason.text}, with {same}", cause="input pipeline")


def _head(text: str) -> str:
    """A reason's figure, before its first ": " outside parentheses (``between steps +5.0 ms/step
    (outside the step range: the loop's wait ...): guess`` keeps its parenthesis whole)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith(": ", i):
            return text[:i]
    return text


def capped(ms: float, step_delta: float) -> float:
    """No difference accounts for more than the whole change."""
    return min(ms, abs(step_delta)) if step_delta != 0 else ms


def shares(reasons_ms: Sequence[float], step_delta: float) -> list[float]:
    """Each ranked reason's share of the change: its milliseconds, up to what the reasons before it
    left of the whole change, so that the shares partition it (reasons that overlap, a phase and
    the wait inside it, are not counted twice). No change: each its own."""
    if not step_delta:
        return list(reasons_ms)
    left, out = abs(step_delta), []
    for ms in reasons_ms:
        share = max(0.0, min(ms, left))
        left -= share
        out.append(share)
    return out


def first_reason(found: list[Reason], step_delta: float) -> tuple[str, str | None]:
    """The first reason and its likely change; without any, that nothing located accounts for it."""
    if found:
        return found[0].text, found[0].cause
    if step_delta > 0:
        return (f"no difference between the traces accounts for the {step_delta:+.2f} ms/step: no phase, "
                "kernel, synchronization or copy changed by more than noise"), None
    return f"no difference between the traces accounts for the {step_delta:+.2f} ms/step", None


def _idle_note(phase: str, idle_phase: dict[str, float], cur: Analysis) -> str:
    idle = idle_phase.get(phase, 0.0)
    return f" (GPU idle while {phase} open)" if idle >= MIN_REASON_MS and cur.gpu is not None else ""


def _where(phase: str | None, delta: float, idle_phase: dict[str, float], cur: Analysis) -> str:
    if phase is None:
        return f"{delta:+.1f} ms/step"
    idle = idle_phase.get(phase, 0.0)
    note = f" (GPU idle while {phase} open)" if idle >= MIN_REASON_MS and cur.gpu is not None else ""
    if phase == BETWEEN_STEPS:
        phase = "between steps (outside the step range: data wait or host work)"
    return f"{phase} {delta:+.1f} ms/step{note}"


OTHER_WAY_SHOWN = 2


def other_way(base: Analysis, cur: Analysis, new: tuple[Finding, ...], resolved: tuple[Finding, ...],
              phases: tuple[PhaseDelta, ...], idle_phase: dict[str, float], base_facts: TraceFacts | None,
              cur_facts: TraceFacts | None, step_delta: float) -> list[str]:
    """The largest located differences that worked against the change (what got slower in a faster
    run, and the reverse): notes, so that a speed-up that hides a slowdown shows it."""
    if step_delta == 0:
        return []
    against, _ = reasons(base, cur, new, resolved, phases, idle_phase, base_facts, cur_facts, -step_delta)
    least = max(MIN_REASON_MS * 5, 0.05 * abs(step_delta))
    way = "slower" if step_delta < 0 else "faster"
    return [f"the other way ({way}): {r.ms:.2f} ms/step: {r.text}" + (f" (likely change: {r.cause})" if r.cause else "")
            for r in against if r.mechanism not in ("phase_time", "compute", "machine", "kernels")
            and r.ms >= least][:OTHER_WAY_SHOWN]


def software_explains(found: list[Reason], provenance: Staleness | None) -> tuple[int, ...]:
    """The reasons (1-based) a change of the baseline's software (torch, CUDA, driver) may explain
    too: kernels the libraries choose, and every phase changing together."""
    software = provenance is not None and any(not e.startswith("perfgate record") for e in provenance.environment)
    if not software:
        return ()
    return tuple(i for i, r in enumerate(found, 1) if r.mechanism in (*KERNEL_MECHANISMS, "machine"))


