"""Reasons read from the phases' CPU time per step: data loading (the data phase and the time
between steps, each named), every phase slowing by the same factor (the machine or its clock, not
the code), the model's compute on a run without GPU work, and a phase whose host time changed with
nothing it launches or waits for to explain it. Each names the phases its milliseconds come from;
pure functions of the phase deltas and of the reasons already located."""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from perfgate.diagnosis.evidence import BETWEEN_STEPS
from perfgate.records.diagnosis import PhaseDelta, Reason
from perfgate.records.facts import STEP_CODE

MIN_MS = 0.05                  # ms/step below which a phase's change is not a reason
MIN_SHARE = 0.02               # ... nor below this share of the step-time change
COMPUTE_PHASE = re.compile(r"forward|backward|loss|optim|zero.?grad|compute|train", re.IGNORECASE)
MACHINE_MIN_RATIO = 1.15       # every phase at least this much slower ...
MACHINE_SPREAD = 1.5           # ... by factors within this ratio of each other ...
MACHINE_PHASES = 3             # ... over at least this many phases of at least ...
MACHINE_PHASE_SHARE = 0.05     # ... this share of the baseline's step each ...
MACHINE_COVERS = 0.7           # ... that together hold this share of the change


def _fmt(ms: float) -> str:
    return f"{ms:+.1f}" if abs(ms) >= 0.05 else f"{ms:+.2f}"


def data_reason(data: str, phases: Mapping[str, float], step_delta: float, idle_note: str,
                workers: str | None) -> Reason | None:
    """Data loading: the data phase's change and the time between steps (where a loop that
    fetches its batch outside the step range waits), each named by its own name. ``workers``:
    what the traces say of the DataLoader's workers, else the neutral guess."""
    own = phases.get(data, 0.0)
    between = phases.get(BETWEEN_STEPS, 0.0) if data != BETWEEN_STEPS else 0.0
    ms = own + between
    sign = 1.0 if step_delta >= 0 else -1.0
    if sign * ms < max(MIN_MS, MIN_SHARE * abs(step_delta)):
        return None
    # a part is named when it holds a tenth of the change: the other's noise is not a second cause
    parts = [(n, v) for n, v in ((data, own), ("between steps", between)) if abs(v) >= max(MIN_MS, 0.1 * abs(ms))]
    if len(parts) == 2:
        head = f"data loading {_fmt(ms)} ms/step ({data} {_fmt(own)}, between steps {_fmt(between)}){idle_note}"
    elif parts and parts[0][0] == "between steps":
        head = f"between steps {_fmt(ms)} ms/step (outside the step range: the loop's wait for its next batch){idle_note}"
    else:
        head = f"{data} {_fmt(ms)} ms/step{idle_note}"
    guess = workers or ("the loop waits longer for its batches (a slower dataset or transform, fewer workers?)"
                        if sign > 0 else "the loop waits less for its batches")
    return Reason("data_loading", data, sign * ms, f"{head}: {guess}", None)


def machine_reason(phases: Sequence[PhaseDelta], base_step_ms: float, step_delta: float,
                   code_changed: bool = False) -> Reason | None:
    """Every phase slower (or faster) by about the same factor: what changed is the machine (its
    load, its clock, its software), not one part of the code. Not where the code changed and every
    such phase is the model's compute (forward, backward, optimizer): a model four times as deep
    makes each of them slower by about its factor."""
    big = [p for p in phases if p.name != BETWEEN_STEPS and base_step_ms > 0
           and p.baseline_ms >= MACHINE_PHASE_SHARE * base_step_ms]
    if len(big) < MACHINE_PHASES or step_delta == 0:
        return None
    if code_changed and all(COMPUTE_PHASE.search(p.name) for p in big):
        return None
    ratios = [p.current_ms / p.baseline_ms for p in big]
    slower = step_delta > 0
    if slower and min(ratios) < MACHINE_MIN_RATIO or not slower and max(ratios) > 1 / MACHINE_MIN_RATIO:
        return None
    if max(ratios) / min(ratios) > MACHINE_SPREAD:
        return None
    covered = sum(p.delta_ms for p in big)
    if covered / step_delta < MACHINE_COVERS:
        return None
    factor = covered / sum(p.baseline_ms for p in big) + 1
    each = ", ".join(f"{p.name} x{p.current_ms / p.baseline_ms:.2f}" for p in big)
    text = (f"every phase got {'slower' if slower else 'faster'} by about the same factor (x{factor:.2f}: {each}): "
            f"the machine or its clock {'got slower' if slower else 'got faster'}, not one part of the code "
            "(another job on the machine, a lower clock, or other software?)")
    return Reason("machine", "every phase", abs(covered), text, "machine")


def host_reasons(phases: Sequence[PhaseDelta], self_delta: float, located: set[str], step_delta: float,
                 gpu: bool) -> list[Reason]:
    """Phases whose CPU time per step changed with no located reason: without GPU work, the
    model's compute phases together (the model does more or less work per step); with it, each
    phase on its own (host time with the same kernels and synchronizations); and the step's own
    code outside its phases."""
    sign = 1.0 if step_delta >= 0 else -1.0
    least = max(MIN_MS, MIN_SHARE * abs(step_delta))
    left = [p for p in phases if p.name not in located and p.name != BETWEEN_STEPS and sign * p.delta_ms >= least]
    out: list[Reason] = []
    compute = [p for p in left if COMPUTE_PHASE.search(p.name)] if not gpu else []
    if compute:
        compute.sort(key=lambda p: -sign * p.delta_ms)
        ms = sum(p.delta_ms for p in compute)
        each = ", ".join(f"{p.name} {_fmt(p.delta_ms)}" for p in compute)
        guess = ("the model does more work per step (a larger model, more layers or parameters?)" if sign > 0
                 else "the model does less work per step")
        out.append(Reason("compute", compute[0].name, sign * ms, f"compute {_fmt(ms)} ms/step of CPU time ({each}): "
                          f"{guess}", "model size" if sign > 0 else None))
    for p in left:
        if p in compute:
            continue
        what = (" with the same kernels and synchronizations: host work in this phase (Python, the framework, "
                "a CPU computation?)" if gpu else "")    # on the CPU the phase's time is all there is to say
        out.append(Reason("phase_time", p.name, sign * p.delta_ms, f"{p.name} {_fmt(p.delta_ms)} ms/step of host "
                          f"time{what}", None))
    if STEP_CODE not in located and sign * self_delta >= least:
        what = ("(host work, or the wait for the GPU's work at the step's end)" if gpu else "of host time")
        out.append(Reason("phase_time", STEP_CODE, sign * self_delta, f"the step's own code (outside its phases) "
                          f"{_fmt(self_delta)} ms/step {what}", None))
    return out
