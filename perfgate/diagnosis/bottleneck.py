"""Bottleneck class of one run. With GPU activity: GPU compute bound when the GPU is busy through
the step, else the cause that holds the most GPU idle time (data loading, H2D copies, host syncs,
CPU launch). Without GPU activity: "no GPU activity: CPU-only run", classified by phase shares."""
from __future__ import annotations

from dataclasses import dataclass

from perfgate.diagnosis.checks import SMALL_KERNEL_US  # unattributed idle counts as launch idle below it
from perfgate.diagnosis.evidence import (
    COMPUTE_PHASES, data_phase, gap_idle_by_phase_ms, gpu_active, idle_ms_per_step, phase_ms, phase_share,
    step_mean_ms,
)
from perfgate.records.diagnosis import (
    CPU_COMPUTE, CPU_LAUNCH, CPU_ONLY_NOTE, DATA_LOADING, GPU_COMPUTE, H2D_COPY, SYNCHRONIZATION,
    UNDETERMINED,
)
from perfgate.records.facts import H2D_PHASE, OUTSIDE_PHASES, TraceFacts
from perfgate.records.model import Analysis

COMPUTE_BOUND_IDLE_MAX = 0.15   # GPU idle fraction at or below which the run is GPU compute bound ...
COPY_BOUND_SHARE = 0.30         # ... unless H2D copies not overlapping compute take this share of the step
CAUSE_MIN_SHARE = 0.05          # an idle cause must hold this share of the step to win
LAUNCH_API_MS = 0.005           # CPU cost of one launch call, to estimate sync time without a trace


@dataclass(frozen=True)
class Classification:
    bottleneck: str
    confidence: float
    scores: dict[str, float]      # per class, share of the step
    evidence: tuple[str, ...]


def classify_cpu_only(analysis: Analysis) -> Classification:
    """Largest of data_load, h2d and compute (forward+backward+optimizer) CPU shares wins."""
    compute = sum(phase_share(analysis, p) for p in COMPUTE_PHASES)
    scores = {DATA_LOADING: phase_share(analysis, data_phase(analysis)),
              H2D_COPY: phase_share(analysis, H2D_PHASE), CPU_COMPUTE: compute}
    evidence = [CPU_ONLY_NOTE, f"mean step {step_mean_ms(analysis):.2f} ms"]
    evidence += [f"{name} {p.cpu_per_step_ms:.2f} ms/step = {p.share_of_step:.0%} of the step"
                 for name, p in sorted(analysis.phases.items(), key=lambda kv: -kv[1].share_of_step)]
    best = max(scores, key=lambda k: scores[k])
    if scores[best] <= 0:
        return Classification(UNDETERMINED, 0.0, scores, tuple(evidence + ["no phase ranges"]))
    return Classification(best, min(1.0, scores[best]), scores, tuple(evidence))


def _idle_by_phase(analysis: Analysis, facts: TraceFacts | None, idle_ms: float) -> dict[str, float]:
    if facts is not None and facts.idle_ms_per_step is not None:
        return dict(facts.idle_by_phase_ms)
    by_phase = gap_idle_by_phase_ms(analysis)
    rest = idle_ms - sum(by_phase.values())
    if rest > 0:
        by_phase["(unattributed)"] = rest
    return by_phase


def _sync_ms(analysis: Analysis, facts: TraceFacts | None) -> float:
    if facts is not None:
        return facts.sync_ms_per_step
    gpu = analysis.gpu
    if gpu is None or gpu.sync_calls_per_step < 1:
        return 0.0
    return max(0.0, gpu.cuda_api_ms_per_step - gpu.kernels_per_step * LAUNCH_API_MS)


