"""What the diagnosis reads from an Analysis: per-step quantities, GPU idle time by the phase open
on the CPU. Pure functions; no pandas."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from perfgate.records.facts import OUTSIDE_PHASES, TraceFacts
from perfgate.records.model import Analysis

DATA_PHASE = "data_load"
# Other names loops give their data-loading range (seed 003's ``__next__ N``, ...): the data phase of
# an analysis is ``data_load`` when present, else the first phase whose name matches.
DATA_PHASE_RE = re.compile(r"__next__|data|loader|fetch|next_batch", re.IGNORECASE)
DATA_FETCH_RE = re.compile(r"__next__|loader|fetch|next_batch|data[ _-]?load", re.IGNORECASE)
BETWEEN_STEPS = "between_steps"   # analysis.steps.BETWEEN_STEPS (no pandas import here)
COMPUTE_PHASES = ("forward", "backward", "optimizer")


# ----------------------------------------------------------------------------- per-step quantities


def step_mean_ms(analysis: Analysis) -> float:
    """Mean measured step time (the quantity phase CPU times per step add up to)."""
    return float(analysis.steps.summary_ms.mean)


def gpu_active(analysis: Analysis) -> bool:
    """True when the trace shows any GPU kernel or host-to-device copy in the measured window."""
    gpu = analysis.gpu
    if gpu is None:
        return False
    return gpu.kernels_per_step > 0 or gpu.h2d_ms_per_step > 0 or gpu.kernel_ms_per_step > 0


def idle_ms_per_step(analysis: Analysis) -> float | None:
    """GPU idle time per step (averaged over GPUs), or None without GPU data."""
    idle = analysis.gpu_idle
    if idle is None or analysis.steps.count <= 0:
        return None
    return idle.fraction * idle.window_ms / analysis.steps.count


def innermost_phase(cpu_ranges: tuple[str, ...], phases: Mapping[str, Any]) -> str:
    """The innermost range in ``cpu_ranges`` (outermost first) that is a known phase."""
    for name in reversed(cpu_ranges):
        if name in phases:
            return name
    return OUTSIDE_PHASES


def gap_idle_by_phase_ms(analysis: Analysis) -> dict[str, float]:
    """Idle time per step of the longest GPU gaps, keyed by the innermost phase open on the CPU.
    A lower bound: Analysis keeps only the longest gaps."""
    idle = analysis.gpu_idle
    out: dict[str, float] = {}
    if idle is None or analysis.steps.count <= 0:
        return out
    for gap in idle.longest_gaps:
        phase = innermost_phase(tuple(gap.cpu_ranges), analysis.phases)
        out[phase] = out.get(phase, 0.0) + gap.duration_ms
    return {phase: total / analysis.steps.count for phase, total in out.items()}


def phase_share(analysis: Analysis, name: str) -> float:
    p = analysis.phases.get(name)
    return 0.0 if p is None else float(p.share_of_step)


def data_phase(analysis: Analysis) -> str:
    """The name of the analysis's data-loading phase (``data_load`` when there is none)."""
    if DATA_PHASE in analysis.phases:
        return DATA_PHASE
    names = [n for n in analysis.phases if n != BETWEEN_STEPS]
    # a range that fetches the batch before one that merely mentions data ("copy data" is the copy)
    return next((n for n in names if DATA_FETCH_RE.search(n)),
                next((n for n in names if DATA_PHASE_RE.search(n)), DATA_PHASE))


def phase_ms(analysis: Analysis, name: str) -> float:
    p = analysis.phases.get(name)
    return 0.0 if p is None else float(p.cpu_per_step_ms)


# ----------------------------------------------------------------------------- where batches come from


def workers_words(count: int) -> str:
    """``count`` DataLoader workers, in words ("1 DataLoader worker", "4 DataLoader workers")."""
    return f"{count} DataLoader worker{'' if count == 1 else 's'}"


def made_by(facts: TraceFacts | None) -> str | None:
    """The program's own batch function (``TraceFacts.input_function``) in words, "the program's
    get_batch", where a loop without a DataLoader had one found; else None."""
    if facts is None or facts.dataloader is not False or not facts.input_function:
        return None
    return f"the program's {facts.input_function.removeprefix('__main__.')}"


def batches_from(facts: TraceFacts | None) -> str:
    """What a CPU-only loop waits for, as far as the trace says where its batches come from: a
    DataLoader only where one was in use (``TraceFacts.dataloader``)."""
    workers = facts.dataloader_workers if facts is not None else None
    if (function := made_by(facts)) is not None:
        return f"the loop waits for the batches {function} makes (no DataLoader)"
    if facts is not None and facts.dataloader is False:
        return "the loop waits for the batches it makes itself (no DataLoader)"
    if workers == 0:
        return "the loop waits for each batch (the trace records no DataLoader worker process)"
    return f"the loop waits for batches from {workers_words(workers)}" if workers else "the loop waits for its batches"
