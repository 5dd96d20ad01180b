"""The headline numbers of one WorkloadResult that every renderer shows, and how they are written.

A :class:`Digest` is derived purely from a :class:`~perfgate.records.model.WorkloadResult`: step time
(baseline -> current, change), samples/s, GPU-idle fraction, the worst phase and the regressed
comparisons. Renderers (terminal, markdown, junit, annotations, status descriptions) format it.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from perfgate.gate.wording import fmt_change, fmt_metric_change, fmt_number
from perfgate.records.launch import STEPS_TRACE_FILE
from perfgate.records.model import MetricComparison, Verdict, WorkloadResult
from perfgate.records.notes import message_text

__all__ = ["Digest", "STEP_MEAN_METRIC", "VERDICT_ICONS", "artifacts_line", "digest", "fmt_step", "fmt_worst_phase",
    "launch_phases", "one_line", "phase_comparisons", "phase_label", "regressed", "result_message", "steps_from",
    "worst_phase"]

STEP_METRIC = "step_time_ms"
STEP_MEAN_METRIC = "step_time_mean_ms"
SAMPLES_METRIC = "samples_per_s"
IDLE_METRIC = "gpu_idle_fraction"
PHASE_PREFIX = "phase."

VERDICT_ICONS: dict[Verdict, str] = {
    Verdict.PASS: ":white_check_mark:",
    Verdict.REGRESSED: ":x:",
    Verdict.IMPROVED: ":rocket:",
    Verdict.NEW: ":new:",
    Verdict.NO_DATA: ":grey_question:",
    Verdict.INCONCLUSIVE: ":warning:",
    Verdict.ERROR: ":boom:",
}


@dataclass(frozen=True)
class Digest:
    """What a one-line summary of a workload says."""

    name: str
    verdict: Verdict
    step_baseline_ms: float | None
    step_current_ms: float | None
    step_change: float | None
    samples_per_s: float | None
    gpu_idle_fraction: float | None
    worst_phase: MetricComparison | None
    regressed: tuple[MetricComparison, ...]
    step_metric: str = STEP_METRIC     # which step time the headline shows (the one that decided)


def _comparison(result: WorkloadResult, metric: str) -> MetricComparison | None:
    return next((c for c in result.comparisons if c.metric == metric), None)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _current_metric(result: WorkloadResult, metric: str) -> float | None:
    """Median over the current launches of one of Analysis.metrics()."""
    values = [a.metrics()[metric] for a in result.analyses if metric in a.metrics()]
    if not values and result.profile is not None:   # GPU metrics come from the profile launch
        values = [v for v in [result.profile.metrics().get(metric)] if v is not None]
    return _median(values)


def phase_label(metric: str) -> str:
    """``phase.forward.cpu_ms`` -> ``forward``; ``phase.forward.gpu_ms`` -> ``forward (GPU)``."""
    body = metric[len(PHASE_PREFIX):]
    name, _, kind = body.rpartition(".")
    return f"{name} (GPU)" if kind == "gpu_ms" else name


def phase_comparisons(result: WorkloadResult) -> list[MetricComparison]:
    """The per-phase comparisons, in the order compare produced them."""
    return [c for c in result.comparisons if c.metric.startswith(PHASE_PREFIX)]


def launch_phases(result: WorkloadResult) -> list[tuple[str, float]]:
    """The first current launch's phases with their CPU ms per step, largest first (a run without
    comparisons: a recording, a result read back), name breaking ties: the order survives
    ``perfgate-report.json``, whose keys are sorted, so ``perfgate report --from`` shows the run's."""
    if not result.analyses:
        return []
    phases = result.analyses[0].phases
    return sorted(((name, p.cpu_per_step_ms) for name, p in phases.items()), key=lambda x: (-x[1], x[0]))


def regressed(result: WorkloadResult) -> tuple[MetricComparison, ...]:
    """Comparisons with verdict REGRESSED, gating ones first."""
    rows = [c for c in result.comparisons if c.verdict is Verdict.REGRESSED]
    return tuple(sorted(rows, key=lambda c: not c.gating))


def worst_phase(result: WorkloadResult) -> MetricComparison | None:
    """The phase that grew most beyond its tolerance: REGRESSED before INCONCLUSIVE, then by ms per
    step added; None where no phase went beyond its tolerance. A phase within it is not "worst",
    whatever its relative change: a 0.7 ms optimizer phase +14 % beside +9 ms of the step's own code
    (nanogpt's input pull request on an H200) is noise the tolerance's floor was set to absorb."""
    rows = [c for c in phase_comparisons(result)
            if c.verdict in (Verdict.REGRESSED, Verdict.INCONCLUSIVE) and c.delta is not None and c.delta > 0]
    if not rows:
        return None
    return max(rows, key=lambda c: (c.verdict is Verdict.REGRESSED, c.delta or 0.0))


