"""What a gate run decided, in words: ``judge`` completes a WorkloadResult from the looks against the
stored baseline (perfgate.gate.sequential_looks) or, when the base was measured in the same job, its
pairs (perfgate.pipeline.confirmation): the verdict and rows, the notes (a stale baseline, the
change's own edits, which comparison decided, a machine in another state than at the recording,
why an unclear run could not decide), the noise and the account of the change."""
from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from perfgate.diagnosis.comm import collectives_changed, collectives_text, exposed_text
from perfgate.diagnosis.machine import threads_hint
from perfgate.gate.machine_states import machine_difference
from perfgate.baselines.provenance import workload_threads
from perfgate.pipeline.inputs import explain_change, explained_launches
from perfgate.records.model import Analysis, LookRecord, Verdict, WorkloadResult
from perfgate.records.notes import CONFIRMATION, NOTE, SUMMARY, WARNING, Note
from perfgate.settings.config import Settings
from perfgate.settings.workloads import WorkloadSpec

if TYPE_CHECKING:
    from perfgate.baselines.store import Baseline
    from perfgate.gate.compare import Outcome
    from perfgate.gate.sequential_looks import LookRun
    from perfgate.pipeline.confirmation import ConfirmRun


def judge(result: WorkloadResult, spec: WorkloadSpec, settings: Settings, baseline: Baseline | None, path: Path,
          run: LookRun, confirmed: ConfirmRun | None = None) -> WorkloadResult:
    """``result`` with what the gate's looks decided against ``baseline`` (``run``; NEW when there is
    none), or, when the base was measured in this job (``confirmed``), what its pairs decided: the
    verdict, comparisons, looks, notes, noise and the account of the change. The comparisons,
    analyses and baseline steps are those of the comparison that decided."""
    decided = confirmed if confirmed is not None and confirmed.outcome is not None else None
    outcome = decided.outcome if decided is not None and decided.outcome is not None else run.outcome
    machine = machine_difference([a.launch for a in baseline.launch_analyses], [a.launch for a in result.analyses]) \
        if baseline is not None else None
    stale = result.provenance   # the baseline measured other code or software: said first
    notes = [*([Note(WARNING, stale.text())] if stale and stale.stale else []),
             *([Note(NOTE, stale.edits_text())] if stale and stale.edits else []), Note(SUMMARY, outcome.summary)]
    confirmation = None
    if confirmed is not None:
        confirmation = replace(confirmed.record, machine=machine.text() if machine else None)
        notes += [Note(CONFIRMATION, line) for line in confirmation.lines()]
    elif machine is not None:   # the stored baseline decided, on a machine in another state: said
        notes.append(Note(WARNING, machine.text()))
    if machine is not None and (hint := threads_hint(machine.busier, workload_threads(settings.threads, os.environ),
                                                     result.machine.gpu_count if result.machine else 0)):
        notes.append(Note(NOTE, hint))
    analyses, stopped = (list(decided.head), decided.record.stopped) if decided is not None else (result.analyses,
                                                                                                 run.stopped)
    notes += [Note(NOTE, w) for a in (*analyses, *([result.profile] if result.profile else [])) for w in a.launch.notes]
    result = replace(result, verdict=outcome.verdict, strict=outcome.strict, comparisons=list(outcome.comparisons),
                     looks=tuple(LookRecord(lk.launches, str(lk.outcome.verdict), round(lk.elapsed_s, 3))
                                 for lk in run.looks),
                     stopped=stopped, confirmation=confirmation, analyses=analyses)
    if baseline is None:
        hint = f" (record one with {settings.record_command(spec.full_name)}: {path})"
        others = sorted(p.stem for p in path.parent.glob("*.json") if p != path)
        if others:
            hint += (f"; not compared with the baselines of other machine classes ({', '.join(others)}): "
                     f"this machine is {path.stem}")
        # the message has always said it at the end of its last line
        return replace(result, notes=(*notes[:-1], replace(notes[-1], text=notes[-1].text + hint)))
    if decided is not None:   # the base ran here, now: no other code or software than the change's
        notes += decided.undecided_notes(spec.full_name)
        base_steps = [d for a in decided.base for d in a.steps.durations_ms]
        base_launches, provenance = [*decided.base, *([decided.base_profile] if decided.base_profile else [])], None
    else:
        notes += run.noise_notes(spec.full_name)
        base_steps = baseline.step_durations_ms
        base_launches, provenance = list(baseline.launch_analyses), stale
    said = communication_note(outcome, base_launches, [*analyses, *([result.profile] if result.profile else [])])
    attribution = None
    if outcome.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):   # a speed-up gets its reasons too
        base, cur = explained_launches(base_launches, analyses, result.profile)
        same_code = decided is None and not (stale and (stale.code or stale.edits or stale.unknown))
        attribution = explain_change(base, cur, outcome, provenance=provenance, same_code=same_code,
                                     machine=machine.text() if machine else None)
        if attribution is not None and attribution.reasons and collectives_changed(attribution.reasons[0]):
            said = None     # the account says it first, with the NCCL kernels' time
    if said is not None:
        notes.append(Note(WARNING, said))
    # the account is the result's record, rendered at the report stage (perfgate.report.digest.result_message)
    return replace(result, notes=tuple(notes), noise=run.noise, baseline_step_times_ms=base_steps,
                   attribution=attribution)


def communication_note(outcome: Outcome, base: Sequence[Analysis], cur: Sequence[Analysis]) -> str | None:
    """The summary's line on communication, whatever the verdict, when the gate found NCCL's calls
    per step (``collectives_per_step``, every launch) beyond their tolerance: reported only, unless
    ``gate_alone`` names it. A change of communication that the step time hides (overlapped, or
    within its tolerance) is said; where both sides were CUDA-traced and ``comm_exposed_ms`` moved
    too, the exposed NCCL time with it. Exposed time alone is no line: it moves with the machine
    and with a slow rank (an unchanged rerun on two H200s: 11.6 -> 14.1 ms/step)."""
    def moved(metric: str) -> bool:
        row = outcome.row(metric)
        return row is not None and row.verdict in (Verdict.REGRESSED, Verdict.IMPROVED, Verdict.INCONCLUSIVE)

    def first(launches: Sequence[Analysis], has: Callable[[Analysis], bool]) -> Analysis | None:
        return next((a for a in launches if has(a)), None)

    b, c = first(base, lambda a: a.collectives is not None), first(cur, lambda a: a.collectives is not None)
    calls = collectives_text(b, c) if moved("collectives_per_step") and b is not None and c is not None else None
    if calls is None:
        return None
    b, c = first(base, lambda a: a.comm is not None), first(cur, lambda a: a.comm is not None)
    exposed = exposed_text(b, c) if moved("comm_exposed_ms") and b is not None and c is not None else None
    return f"communication: {calls}" + (f"; {exposed}" if exposed else "")
