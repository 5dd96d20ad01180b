"""Mermaid charts for the job summary and the PR comment: GitHub draws a ```` ```mermaid ```` block
where the reviewer already is, where a PNG in the artifacts needs a download.

- :func:`phase_chart`: each phase's CPU ms per step, current (bars) against the baseline (line),
  the phases that moved most first, at most :data:`MOST_PHASES`.
- :func:`step_chart`: the gated step time of each current launch (bars) against the baseline and
  the baseline plus its tolerance (lines): the band the gate allows.

Both are ``xychart-beta`` diagrams. Text from the trace (phase names) is reduced to characters
that cannot end a Mermaid string or list (:func:`_label`); numbers are plain decimals. Pure: a
``WorkloadResult`` in, the diagram's text out (None when there is nothing to draw). The PNG charts
(perfgate.report.charts) stay in the artifacts.
"""
from __future__ import annotations

import math
import re
from collections.abc import Sequence

from perfgate.records.model import MetricComparison, WorkloadResult
from perfgate.report.digest import phase_comparisons, phase_label

MOST_PHASES = 8
STEP_METRIC = "step_time_ms"
_LABEL_LEN = 24


def _label(text: str) -> str:
    """A name as a quoted x-axis label: letters, digits, space and ``_ . - / ( ) : +`` kept, the
    rest replaced by ``_``, at most 24 characters."""
    kept = re.sub(r"[^A-Za-z0-9 _.\-/():+]", "_", text).strip() or "_"
    return '"' + (kept if len(kept) <= _LABEL_LEN else kept[:_LABEL_LEN - 1] + "~") + '"'


def _number(value: float) -> str:
    """A plain decimal (Mermaid's lists take no exponent): at most 3 decimals."""
    return f"{value:.3f}".rstrip("0").rstrip(".") if math.isfinite(value) else "0"


def _chart(title: str, labels: Sequence[str], y_title: str, top: float, bars: Sequence[float],
           lines: Sequence[Sequence[float]]) -> str:
    out = ["xychart-beta", f'    title "{title}"', f"    x-axis [{', '.join(labels)}]",
           f'    y-axis "{y_title}" 0 --> {_number(top)}', f"    bar [{', '.join(_number(v) for v in bars)}]"]
    out += [f"    line [{', '.join(_number(v) for v in line)}]" for line in lines]
    return "\n".join(out)


def _top(values: Sequence[float]) -> float:
    """The y axis's end: a tenth above the largest value, rounded up to 2 significant digits."""
    high = max((v for v in values if math.isfinite(v)), default=1.0) * 1.1 or 1.0
    scale = 10 ** (math.floor(math.log10(high)) - 1)
    return math.ceil(high / scale) * scale


def phase_chart(result: WorkloadResult) -> str | None:
    """Current vs baseline CPU ms per step of the phases (``phase.<name>.cpu_ms`` comparisons with
    both values), those that changed most first; None with fewer than one such phase."""
    rows = [c for c in phase_comparisons(result)
            if c.metric.endswith(".cpu_ms") and c.baseline is not None and c.current is not None]
    if not rows:
        return None
    rows = sorted(rows, key=lambda c: -abs((c.current or 0.0) - (c.baseline or 0.0)))[:MOST_PHASES]
    current = [c.current or 0.0 for c in rows]
    baseline = [c.baseline or 0.0 for c in rows]
    return _chart("CPU ms per step by phase: bars current, line baseline",
                  [_label(phase_label(c.metric)) for c in rows], "ms per step", _top(current + baseline),
                  current, [baseline])


def _step_comparison(result: WorkloadResult) -> MetricComparison | None:
    return next((c for c in result.comparisons if c.metric == STEP_METRIC and c.baseline is not None), None)


def step_chart(result: WorkloadResult) -> str | None:
    """Each current launch's step time against the baseline's and the tolerance's edge; None
    without launches or a baseline step time."""
    c = _step_comparison(result)
    launches = [a.steps.time_ms for a in result.analyses]
    if c is None or c.baseline is None or not launches:
        return None
    lines = [[c.baseline] * len(launches)]
    if c.tolerance.rel is not None:
        edge = c.baseline * (1 + c.tolerance.rel)
        if c.tolerance.abs is not None:
            edge = max(edge, c.baseline + c.tolerance.abs)
        lines.append([edge] * len(launches))
    title = ("step time per launch, ms: bars current, lines baseline and its tolerance" if len(lines) > 1
             else "step time per launch, ms: bars current, line baseline")
    return _chart(title, [f'"launch {k}"' for k in range(1, len(launches) + 1)], "ms",
                  _top(launches + [v for line in lines for v in line]), launches, lines)


def charts(result: WorkloadResult) -> list[str]:
    """The Markdown of a failed workload's charts (fenced ``mermaid`` blocks); none for one that
    passed or has nothing to draw."""
    if not result.failed:
        return []
    out: list[str] = []
    for diagram in (phase_chart(result), step_chart(result)):
        if diagram is not None:
            out += ["```mermaid", diagram, "```", ""]
    return out
