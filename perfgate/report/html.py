"""``report.html``: one self-contained page (no script, no request to any network: inline CSS and
SVG) with the verdict table, each workload's account and phase table, its charts, and its median
step drawn as a timeline, the base's beside the head's where the run measured the base.

The step timelines come from the launches' ``steps.trace.json`` (perfgate.analysis.step_trace) in the
run's artifacts: the head's from the profile launch (it holds the GPU's kernels) or the first timing
launch, the base's from the confirmation's base launches (``confirm/base-profile``, ``confirm/base-0``).
The middle of the three steps is drawn: a lane per host thread (NVTX ranges, nested ones below their
parent) and per GPU stream (kernels, copies, memsets), on one time axis in milliseconds.

Every name and message is HTML-escaped (a trace names its ranges and kernels).
"""
from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.gate.wording import fmt_metric_change, fmt_number, fmt_tolerance, fmt_value
from perfgate.records.launch import STEPS_TRACE_FILE
from perfgate.records.model import WorkloadResult
from perfgate.report.digest import (digest, fmt_step, fmt_worst_phase, phase_comparisons, phase_label, result_message,
                                     steps_from)

#: Where a run's step traces are, by side: the first folder of each list that holds one.
HEAD_FOLDERS = ("profile", "launch-1", "launch-0")
BASE_FOLDERS = ("confirm/base-profile", "confirm/base-0", "confirm/base-1")
WIDTH = 640
LANE = 14
COLOURS = {"nvtx": "#5b8def", "kernel": "#e8793a", "memcpy": "#3aa856", "memset": "#9a62c9"}
STYLE = ("body{font:14px system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}.REGRESSED{color:#b00020;font-weight:bold}"
         ".steps{display:flex;gap:2em;flex-wrap:wrap}pre{white-space:pre-wrap;background:#f6f6f6;padding:8px}"
         "svg text{font:11px sans-serif}")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def step_traces(run_dir: Path | None) -> dict[str, Path]:
    """``{"head": path, "base": path}`` of the run's step traces that exist."""
    found: dict[str, Path] = {}
    if run_dir is None:
        return found
    for side, folders in (("head", HEAD_FOLDERS), ("base", BASE_FOLDERS)):
        for folder in folders:
            path = Path(run_dir) / folder / STEPS_TRACE_FILE
            if path.is_file():
                found[side] = path
                break
    return found


def _lanes(events: list[dict[str, Any]], lo: float, hi: float) -> list[tuple[str, list[tuple[dict, int]]]]:
    """(lane name, [(event, depth)]) for the X events inside [lo, hi): host threads, then GPU
    streams; nested NVTX ranges one row deeper than the range they are in."""
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    lanes: dict[tuple[int, int], list[tuple[dict, int]]] = {}
    open_ends: dict[tuple[int, int], list[float]] = {}
    for e in sorted((e for e in events if e["ph"] == "X" and e["ts"] < hi and e["ts"] + e["dur"] > lo),
                    key=lambda e: (e["ts"], -e["dur"])):
        key = (e["pid"], e["tid"])
        stack = open_ends.setdefault(key, [])
        while stack and stack[-1] <= e["ts"]:
            stack.pop()
        depth = len(stack) if e["cat"] == "nvtx" else 0
        if e["cat"] == "nvtx":
            stack.append(e["ts"] + e["dur"])
        lanes.setdefault(key, []).append((e, depth))
    order = sorted(lanes, key=lambda k: (k[0] >= (1 << 30), k))
    return [(names.get(k, f"{k[0]}/{k[1]}"), lanes[k]) for k in order]


def timeline_svg(doc: dict[str, Any], title: str) -> str:
    """The middle step of a step trace (all of it with fewer than three steps) as an SVG."""
    events = doc.get("traceEvents", [])
    starts = sorted(e["ts"] for e in events if e.get("cat") == "step")
    ends = [e["ts"] + e["dur"] for e in events if e.get("ph") == "X"]
    if len(starts) >= 3:
        lo, hi = starts[1], starts[2]
    else:
        lo, hi = (starts[0] if starts else 0.0), max(ends, default=1.0)
    span = max(hi - lo, 1e-3)
    label_w, y, parts = 110, 30, []
    for name, items in _lanes(events, lo, hi):
        rows = 1 + max(depth for _, depth in items)
        parts.append(f'<text x="0" y="{y + 10}">{_e(name[:18])}</text>')
        for e, depth in items:
            x0 = label_w + (max(e["ts"], lo) - lo) / span * WIDTH
            x1 = label_w + (min(e["ts"] + e["dur"], hi) - lo) / span * WIDTH
            parts.append(f'<rect x="{x0:.1f}" y="{y + depth * LANE}" width="{max(x1 - x0, 0.5):.1f}" '
                         f'height="{LANE - 2}" fill="{COLOURS.get(e["cat"], "#888")}">'
                         f'<title>{_e(e["name"])} {e["dur"] / 1000:.3f} ms</title></rect>')
        y += rows * LANE + 6
    head = (f'<text x="0" y="14">{_e(title)}: one step, {span / 1000:.2f} ms</text>'
            f'<line x1="{label_w}" y1="20" x2="{label_w + WIDTH}" y2="20" stroke="#999"/>'
            f'<text x="{label_w + WIDTH - 40}" y="14">{span / 1000:.1f} ms</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + WIDTH + 10}" height="{y + 4}" '
            f'role="img">{head}{"".join(parts)}</svg>')