def _headline_step(result: WorkloadResult) -> MetricComparison | None:
    """The step-time comparison the headline shows: the median, unless the mean decided the verdict
    alone (a data-bound loop's median can fall while its mean, the throughput, regresses)."""
    median, mean = _comparison(result, STEP_METRIC), _comparison(result, STEP_MEAN_METRIC)
    order = {Verdict.REGRESSED: 0, Verdict.INCONCLUSIVE: 1}
    if mean is not None and median is not None and order.get(mean.verdict, 2) < order.get(median.verdict, 2):
        return mean
    return median


def digest(result: WorkloadResult) -> Digest:
    """The headline numbers of ``result``; falls back to the analyses when no comparison exists."""
    step = _headline_step(result)
    recorded = result.baseline_updated   # the run is the baseline: nothing to compare
    base = step.baseline if step else None if recorded else _median(list(result.baseline_step_times_ms))
    cur = step.current if step and step.current is not None else _current_metric(result, STEP_METRIC)
    change = step.change if step else (cur / base - 1 if cur is not None and base else None)
    sps = _comparison(result, SAMPLES_METRIC)
    idle = _comparison(result, IDLE_METRIC)
    return Digest(
        name=result.name,
        verdict=result.verdict,
        step_baseline_ms=base,
        step_current_ms=cur,
        step_change=change,
        samples_per_s=sps.current if sps and sps.current is not None else _current_metric(result, SAMPLES_METRIC),
        gpu_idle_fraction=idle.current if idle and idle.current is not None else _current_metric(result, IDLE_METRIC),
        worst_phase=worst_phase(result),
        regressed=regressed(result),
        step_metric=step.metric if step else STEP_METRIC,
    )


def steps_from(result: WorkloadResult) -> str | None:
    """Which event ended an iteration in the current launches and why, and the statistic gated:
    ``perfgate's optimizer hook (...): one iteration per optimizer step (AdamW #1); 96 iterations
    measured per launch, gated on the median of 12-iteration means``; None without an analysis."""
    if not result.analyses:
        return None
    st = result.analyses[-1].steps
    marker = st.marker or (f"the workload's '{st.range_name}' ranges" if st.source == "nvtx" else st.source)
    apart = f", {st.interludes} evaluation/checkpoint periods left out" if st.interludes else ""
    return f"{marker}; {st.count} iterations measured per launch{apart}, gated on the {st.statistic}"


# ----------------------------------------------------------------------------- formatting


def fmt_step(d: Digest) -> str:
    """``12.3 -> 15.1 ms (+22.8 %)``, or just the current value without a baseline."""
    if d.step_current_ms is None:
        return "-"
    if d.step_baseline_ms is None:
        return f"{fmt_number(d.step_current_ms)} ms"
    which = ", mean" if d.step_metric == STEP_MEAN_METRIC else ""
    return (f"{fmt_number(d.step_baseline_ms)} -> {fmt_number(d.step_current_ms)} ms"
            f" ({fmt_change(d.step_change)}{which})")


def fmt_worst_phase(d: Digest) -> str:
    """``forward +48.3 %`` or "-"."""
    if d.worst_phase is None:
        return "-"
    return f"{phase_label(d.worst_phase.metric)} {fmt_metric_change(d.worst_phase)}"


def result_message(result: WorkloadResult) -> str:
    """What the result says besides its numbers, as every renderer and the result record (its
    ``"message"``) write it: its notes (records/notes.py), then the account of the change, rendered
    here from its record (``result.attribution``)."""
    if result.attribution is None:
        return message_text(result.notes)
    from perfgate.diagnosis.render import render_attribution_text   # the diagnosis (numpy) only for an account

    return "\n".join(text for text in (message_text(result.notes), render_attribution_text(result.attribution)) if text)


def one_line(result: WorkloadResult, limit: int = 140) -> str:
    """One line for a commit status description or annotation title (at most ``limit`` chars)."""
    d = digest(result)
    if result.verdict is Verdict.ERROR:
        text = f"ERROR: {(result.error or result_message(result) or 'failed').splitlines()[0]}"
    else:
        text = f"{d.verdict}: step {fmt_step(d)}"
        if d.regressed:
            text += "; regressed " + ", ".join(
                f"{c.metric} {fmt_metric_change(c)}" for c in d.regressed[:3])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def artifacts_line(result: WorkloadResult, code: Callable[[str], str] = str, traces: bool = False) -> str | None:
    """Where the workload's artifacts are (every renderer's last line of it), None without a run
    folder: ``code`` quotes a path (Markdown's code span); with ``traces``, the steps' Chrome trace
    a launch's folder holds is named."""
    if result.run_dir is None:
        return None
    look = ""
    if traces and any(Path(result.run_dir).glob(f"*/{STEPS_TRACE_FILE}")):
        look = (f" (each launch's folder holds {code(STEPS_TRACE_FILE)}: three steps around its median one, "
                "a Chrome trace that ui.perfetto.dev opens)")
    return f"artifacts: {code(str(result.run_dir))}{look}"