def classify_gpu(analysis: Analysis, facts: TraceFacts | None = None) -> Classification:
    """Score each idle cause as a share of the mean step; GPU compute bound when idle is low."""
    gpu = analysis.gpu
    assert gpu is not None
    step = step_mean_ms(analysis)
    idle_ms = (facts.idle_ms_per_step if facts is not None and facts.idle_ms_per_step is not None
               else idle_ms_per_step(analysis)) or 0.0
    idle_frac = idle_ms / step if step > 0 else 0.0
    if analysis.gpu_idle is not None and facts is None:
        idle_frac = analysis.gpu_idle.fraction
    by_phase = _idle_by_phase(analysis, facts, idle_ms)
    mean_kernel_us = gpu.kernel_ms_per_step / gpu.kernels_per_step * 1000 if gpu.kernels_per_step else 0.0
    overlap = facts.h2d_overlap_fraction if facts is not None else None
    copy_ms = (facts.h2d_copy_ms_per_step if facts is not None else gpu.h2d_ms_per_step)
    unoverlapped_copy = copy_ms * (1.0 - (overlap or 0.0))
    launch_idle = sum(by_phase.get(p, 0.0) for p in COMPUTE_PHASES)
    if mean_kernel_us and mean_kernel_us <= SMALL_KERNEL_US:
        launch_idle += by_phase.get("(unattributed)", 0.0)
    sync_ms = _sync_ms(analysis, facts)
    per = (lambda ms: ms / step) if step > 0 else (lambda ms: 0.0)
    scores = {
        DATA_LOADING: per(by_phase.get(data_phase(analysis), 0.0)),
        H2D_COPY: per(by_phase.get(H2D_PHASE, 0.0) + unoverlapped_copy),
        SYNCHRONIZATION: min(per(sync_ms), idle_frac),
        CPU_LAUNCH: per(launch_idle),
        GPU_COMPUTE: max(0.0, 1.0 - idle_frac),
    }
    evidence = [f"mean step {step:.2f} ms, GPU idle {idle_ms:.2f} ms/step ({idle_frac:.0%})",
                f"{gpu.kernels_per_step:.0f} kernels/step, {gpu.kernel_ms_per_step:.2f} ms kernel "
                f"time/step (mean {mean_kernel_us:.1f} µs)"]
    idle_desc = ", ".join(f"{p} {ms:.2f} ms" for p, ms in sorted(by_phase.items(), key=lambda kv: -kv[1])
                          if ms > 0)
    if idle_desc:
        evidence.append(f"GPU idle per step by CPU phase: {idle_desc}"
                        + ("" if facts is not None else " (longest gaps only)"))
    if idle_frac <= COMPUTE_BOUND_IDLE_MAX and per(unoverlapped_copy) < COPY_BOUND_SHARE:
        evidence.append(f"GPU busy {1 - idle_frac:.0%} of the step (idle at most "
                        f"{COMPUTE_BOUND_IDLE_MAX:.0%})")
        return Classification(GPU_COMPUTE, scores[GPU_COMPUTE], scores, tuple(evidence))
    causes = {k: v for k, v in scores.items() if k != GPU_COMPUTE}
    best = max(causes, key=lambda k: causes[k])
    if causes[best] < CAUSE_MIN_SHARE:
        label = GPU_COMPUTE if scores[GPU_COMPUTE] >= 0.5 else UNDETERMINED
        evidence.append(f"no idle cause holds {CAUSE_MIN_SHARE:.0%} of the step")
        return Classification(label, scores[GPU_COMPUTE] if label == GPU_COMPUTE else 0.0,
                              scores, tuple(evidence))
    evidence.append(_cause_evidence(best, analysis, by_phase, unoverlapped_copy, sync_ms))
    confidence = min(1.0, causes[best] / sum(causes.values())) if sum(causes.values()) > 0 else 0.0
    return Classification(best, confidence, scores, tuple(evidence))


def _cause_evidence(best: str, analysis: Analysis, by_phase: dict[str, float],
                    unoverlapped_copy: float, sync_ms: float) -> str:
    if best == DATA_LOADING:
        phase = data_phase(analysis)
        return (f"GPU idle {by_phase.get(phase, 0.0):.2f} ms/step while {phase} open "
                f"({phase} {phase_ms(analysis, phase):.2f} ms/step)")
    if best == H2D_COPY:
        return (f"GPU idle {by_phase.get(H2D_PHASE, 0.0):.2f} ms/step while h2d open, "
                f"{unoverlapped_copy:.2f} ms/step of H2D copies not overlapping compute")
    if best == SYNCHRONIZATION:
        return f"host blocked about {sync_ms:.2f} ms/step in sync calls"
    other = by_phase.get(OUTSIDE_PHASES, 0.0)
    return (f"GPU idle while the CPU launches in forward/backward/optimizer "
            f"({sum(by_phase.get(p, 0.0) for p in COMPUTE_PHASES):.2f} ms/step; outside phases "
            f"{other:.2f} ms/step)")


def classify(analysis: Analysis, facts: TraceFacts | None = None) -> Classification:
    """The bottleneck class of one run (see module docstring)."""
    if not gpu_active(analysis):
        return classify_cpu_only(analysis)
    return classify_gpu(analysis, facts)
