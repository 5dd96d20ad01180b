"""PNG charts per workload (matplotlib, Agg backend, imported lazily).

- ``<workload>-phases.png``: CPU time per step of each phase, baseline vs current (bars).
- ``<workload>-steps.png``: per-step time series of the current launches and the baseline's steps.

The Markdown report links them by their path relative to the report directory (they are uploaded
with it as an artifact). Without matplotlib, :func:`render_charts` returns no charts and
:data:`MISSING_MATPLOTLIB_NOTE` explains why.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.model import WorkloadResult
from perfgate.report.digest import phase_name

MISSING_MATPLOTLIB_NOTE = "charts skipped: matplotlib is not installed (pip install 'perfgate[charts]')"


def _pyplot() -> Any | None:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "workload"


def phase_bars(result: WorkloadResult) -> tuple[list[str], list[float | None], list[float | None]]:
    """Phase labels with baseline and current CPU ms per step (from ``phase.*.cpu_ms`` comparisons,
    else the current launches' first analysis with no baseline)."""
    rows = [c for c in result.comparisons if c.metric.startswith("phase.") and c.metric.endswith(".cpu_ms")]
    if rows:
        return [phase_name(c.metric) for c in rows], [c.baseline for c in rows], [c.current for c in rows]
    if result.analyses:
        phases = result.analyses[0].phases
        return list(phases), [None] * len(phases), [p.cpu_per_step_ms for p in phases.values()]
    return [], [], []


def _phase_chart(plt: Any, result: WorkloadResult, path: Path) -> bool:
    labels, base, cur = phase_bars(result)
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [b or 0.0 for b in base], width=0.4, label="baseline", color="#9e9e9e")
    ax.bar([i + 0.2 for i in x], [c or 0.0 for c in cur], width=0.4, label="current",
           color="#d62728" if result.failed else "#1f77b4")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("CPU ms per step")
    ax.set_title(f"{result.name}: phases ({result.verdict})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _steps_chart(plt: Any, result: WorkloadResult, path: Path) -> bool:
    if not result.analyses and not result.baseline_step_times_ms:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    if result.baseline_step_times_ms:
        ax.plot(result.baseline_step_times_ms, label="baseline", color="#9e9e9e", linewidth=1)
    for i, a in enumerate(result.analyses):
        ax.plot(list(a.steps.durations_ms), label=f"current launch {i + 1}", linewidth=1)
    ax.set_xlabel("measured step")
    ax.set_ylabel("step time (ms)")
    ax.set_title(f"{result.name}: step time per step")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def render_charts(results: Sequence[WorkloadResult], out_dir: Path) -> dict[str, Path]:
    """Write the PNGs into ``out_dir``; keys are ``"<workload>:phases"`` and ``"<workload>:steps"``.
    Returns {} when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    charts: dict[str, Path] = {}
    for r in results:
        for kind, draw in (("phases", _phase_chart), ("steps", _steps_chart)):
            path = out_dir / f"{_slug(r.name)}-{kind}.png"
            if draw(plt, r, path):
                charts[f"{r.name}:{kind}"] = path
    return charts
