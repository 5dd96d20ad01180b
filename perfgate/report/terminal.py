"""Plain-text rendering for the terminal: the end-of-run summary table and a failed item's message.

Returns strings only; the pytest plugin and the CLI print them.
"""
from __future__ import annotations

from collections.abc import Sequence

from perfgate.gate.wording import fmt_metric_change, fmt_number, fmt_stats, fmt_tolerance, fmt_value
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.records.notes import CONFIRMATION, WARNING
from perfgate.report.digest import (STEP_MEAN_METRIC, artifacts_line, digest, fmt_step, fmt_worst_phase, result_message,
                                     steps_from)
from perfgate.report.resources import MEMORY_COLUMNS, energy_cell, memory_cell

SUMMARY_HEADER = ("workload", "verdict", "step time (base -> current)", "samples/s",
                  "GPU idle", "worst phase", *MEMORY_COLUMNS)
#: What the step time column holds: not the median of a baseline file's launches (its "summaries")
#: but what the gate compares.
STEP_TIME_LEGEND = ("step time: each launch's step time (the median of its runs of consecutive iterations' means), "
                    "geometric mean over the launches (what the gate compares)")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned fixed-width columns, two spaces apart, with a dashed rule under the header."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), indent + "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def render_summary(results: Sequence[WorkloadResult]) -> list[str]:
    """The compact table printed at the end of a run, one row per workload, plus a count line."""
    if not results:
        return ["perfgate: no workloads ran"]
    rows = []
    for r in results:
        d = digest(r)
        rows.append((
            d.name,
            str(d.verdict),
            fmt_step(d),
            fmt_number(d.samples_per_s),
            "-" if d.gpu_idle_fraction is None else f"{d.gpu_idle_fraction * 100:.1f} %",
            fmt_worst_phase(d),
            memory_cell(r),
            energy_cell(r),
        ))
    counts: dict[str, int] = {}
    for r in results:
        counts[str(r.verdict)] = counts.get(str(r.verdict), 0) + 1
    tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    return [f"perfgate: {len(results)} workload(s): {tally}", *_table(SUMMARY_HEADER, rows), STEP_TIME_LEGEND,
            *summary_notes(results)]


def summary_notes(results: Sequence[WorkloadResult]) -> list[str]:
    """What a reader of the summary must see besides failures: which event ended an iteration (and
    the statistic gated), what a recording recorded (and what the workload's noise lets the gate
    catch), why an INCONCLUSIVE verdict could not decide and what to do, warnings (e.g. a workload
    too noisy for its tolerance) and which comparison decided when the base was measured in this job."""
    lines: list[str] = []
    for r in results:
        if r.baseline_updated or r.verdict is Verdict.INCONCLUSIVE:
            lines += [f"{r.name}: {line}" for n in r.notes for line in n.line().splitlines() if line.strip()]
        elif not r.failed:   # a stored baseline's verdict the base in this job overturned is said too
            lines += [f"{r.name}: {line}" for n in r.notes if n.severity in (WARNING, CONFIRMATION)
                      for line in n.line().splitlines() if line.strip()]
        steps = steps_from(r)
        if steps:
            lines.append(f"{r.name}: steps: {steps}")
    return lines


def failure_message(result: WorkloadResult) -> str:
    """Multi-line text for a failed pytest item or the CLI: verdict, regressed metrics with
    baseline/current/change/tolerance (and p-value/CI), the explanation and the artifacts path."""
    d = digest(result)
    lines = [f"perfgate: {result.name} {result.verdict}"]
    if result.verdict is Verdict.ERROR and result.error:
        lines.append(f"error: {result.error}")
    rows = [
        (c.metric, fmt_value(c.baseline, c.unit), fmt_value(c.current, c.unit),
         fmt_metric_change(c), fmt_tolerance(c.tolerance, c.unit),
         fmt_stats(c) + ("" if c.gating else " (not gating)"))
        for c in d.regressed
    ]
    if rows:
        lines.append("regressed metrics:")
        lines += _table(("metric", "baseline", "current", "change", "tolerance", "statistics"),
                        rows, indent="  ")
    elif d.step_current_ms is not None:
        kind = "mean step" if d.step_metric == STEP_MEAN_METRIC else "step time (median of run means)"
        lines.append(f"step time (each launch's {kind}, geometric mean over launches): {fmt_step(d)}")
    if message := result_message(result):
        lines.append(message.strip())
    steps = steps_from(result)
    if steps:
        lines.append(f"steps: {steps}")
    if result.baseline_path is not None:
        lines.append(f"baseline: {result.baseline_path}")
    if (where := artifacts_line(result)) is not None:
        lines.append(where)
    return "\n".join(lines)