def _bars_svg(rows: Sequence[tuple[str, float, float]], unit: str) -> str:
    """Horizontal bars, baseline (grey) above current (blue), per row."""
    top = max((max(b, c) for _, b, c in rows), default=1.0) or 1.0
    parts, y = [], 4
    for name, base, cur in rows:
        parts.append(f'<text x="0" y="{y + 14}">{_e(name[:24])}</text>')
        for value, colour in ((base, "#9e9e9e"), (cur, "#5b8def")):
            parts.append(f'<rect x="170" y="{y}" width="{value / top * 380:.1f}" height="9" fill="{colour}">'
                         f'<title>{fmt_number(value)} {unit}</title></rect>')
            y += 10
        parts.append(f'<text x="{175 + cur / top * 380:.1f}" y="{y - 1}">{fmt_number(cur)} {unit}</text>')
        y += 8
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="640" height="{y + 4}" role="img">{"".join(parts)}</svg>'


def _section(result: WorkloadResult) -> list[str]:
    d = digest(result)
    out = [f'<h2 id="{_e(d.name)}">{_e(d.name)}: <span class="{_e(d.verdict)}">{_e(d.verdict)}</span></h2>',
           f"<p>step time {_e(fmt_step(d))}; worst phase {_e(fmt_worst_phase(d))}</p>"]
    if result.error:
        out.append(f"<pre>{_e(result.error.strip())}</pre>")
    if message := result_message(result):
        out.append(f"<pre>{_e(message.strip())}</pre>")
    steps = steps_from(result)
    if steps:
        out.append(f"<p>steps: {_e(steps)}</p>")
    phases = phase_comparisons(result)
    if phases:
        out.append("<table><tr><th>phase</th><th>baseline</th><th>current</th><th>change</th><th>tolerance</th>"
                   "<th>verdict</th></tr>")
        out += [f'<tr><td>{_e(phase_label(c.metric))}</td><td>{_e(fmt_value(c.baseline, c.unit))}</td>'
                f'<td>{_e(fmt_value(c.current, c.unit))}</td><td>{_e(fmt_metric_change(c))}</td>'
                f'<td>{_e(fmt_tolerance(c.tolerance, c.unit))}</td><td class="{_e(c.verdict)}">{_e(c.verdict)}</td></tr>'
                for c in phases]
        out.append("</table>")
        cpu = [(phase_label(c.metric), c.baseline, c.current) for c in phases
               if c.metric.endswith(".cpu_ms") and c.baseline is not None and c.current is not None]
        if cpu:
            out += ["<h3>CPU ms per step by phase (grey baseline, blue current)</h3>", _bars_svg(cpu, "ms")]
    traces = step_traces(result.run_dir)
    if traces:
        out.append('<h3>The median step</h3><div class="steps">')
        for side in ("base", "head"):
            if side in traces:
                try:
                    doc = json.loads(traces[side].read_text(encoding="utf-8"))
                except (OSError, ValueError) as exc:
                    out.append(f"<p>{_e(side)}: {_e(traces[side])} unreadable ({_e(exc)})</p>")
                    continue
                name = "base (measured beside the head)" if side == "base" else "this run"
                out.append(f"<div>{timeline_svg(doc, name)}<p>{_e(traces[side])}</p></div>")
        out.append("</div>")
    return out


def render_html(results: Sequence[WorkloadResult]) -> str:
    """The whole page."""
    failed = sum(1 for r in results if r.failed)
    title = f"perfgate: {failed} of {len(results)} workload(s) failed" if failed else \
        f"perfgate: {len(results)} workload(s) passed"
    rows = []
    for r in results:
        d = digest(r)
        rows.append(f'<tr><td><a href="#{_e(d.name)}">{_e(d.name)}</a></td><td class="{_e(d.verdict)}">'
                    f"{_e(d.verdict)}</td><td>{_e(fmt_step(d))}</td><td>{_e(fmt_worst_phase(d))}</td></tr>")
    body = [f"<h1>{_e(title)}</h1>", "<table><tr><th>workload</th><th>verdict</th><th>step time</th>"
            "<th>worst phase</th></tr>", *rows, "</table>"]
    for r in sorted(results, key=lambda r: not r.failed):
        body += _section(r)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
