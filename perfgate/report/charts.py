"""PNG charts per workload (matplotlib, Agg backend, imported lazily).

- ``<workload>-phases.png``: CPU time per step of each phase, baseline vs current (bars).
- ``<workload>-steps.png``: per-step time series of the current launches and the baseline's steps.
- ``<workload>-resources.png``: peak GPU memory and energy per sample of each current launch (bars)
  against the baseline (dashed line), next to the step-time chart; only when a launch has them.

The Markdown report links them by their path relative to the report directory (they are uploaded
with it as an artifact). Without matplotlib, :func:`render_charts` returns no charts and
:data:`MISSING_MATPLOTLIB_NOTE` explains why.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.records.model import WorkloadResult
from perfgate.report.digest import launch_phases, phase_label
from perfgate.report.resources import energy_summary, memory_summary

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


def _label(name: str) -> str:
    """A phase name as matplotlib draws it literally: ``$`` would start mathtext (a name such as
    ``$\\frac{$`` made the chart, and with it every report, fail) and control characters are shown
    as ``\\xNN`` (they have no glyph)."""
    shown = re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: f"\\x{ord(m.group()):02x}", name)
    return shown.replace("$", r"\$")


def phase_bars(result: WorkloadResult) -> tuple[list[str], list[float | None], list[float | None]]:
    """Phase labels with baseline and current CPU ms per step (from ``phase.*.cpu_ms`` comparisons,
    else the current launches' first analysis with no baseline)."""
    rows = [c for c in result.comparisons if c.metric.startswith("phase.") and c.metric.endswith(".cpu_ms")]
    if rows:
        return [phase_label(c.metric) for c in rows], [c.baseline for c in rows], [c.current for c in rows]
    phases = launch_phases(result)
    return [name for name, _ in phases], [None] * len(phases), [ms for _, ms in phases]


def _height(value: float | None) -> float:
    """A bar's height: an absent value draws no bar (NaN), never one of height 0."""
    return math.nan if value is None else value


def _phase_chart(plt: Any, result: WorkloadResult, path: Path) -> bool:
    labels, base, cur = phase_bars(result)
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], [_height(b) for b in base], width=0.4, label="baseline", color="#9e9e9e")
    ax.bar([i + 0.2 for i in x], [_height(c) for c in cur], width=0.4, label="current",
           color="#d62728" if result.failed else "#1f77b4")
    ax.set_xticks(list(x), [_label(name) for name in labels])
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


def resource_series(result: WorkloadResult) -> list[tuple[str, str, list[float], float | None]]:
    """(title, unit, current value per launch, baseline) for peak memory and energy per sample."""
    out = []
    memory, energy = memory_summary(result), energy_summary(result)
    if memory is not None and memory["launches"]:
        out.append((f"peak GPU memory ({memory['short']})", "MiB", memory["launches"], memory["baseline"]))
    if energy is not None and energy["launches"]:
        out.append(("energy per sample", "J", energy["launches"], energy["baseline"]))
    return out


def _resources_chart(plt: Any, result: WorkloadResult, path: Path) -> bool:
    series = resource_series(result)
    if not series:
        return False
    fig, axes = plt.subplots(1, len(series), figsize=(3.5 * len(series) + 1, 3.5), squeeze=False)
    for ax, (title, unit, values, base) in zip(axes[0], series):
        ax.bar([str(i + 1) for i in range(len(values))], values, color="#d62728" if result.failed else "#1f77b4",
               label="current")
        if base is not None:
            ax.axhline(base, color="#616161", linestyle="--", linewidth=1, label="baseline")
        ax.set_xlabel("launch")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize="medium")
        ax.legend(fontsize="small")
    fig.suptitle(f"{result.name}: memory and energy per launch")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def render_charts(results: Sequence[WorkloadResult], out_dir: Path) -> dict[str, Path]:
    """Write the PNGs into ``out_dir``; keys are ``"<workload>:phases"``, ``"<workload>:steps"`` and
    ``"<workload>:resources"``.
    Returns {} when matplotlib is missing."""
    plt = _pyplot()
    if plt is None:
        return {}
    out_dir.mkdir(parents=True, exist_ok=True)
    charts: dict[str, Path] = {}
    for r in results:
        for kind, draw in (("phases", _phase_chart), ("steps", _steps_chart), ("resources", _resources_chart)):
            path = out_dir / f"{_slug(r.name)}-{kind}.png"
            if draw(plt, r, path):
                charts[f"{r.name}:{kind}"] = path
    return charts
