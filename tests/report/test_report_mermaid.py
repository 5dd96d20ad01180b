"""The Mermaid charts of a failed workload in the job summary and the PR comment
(perfgate.report.mermaid), checked by Mermaid's own parser (tests/mermaid/parse.mjs)."""
from __future__ import annotations

import re
from dataclasses import replace

from report_results import make_comparison, make_result

from perfgate.records.model import Verdict
from perfgate.report.markdown import render_markdown, render_pr_comment
from perfgate.report.mermaid import MOST_PHASES, phase_chart, step_chart


def mermaid_blocks(markdown: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)\n```", markdown, flags=re.S)


def _list(diagram: str, kind: str) -> list[list[str]]:
    """The values of each ``bar``/``line`` (or the ``x-axis`` labels) of a diagram, as text."""
    return [[v.strip() for v in m.split(",")] for m in re.findall(rf"^\s*{kind} \[(.*)\]$", diagram, flags=re.M)]


def test_a_regressed_workload_shows_its_phases_and_launches_and_mermaid_parses_them(mermaid_parse) -> None:
    result = make_result("tiny", Verdict.REGRESSED, forward_ms=9.0)
    comment = render_pr_comment([result])
    blocks = mermaid_blocks(comment)
    assert blocks == mermaid_blocks(render_markdown([result])) and len(blocks) == 2
    phases, steps = blocks
    assert _list(phases, "x-axis") == [['"forward"', '"backward"']]     # the phase that moved most first
    assert _list(phases, "bar") == [["9", "4"]] and _list(phases, "line") == [["4", "4"]]
    # one launch at 15 ms; the baseline 10 ms and its 5 % tolerance's edge
    assert _list(steps, "bar") == [["15"]] and _list(steps, "line") == [["10"], ["10.5"]]
    assert re.search(r'y-axis "ms" 0 --> 17$', steps, flags=re.M)
    broken = phases.replace('"backward"]', '"backward"')          # the checker can fail
    parsed = mermaid_parse([phases, steps, broken])
    assert [p["ok"] for p in parsed] == [True, True, False], parsed
    assert parsed[0]["type"] == parsed[1]["type"] == "xychart"


def test_a_passing_workload_has_no_chart() -> None:
    result = make_result("steady", Verdict.PASS)
    assert mermaid_blocks(render_pr_comment([result])) == []
    assert phase_chart(result) is not None       # it could be drawn: only failures show it


def test_phase_names_from_the_trace_cannot_leave_their_label(mermaid_parse) -> None:
    """A trace names its phases: quotes, brackets, newlines and backticks in them stay inside the
    label, and at most MOST_PHASES phases are drawn, those that moved most."""
    hostile = ['x"] \n    bar [1', "a`b```c", "tab\tand,comma", "ünï", *(f"p{k}" for k in range(10))]
    comparisons = [make_comparison(f"phase.{name}.cpu_ms", 1.0, 1.0 + k, Verdict.PASS)
                   for k, name in enumerate(hostile)]
    result = replace(make_result("odd", Verdict.REGRESSED, forward_ms=9.0),
                     comparisons=[*make_result("odd", Verdict.REGRESSED, forward_ms=9.0).comparisons[:1],
                                  *comparisons])
    diagram = phase_chart(result)
    assert diagram is not None
    labels = _list(diagram, "x-axis")[0]
    assert len(labels) == MOST_PHASES and labels[0] == '"p9"'           # +13 ms: the largest change
    assert len(_list(diagram, "bar")) == 1 and diagram.count("\n") == 5  # no line escaped a label
    markdown = render_pr_comment([result])
    assert markdown.count("```mermaid") == 2 and markdown.count("```") % 2 == 0
    every = [*mermaid_blocks(markdown), phase_chart(replace(result, comparisons=result.comparisons[:5]))]
    assert all(p["ok"] for p in mermaid_parse(every)), every


def test_no_step_chart_without_a_baseline_step() -> None:
    result = make_result("new", Verdict.REGRESSED, forward_ms=9.0)
    assert step_chart(replace(result, comparisons=[c for c in result.comparisons
                                                    if c.metric != "step_time_ms"])) is None
    assert step_chart(replace(result, analyses=[])) is None
