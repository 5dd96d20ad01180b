"""What the diagnosis reads from an Analysis: per-step quantities, GPU idle time by the phase open
on the CPU, kernel-name classes (precision, Triton, elementwise), and ``as_analysis`` to rebuild an
Analysis from its ``to_dict()`` form (what baselines store). Pure functions; no pandas."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from perfgate.model import (
    Analysis,
    CommStats,
    GpuIdle,
    GpuWork,
    IdleGap,
    KernelStat,
    PhaseStats,
    RangeStat,
    RankComm,
    RankStats,
    StepStats,
    Summary,
)

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
    """Launch counts of ``kernels`` by class: triton, elementwise, half, all."""
    out = {"triton": 0, "elementwise": 0, "half": 0, "all": 0}
    for k in kernels:
        out["all"] += k.count
        out["triton"] += k.count if is_triton(k.name) else 0
        out["elementwise"] += k.count if is_elementwise(k.name) else 0
        out["half"] += k.count if is_half_precision(k.name) else 0
    return out


# ----------------------------------------------------------------------------- from a dict


def _build(cls: type, data: Mapping[str, Any], **override: Any) -> Any:
    names = {f.name for f in fields(cls)}
    kwargs = {k: v for k, v in data.items() if k in names}
    kwargs.update(override)
    return cls(**kwargs)


def _summary_from_steps(st: Mapping[str, Any], metrics: Mapping[str, Any]) -> Summary:
    durations = [float(x) for x in st.get("durations_ms") or ()]
    median = st.get("median_ms", metrics.get("step_time_ms"))
    mean = st.get("mean_ms", metrics.get("step_time_mean_ms"))
    if mean is None:
        mean = sum(durations) / len(durations) if durations else (median or 0.0)
    if median is None:
        median = mean
    return Summary(
        count=int(st.get("count") or len(durations)),
        mean=float(mean), median=float(median), stdev=float(st.get("stdev_ms") or 0.0),
        p10=float(st.get("p10_ms") or median), p90=float(st.get("p90_ms") or metrics.get("step_time_p90_ms") or median),
        min=float(st.get("min_ms") or median), max=float(st.get("max_ms") or median),
    )


def _range_summary(st: Mapping[str, Any], metrics: Mapping[str, Any]) -> Summary | None:
    median = st.get("range_median_ms", metrics.get("step_range_ms"))
    if median is None:
        return None
    mean = float(st.get("range_mean_ms") or median)
    return Summary(count=int(st.get("count") or 0), mean=mean, median=float(median), stdev=0.0,
                   p10=float(median), p90=float(median), min=float(median), max=float(median))


def _steps_from_metrics(metrics: Mapping[str, Any]) -> StepStats:
    median = float(metrics.get("step_time_ms", 0.0))
    mean = float(metrics.get("step_time_mean_ms", median))
    s = Summary(count=1, mean=mean, median=median, stdev=0.0, p10=median, p90=median,
                min=median, max=median)
    return StepStats(range_name="step", count=1, warmup_skipped=0, durations_ms=(mean,),
                     summary_ms=s, window_start_ns=0, window_end_ns=0)


def _phases_from_metrics(metrics: Mapping[str, Any], step_ms: float) -> dict[str, PhaseStats]:
    out: dict[str, PhaseStats] = {}
    for key, value in metrics.items():
        if key.startswith("phase.") and key.endswith(".cpu_ms"):
            name = key[len("phase."):-len(".cpu_ms")]
            v = float(value)
            out[name] = PhaseStats(name=name, count=1, cpu_total_ms=v, cpu_median_ms=v,
                                   cpu_mean_ms=v, cpu_per_step_ms=v,
                                   share_of_step=v / step_ms if step_ms > 0 else 0.0,
                                   gpu_per_step_ms=metrics.get(f"phase.{name}.gpu_ms"))
    return out


_KNOWN_KEYS = {"source", "nsys_version", "schema_version", "steps", "gpu_idle_fraction", "gpu_idle",
               "phases", "ranges", "gpu", "processes", "devices", "warnings", "metrics", "ranks", "rank_skew_ms",
               "comm"}


def as_analysis(value: Analysis | Mapping[str, Any]) -> Analysis:
    """``value`` itself, or the Analysis rebuilt from its ``to_dict()`` form. A dict holding only
    ``metrics`` (flat metric names) gives an Analysis with steps and phase CPU times only."""
    if isinstance(value, Analysis):
        return value
    d = value
    metrics = d.get("metrics") or {}
    st = d.get("steps")
    if st:
        summary = _summary_from_steps(st, metrics)
        steps = StepStats(
            range_name=str(st.get("range", "step")), count=int(st.get("count") or summary.count),
            warmup_skipped=int(st.get("warmup_skipped") or 0),
            durations_ms=tuple(float(x) for x in st.get("durations_ms") or ()),
            summary_ms=summary, window_start_ns=int(st.get("window_start_ns") or 0),
            window_end_ns=int(st.get("window_end_ns") or 0), batch_size=st.get("batch_size"),
            samples_per_s=st.get("samples_per_s"), source=str(st.get("source") or "nvtx"),
            range_summary_ms=_range_summary(st, metrics), basis=str(st.get("basis") or "range"))
    else:
        steps = _steps_from_metrics(metrics)
    if d.get("phases"):
        phases = {n: _build(PhaseStats, p, name=n) for n, p in d["phases"].items()}
    else:
        phases = _phases_from_metrics(metrics, steps.summary_ms.mean)
    idle = None
    if d.get("gpu_idle"):
        gi = d["gpu_idle"]
        gaps = tuple(_build(IdleGap, g, cpu_ranges=tuple(g.get("cpu_ranges") or ()))
                     for g in gi.get("longest_gaps") or ())
        idle = _build(GpuIdle, gi, per_device=dict(gi.get("per_device") or {}), longest_gaps=gaps)
    elif metrics.get("gpu_idle_fraction") is not None:
        window = steps.summary_ms.mean * steps.count
        idle = GpuIdle(fraction=float(metrics["gpu_idle_fraction"]), per_device={}, window_ms=window)
    gpu = None
    if d.get("gpu"):
        g = d["gpu"]
        top = tuple(_build(KernelStat, k) for k in g.get("top_kernels") or ())
        gpu = _build(GpuWork, g, top_kernels=top)
    ranges = {n: _build(RangeStat, r) for n, r in (d.get("ranges") or {}).items()}
    extra = {k: v for k, v in d.items() if k not in _KNOWN_KEYS}
    ranks = tuple(_build(RankStats, r, phase_cpu_ms=dict(r.get("phase_cpu_ms") or {}))
                  for r in d.get("ranks") or ())
    c = d.get("comm")
    comm: CommStats | None = None if not c else _build(
        CommStats, c, ranks=tuple(_build(RankComm, r, devices=tuple(r.get("devices") or ())) for r in c.get("ranks") or ()))
    return Analysis(
        source=str(d.get("source", "<dict>")), nsys_version=d.get("nsys_version"),
        schema_version=d.get("schema_version"), steps=steps, phases=phases, ranges=ranges,
        gpu_idle=idle, gpu=gpu, processes=int(d.get("processes") or 1),
        devices=tuple(d.get("devices") or ()), warnings=tuple(d.get("warnings") or ()), extra=extra,
        ranks=ranks, rank_skew_ms=d.get("rank_skew_ms"), comm=comm)
