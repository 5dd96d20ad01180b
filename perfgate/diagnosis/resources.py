"""Reasons for regressions that step time does not carry: peak GPU memory, energy per sample, and,
for a workload that gates them on their own, the kernel launches of an inference batch (kernels per step:
a lost compilation or lost CUDA graphs).

Such a metric leads the attribution (it becomes the first reason) when it regressed and no
step-time metric regressed; kernel launches also when they regressed by more than every regressed
step-time metric (a lost compilation: kernels per batch x50, latency +40 %). Memory and energy
never lead a step-time regression: a deeper or wider model holds more memory at its peak, and the
step's reasons say why it is slower. Otherwise the step-time diagnosis leads and these reasons
follow as notes.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Sequence

from perfgate.records.model import Analysis, Direction, MetricComparison, Verdict

RESOURCE_PATTERNS = ("gpu_memory.*", "energy.*", "kernels_per_step", "cuda_api_ms_per_step")
STEP_PATTERNS = ("step_time_*", "phase.*", "gpu_idle_fraction")
OWN_LINES = ("gpu_memory.*", "energy.*")    # never the first reason of a step-time regression

_MEMORY_WORDS = {
    "gpu_memory.peak_allocated_mib": "peak GPU memory allocated (torch allocator)",
    "gpu_memory.peak_reserved_mib": "peak GPU memory reserved (torch allocator)",
    "gpu_memory.peak_traced_mib": "peak GPU memory (nsys CUDA memory trace)",
}


def _matches(metric: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(metric, p) for p in patterns)


def _worse(c: MetricComparison) -> float:
    """How much worse, relatively (inf when the baseline was 0 and it grew)."""
    if c.change is None:
        return float("inf") if (c.delta or 0.0) > 0 else 0.0
    return c.change if c.direction is Direction.LOWER_IS_BETTER else -c.change


def _pct(c: MetricComparison) -> str:
    return f"{c.change * 100:+.1f}%" if c.change is not None else f"{c.delta or 0:+.3g} {c.unit}"


def _text(c: MetricComparison, base: Analysis | None, cur: Analysis | None) -> tuple[str, str]:
    """The reason's words and the likely change for one regressed resource row."""
    b, v = c.baseline or 0.0, c.current or 0.0
    if c.metric.startswith("gpu_memory."):
        what = _MEMORY_WORDS.get(c.metric, c.metric)
        return (f"{what} {_pct(c)} ({b:,.0f} -> {v:,.0f} MiB): more memory held at the peak: activations "
                "or tensors kept alive longer, a larger batch or buffer?"), "memory"
    if c.metric.startswith("energy."):
        power = ""
        if base is not None and cur is not None:
            pb = base.metrics().get("energy.power_mean_w")
            pc = cur.metrics().get("energy.power_mean_w")
            if pb is not None and pc is not None:
                power = f"; mean power {pb:.0f} -> {pc:.0f} W"
        return (f"energy per sample {_pct(c)} ({b:.4g} -> {v:.4g} J{power}): the GPU does more work "
                "or runs longer per sample"), "energy"
    if c.metric == "kernels_per_step":
        graphs, lost = "", "kernel fusion"
        if base is not None and cur is not None and base.gpu is not None and cur.gpu is not None:
            gb, gc = base.gpu.graph_launches_per_step, cur.gpu.graph_launches_per_step
            if gb != gc:
                graphs = f", CUDA graph launches per batch {gb:g} -> {gc:g}"
            if gb > 0 and gc == 0:
                lost = "CUDA graphs"
        return (f"kernels per batch {b:.0f} -> {v:.0f} ({(c.delta or 0):+.0f}/batch{graphs}): "
                f"{lost} lost → torch.compile (mode reduce-overhead) disabled or falling back to eager?"), "compile"
    return f"{c.metric} {_pct(c)} ({b:.4g} -> {v:.4g} {c.unit})", c.metric


def resource_reasons(comparisons: Sequence[MetricComparison], base: Analysis | None = None,
                     cur: Analysis | None = None) -> list[tuple[MetricComparison, str, str]]:
    """(row, text, likely change) for each regressed gating resource row, worst first."""
    rows = [c for c in comparisons if c.gating and c.verdict is Verdict.REGRESSED
            and _matches(c.metric, RESOURCE_PATTERNS)]
    return [(c, *_text(c, base, cur)) for c in sorted(rows, key=lambda c: -_worse(c))]


def leading_reason(comparisons: Sequence[MetricComparison], base: Analysis | None = None,
                   cur: Analysis | None = None) -> tuple[str, str, list[str]] | None:
    """(first reason, likely change, the other resource reasons) when a resource regression leads
    the attribution (see the module docstring), else None."""
    found = resource_reasons(comparisons, base, cur)
    if not found:
        return None
    step_worse = [_worse(c) for c in comparisons
                  if c.gating and c.verdict is Verdict.REGRESSED and _matches(c.metric, STEP_PATTERNS)]
    if step_worse:     # memory and energy keep their own lines beside a step-time regression
        leads = [f for f in found if not _matches(f[0].metric, OWN_LINES)]
        if not leads or _worse(leads[0][0]) <= max(step_worse):
            return None
        found = leads + [f for f in found if f not in leads]
    top, text, cause = found[0]
    return text, cause, [t for _, t, _ in found[1:]]


def notes(comparisons: Sequence[MetricComparison], base: Analysis | None = None,
          cur: Analysis | None = None) -> list[str]:
    """``also regressed: ...`` notes for resource reasons that do not lead."""
    return [f"also regressed: {t}" for _, t, _ in resource_reasons(comparisons, base, cur)]
