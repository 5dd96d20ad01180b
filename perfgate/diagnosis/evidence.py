"""What the diagnosis reads from an Analysis: per-step quantities, GPU idle time by the phase open
on the CPU, kernel-name classes (precision, Triton, elementwise). Pure functions; no pandas."""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from perfgate.records.model import Analysis, KernelStat

DATA_PHASE = "data_load"
# Other names loops give their data-loading range (seed 003's ``__next__ N``, ...): the data phase of
# an analysis is ``data_load`` when present, else the first phase whose name matches.
DATA_PHASE_RE = re.compile(r"__next__|data|loader|fetch|next_batch", re.IGNORECASE)
DATA_FETCH_RE = re.compile(r"__next__|loader|fetch|next_batch|data[ _-]?load", re.IGNORECASE)
BETWEEN_STEPS = "between_steps"   # analysis.steps.BETWEEN_STEPS (no pandas import here)
H2D_PHASE = "h2d"
COMPUTE_PHASES = ("forward", "backward", "optimizer")
OUTSIDE_PHASES = "(no phase)"     # idle while only the step range (or nothing) was open

# Kernel-name classes. Half/low precision first: a name matching it is never counted as fp32.
HALF_PRECISION_RE = re.compile(
    r"h884|h1688|h16816|hmma|f16|fp16|bf16|half|e4m3|e5m2|fp8|i8816|imma", re.IGNORECASE)
MATMUL_RE = re.compile(
    r"gemm|conv|fprop|dgrad|wgrad|xmma|cutlass|winograd|matmul",
    re.IGNORECASE)
TRITON_RE = re.compile(r"triton", re.IGNORECASE)
ELEMENTWISE_RE = re.compile(r"elementwise|reduce_kernel|vectorized|unrolled|pointwise", re.IGNORECASE)


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


# ----------------------------------------------------------------------------- kernel names


def is_half_precision(name: str) -> bool:
    return HALF_PRECISION_RE.search(name) is not None


def is_fp32_matmul(name: str) -> bool:
    """A GEMM/convolution kernel whose name shows no half/low-precision type (fp32 or TF32)."""
    return MATMUL_RE.search(name) is not None and not is_half_precision(name)


def is_half_matmul(name: str) -> bool:
    return MATMUL_RE.search(name) is not None and is_half_precision(name)


def is_triton(name: str) -> bool:
    return TRITON_RE.search(name) is not None


def is_elementwise(name: str) -> bool:
    return ELEMENTWISE_RE.search(name) is not None and not is_triton(name)


def kernel_class_ms(kernels: tuple[KernelStat, ...]) -> dict[str, float]:
    """Total ms of ``kernels`` by class: fp32_matmul, half_matmul, triton, elementwise, all."""
    out = {"fp32_matmul": 0.0, "half_matmul": 0.0, "triton": 0.0, "elementwise": 0.0, "all": 0.0}
    for k in kernels:
        out["all"] += k.total_ms
        if is_half_matmul(k.name):
            out["half_matmul"] += k.total_ms
        elif is_fp32_matmul(k.name):
            out["fp32_matmul"] += k.total_ms
        if is_triton(k.name):
            out["triton"] += k.total_ms
        if is_elementwise(k.name):
            out["elementwise"] += k.total_ms
    return out


def kernel_class_counts(kernels: tuple[KernelStat, ...]) -> dict[str, int]:
    """Kernel launch counts of ``kernels`` by class: triton, elementwise, half, all."""
    out = {"triton": 0, "elementwise": 0, "half": 0, "all": 0}
    for k in kernels:
        out["all"] += k.count
        out["triton"] += k.count if is_triton(k.name) else 0
        out["elementwise"] += k.count if is_elementwise(k.name) else 0
        out["half"] += k.count if is_half_precision(k.name) else 0
    return out
