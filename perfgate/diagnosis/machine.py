"""The machine, not the code: a slowdown of code that did not change, in which every phase grew by
about one factor, is the machine that ran it getting slower (a neighbour's load, a clock, steal),
never a mechanism of the code. Pure: phase deltas in, a Reason out."""
from __future__ import annotations

from collections.abc import Sequence

from perfgate.records.diagnosis import PhaseDelta, Reason

#: The largest growth factor of a phase (or of the step) over the smallest, for "one factor": a
#: busy neighbour slows CPU work by about its share of the cores, everywhere alike; a change to the
#: code moves its own phase and leaves the others.
UNIFORM = 1.3
#: Phases shorter than this share of the baseline's step are not weighed (a 0.1 ms phase doubles on noise).
LEAST_SHARE = 0.05
#: The mechanism a Reason of the machine names.
MACHINE = "machine"


def slower_machine_reason(phases: Sequence[PhaseDelta], base_step_ms: float, current_step_ms: float,
                   machine: str | None = None) -> Reason | None:
    """The reason of a slower step of unchanged code when every weighed phase and the step itself
    grew by about one factor (within ``UNIFORM`` of each other); ``machine``: how the machine's
    state differed, in words (perfgate.gate.machine_states), said with it. None for a faster
    step, or where one part grew far more than the rest (then it is that part)."""
    if base_step_ms <= 0 or current_step_ms <= base_step_ms:
        return None
    weighed = [p for p in phases if p.baseline_ms >= LEAST_SHARE * base_step_ms and p.current_ms > 0]
    step = current_step_ms / base_step_ms
    factors = [step, *(p.current_ms / p.baseline_ms for p in weighed)]
    if max(factors) > UNIFORM * min(factors):
        return None
    grown = ", ".join(f"{p.name} x{p.current_ms / p.baseline_ms:.2f}"
                      for p in sorted(weighed, key=lambda p: -p.baseline_ms)[:4])
    text = (f"the machine, not the code: the code did not change and the step took x{step:.2f}, every part alike"
            + (f" ({grown})" if grown else "") + (f"; {machine}" if machine else ""))
    return Reason(MACHINE, None, current_step_ms - base_step_ms, text, cause="the machine that ran it")


def unguessed(text: str) -> str:
    """A reason's words without the edit they guess at the end (``...: a slower dataset or
    transform?``, ``... → pin_memory disabled?``, ``... (a slower dataset, or fewer workers?)``):
    what moved, as the traces show it."""
    if text.endswith("?)"):
        cut = text.rfind(" (")
    elif text.endswith("?"):
        cut = max(text.rfind(": "), text.rfind(" → "))
    else:
        return text
    return text[:cut] if cut > 0 else text


def unchanged_code_text(text: str) -> str:
    """A difference of code that did not change which is not every part alike (then it is
    :func:`slower_machine_reason`): what moved, with no edit guessed, since none was made."""
    return f"{unguessed(text)} (the code did not change: the machine or noise)"


def unchanged_code_reason(reason: Reason) -> Reason:
    """:func:`unchanged_code_text`'s reason, with no likely change."""
    return Reason(reason.mechanism, reason.where, reason.ms, unchanged_code_text(reason.text), cause=None)


def threads_hint(busier: bool | None, threads: str, gpu_count: int) -> str | None:
    """What to set when a CPU-only workload ran with torch's default threads (``threads``
    "default": one per core, perfgate.baselines.provenance.workload_threads) on a machine other
    processes were busier on: every operator then waits for its slowest thread, whichever the busy
    process holds back; None otherwise (a GPU's work does not wait on those threads)."""
    if busier is not True or threads != "default" or gpu_count:
        return None
    return ("the workload ran with torch's default CPU threads (one per core) beside busy processes: each "
            "operator waits for whichever thread they hold back (the zoo's word_language_model went from 25.7 "
            "to 1,395 ms a step beside one busy process on 2 cores); threads = 1 (PERFGATE_THREADS=1, "
            "baselines recorded again) keeps its launches steady on a shared runner (docs/ci.md)")

