"""GitHub-flavoured Markdown for the job summary (``$GITHUB_STEP_SUMMARY``) and the PR comment.

Layout: a table with one row per workload, then one section per workload (failing first) with its
headline numbers, the explanation, the phase table against the baseline (regressed rows marked
:x: and bold), for a failed workload its Mermaid charts (perfgate.report.mermaid: phases, and step
time per launch against the tolerance) and a collapsed ``<details>`` holding every other metric.

Every name, message, phase name and path goes through report/escape.py: it renders as the text
it is, never as Markdown or HTML (a workload's trace and a result file control that text).

Size limits: GitHub rejects a step summary over 1 MiB and a comment over 65,536 characters. When
the full text is too long it is rebuilt with less detail (``<details>`` only for failing
workloads, then sections only while they fit, then fewer table rows), always ending in complete
Markdown and a note saying what was left out.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from urllib.parse import quote

from perfgate.gate.wording import fmt_metric_change, fmt_number, fmt_stats, fmt_tolerance, fmt_value
from perfgate.records.model import MetricComparison, Verdict, WorkloadResult
from perfgate.report.digest import (
    VERDICT_ICONS, artifacts_line, digest, fmt_step, fmt_worst_phase, launch_phases, phase_comparisons, steps_from,
    phase_label, result_message,
)
from perfgate.report.escape import md_cell_text, md_code, md_text
from perfgate.report.mermaid import charts as mermaid_charts
from perfgate.report.resources import (
    LAUNCH_HEADER, MEMORY_COLUMNS, energy_cell, energy_per_step, energy_summary, NO_PER_SAMPLE, launch_rows,
    measured_resources, memory_cell, memory_summary, unavailable_energy,
)

STEP_SUMMARY_MAX_BYTES = 1_000_000      # GitHub: 1 MiB per step summary; keep a margin
PR_COMMENT_MAX_CHARS = 65_536           # GitHub: per issue/PR comment
COMMENT_MARKER = "<!-- perfgate-report -->"   # lets a workflow find and update its own comment
FULL_REPORT_HINT = "the full report is in the run's artifacts (perfgate-report.json, summary.md)"


def _cell(text: str) -> str:
    """Text safe inside a table cell (no pipes or newlines)."""
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [_row(header), "|" + "|".join("---" for _ in header) + "|", *(_row(r) for r in rows)]


def _mark(c: MetricComparison, text: str) -> str:
    """``text`` (already Markdown) in bold for a regressed row."""
    return f"**{text}**" if c.verdict is Verdict.REGRESSED else text


def _verdict_cell(v: Verdict) -> str:
    return f"{VERDICT_ICONS[v]} {v}"


def _comparison_row(c: MetricComparison, label: str) -> list[str]:
    return [
        _mark(c, md_cell_text(label)), fmt_value(c.baseline, c.unit), fmt_value(c.current, c.unit),
        _mark(c, fmt_metric_change(c)), fmt_tolerance(c.tolerance, c.unit),
        _verdict_cell(c.verdict) + ("" if c.gating else " (info)"),
    ]


def overview_rows(results: Sequence[WorkloadResult]) -> list[str]:
    """One table row per workload (no header)."""
    rows = []
    for r in results:
        d = digest(r)
        rows.append(_row([
            md_code(d.name), _verdict_cell(d.verdict), fmt_step(d), fmt_number(d.samples_per_s),
            "-" if d.gpu_idle_fraction is None else f"{d.gpu_idle_fraction * 100:.1f} %",
            md_cell_text(fmt_worst_phase(d)), memory_cell(r), energy_cell(r),
        ]))
    return rows


OVERVIEW_HEADER = _table(
    ("workload", "verdict", "step time", "samples/s", "GPU idle", "worst phase", *MEMORY_COLUMNS), [])
#: Under the overview: what its step time is (perfgate.report.terminal.STEP_TIME_LEGEND).
OVERVIEW_LEGEND = ("_Step time: each launch's step time (the median of its runs of consecutive iterations' means), "
                   "geometric mean over the launches (what the gate compares)._")


def _phase_table(result: WorkloadResult) -> list[str]:
    """Phase, baseline ms, current ms, change, tolerance, verdict; from comparisons, else analyses."""
    header = ("phase", "baseline", "current", "change", "tolerance", "verdict")
    rows = [_comparison_row(c, phase_label(c.metric)) for c in phase_comparisons(result)]
    if not rows:
        rows = [[md_cell_text(name), "-", f"{fmt_number(ms)} ms", "-", "-", "-"] for name, ms in launch_phases(result)]
    return _table(header, rows) if rows else []


def _resources(result: WorkloadResult) -> list[str]:
    """Peak GPU memory and energy: the headline (source named, launch spread) and one row per
    launch; nothing for a run whose launches measured neither (a CPU run)."""
    memory, energy = memory_summary(result), energy_summary(result)
    if memory is None and energy is None and not measured_resources(result):
        return []
    facts = []
    if memory is not None:
        facts.append(f"peak GPU memory {memory_cell(result)} ({memory['source']})")
    else:
        facts.append("peak GPU memory: not measured by this run's launches")
    if energy is not None:
        spread, across = energy["spread"], ""
        if spread is not None and spread["cv"] is not None:
            across = (f", launches {fmt_number(spread['min'], 4)} to {fmt_number(spread['max'], 4)} J"
                      f" (CV {spread['cv'] * 100:.2f} %)")
        facts.append(f"energy per sample {energy_cell(result)}{across} ({energy['source']})")
    else:
        facts.append(f"energy: {unavailable_energy(result) or (NO_PER_SAMPLE if energy_per_step(result) else 'not measured')}")
    rows = [[md_cell_text(c) for c in r] for r in launch_rows(result)]
    return [md_text("; ".join(facts)), "", *_table(LAUNCH_HEADER, rows), ""]


def _details(result: WorkloadResult) -> list[str]:
    """A collapsed table of the metrics that are not phases, with statistics and notes."""
    others = [c for c in result.comparisons if not c.metric.startswith("phase.")]
    if not others:
        return []
    rows = [_comparison_row(c, c.metric) + [fmt_stats(c) or "-", md_cell_text(c.note or "-")] for c in others]
    table = _table(("metric", "baseline", "current", "change", "tolerance", "verdict",
                    "statistics", "note"), rows)
    return ["<details><summary>All metrics</summary>", "", *table, "", "</details>"]


def render_section(result: WorkloadResult, chart_links: Mapping[str, str] | None = None,
                   with_details: bool = True) -> str:
    """The Markdown section of one workload."""
    d = digest(result)
    lines = [f"### {VERDICT_ICONS[d.verdict]} {md_code(d.name)}: {d.verdict}", ""]
    facts = [f"step time {fmt_step(d)}"]
    if d.samples_per_s is not None:
        facts.append(f"{fmt_number(d.samples_per_s)} samples/s")
    if d.gpu_idle_fraction is not None:
        facts.append(f"GPU idle {d.gpu_idle_fraction * 100:.1f} %")
    lines += ["; ".join(facts), ""]
    if result.error:
        lines += ["```", result.error.strip().replace("```", "'''"), "```", ""]
    if message := result_message(result):
        lines += [md_text(message.strip()), ""]
    steps = steps_from(result)
    if steps:
        lines += [f"steps: {md_text(steps)}", ""]
    phase = _phase_table(result)
    if phase:
        lines += [*phase, ""]
    lines += mermaid_charts(result)
    lines += _resources(result)
    if with_details:
        details = _details(result)
        if details:
            lines += [*details, ""]
    links = [f"[{md_cell_text(label)}]({quote(path)})" for label, path in (chart_links or {}).items()
             if label.startswith(f"{result.name}:") or label == result.name]
    if links:
        lines += ["charts (in the run's artifacts): " + ", ".join(links), ""]
    if (where := artifacts_line(result, md_code, traces=True)) is not None:
        lines += [where, ""]
    return "\n".join(lines)


def _title(results: Sequence[WorkloadResult]) -> str:
    failed = sum(1 for r in results if r.failed)
    state = f":x: {failed} of {len(results)} workload(s) failed" if failed else \
        f":white_check_mark: {len(results)} workload(s) passed"
    return f"## perfgate: {state}"


def _assemble(results: Sequence[WorkloadResult], chart_links: Mapping[str, str] | None,
              fits: Callable[[str], bool], prefix: str = "") -> str:
    """The most detailed rendering for which ``fits`` holds (see the module docstring)."""
    head = [prefix + _title(results), ""] if prefix else [_title(results), ""]
    order = sorted(results, key=lambda r: (not r.failed, r.verdict is Verdict.PASS))
    rows = overview_rows(results)

    def build(n_rows: int, sections: Sequence[str], left_out: int) -> str:
        parts = [*head, *OVERVIEW_HEADER, *rows[:n_rows], "", OVERVIEW_LEGEND, ""]
        if n_rows < len(rows):
            parts += [f"_{len(rows) - n_rows} more workload(s) not listed; {FULL_REPORT_HINT}._", ""]
        parts += list(sections)
        if left_out:
            parts += [f"_Details of {left_out} workload(s) left out to stay within GitHub's size "
                      f"limit; {FULL_REPORT_HINT}._", ""]
        return "\n".join(parts)

    full = [render_section(r, chart_links) for r in order]
    text = build(len(rows), full, 0)
    if fits(text):
        return text
    slim = [render_section(r, chart_links, with_details=r.failed) for r in order]
    text = build(len(rows), slim, 0)
    if fits(text):
        return text
    n_rows = len(rows)
    while n_rows > 0 and not fits(build(n_rows, [], len(order))):
        n_rows = max(0, n_rows - max(1, n_rows // 10))
    kept: list[str] = []
    for section in slim:
        if not fits(build(n_rows, [*kept, section], len(order) - len(kept) - 1)):
            break
        kept.append(section)
    return build(n_rows, kept, len(order) - len(kept))


def render_markdown(results: Sequence[WorkloadResult], *, chart_links: Mapping[str, str] | None = None,
                    max_bytes: int = STEP_SUMMARY_MAX_BYTES) -> str:
    """The job-summary Markdown, at most ``max_bytes`` bytes of UTF-8."""
    return _assemble(results, chart_links, lambda t: len(t.encode("utf-8")) <= max_bytes)


def render_pr_comment(results: Sequence[WorkloadResult], *, chart_links: Mapping[str, str] | None = None,
                      max_chars: int = PR_COMMENT_MAX_CHARS) -> str:
    """The PR-comment body (starts with :data:`COMMENT_MARKER`), at most ``max_chars`` characters."""
    return _assemble(results, chart_links, lambda t: len(t) <= max_chars,
                     prefix=COMMENT_MARKER + "\n")
