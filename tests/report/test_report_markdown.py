"""Markdown for the job summary and the PR comment: structure, escaping and GitHub's size limits.

Size limits need hundreds of workloads, so these results are built by hand (report_results.make_result);
tests/report/test_report_real_results.py renders real captures."""
from __future__ import annotations

from dataclasses import replace

from report_results import make_result

from perfgate.records.model import Verdict
from perfgate.report.markdown import COMMENT_MARKER, render_markdown, render_pr_comment


def _many(n: int) -> list:
    return [make_result(f"workload_{i:03d}", Verdict.REGRESSED if i % 7 == 0 else Verdict.PASS,
                        forward_ms=8.0 if i % 7 == 0 else 4.0,
                        message="forward got slower because of an injected sleep " * 5)
            for i in range(n)]


def _balanced(md: str) -> bool:
    return md.count("<details>") == md.count("</details>") and md.count("```") % 2 == 0


def test_pr_comment_for_200_workloads_stays_under_65536_chars_and_keeps_failures() -> None:
    results = _many(200)
    full = render_markdown(results)
    assert len(full) > 65_536  # the limit really bites
    comment = render_pr_comment(results)
    assert len(comment) <= 65_536 and comment.startswith(COMMENT_MARKER)
    assert _balanced(comment)
    assert "| `workload_199` |" in comment  # every workload still has its overview row
    assert "### :x: `workload_000`: REGRESSED" in comment  # failing sections come first and survive
    assert "left out to stay within GitHub's size limit" in comment


def test_tiny_byte_budget_drops_rows_but_stays_valid_markdown() -> None:
    md = render_markdown(_many(50), max_bytes=3_000)
    assert len(md.encode("utf-8")) <= 3_000 and _balanced(md)
    assert "more workload(s) not listed" in md
    assert md.startswith("## perfgate: :x: 8 of 50 workload(s) failed")


def test_small_report_is_complete_with_details_for_every_workload() -> None:
    results = _many(3)
    md = render_markdown(results)
    assert md.count("<details><summary>All metrics</summary>") == 3
    assert "left out" not in md and "not listed" not in md


def test_table_cells_escape_pipes_and_newlines() -> None:
    result = make_result("odd|name", Verdict.ERROR, error="Traceback\nValueError: a|b")
    md = render_markdown([result])
    assert "| `odd\\|name` |" in md
    assert "```\nTraceback\nValueError: a|b\n```" in md  # the error keeps its lines in a code block


def test_chart_links_appear_only_under_their_workload() -> None:
    a, b = make_result("a", Verdict.PASS), make_result("b", Verdict.PASS)
    md = render_markdown([a, b], chart_links={"a:phases": "charts/a-phases.png"})
    section_a = md[md.index("`a`: PASS"):md.index("`b`: PASS")]
    assert "[a:phases](charts/a-phases.png)" in section_a
    assert md.count("charts/a-phases.png") == 1


def _outside_code(md: str) -> str:
    """``md`` without its code spans and fenced blocks: what GitHub would interpret."""
    import re

    md = re.sub(r"```.*?```", "", md, flags=re.S)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", md)


def test_a_backtick_in_a_name_cannot_open_raw_html() -> None:
    """A name with a backtick closed its code span and left raw HTML in the summary."""
    md = render_markdown([make_result("x`<img src=x onerror=alert(1)>`y", Verdict.REGRESSED, forward_ms=8.0)])
    assert "| ``x`<img src=x onerror=alert(1)>`y`` |" in md
    assert "### :x: ``x`<img src=x onerror=alert(1)>`y``: REGRESSED" in md
    assert "<img" not in _outside_code(md)


def test_messages_and_phase_names_render_as_text_not_markdown() -> None:
    """Messages and phase names come from the workload's trace and from result files."""
    message = "first reason: x\n# injected heading\n<script>alert(1)</script>\n[click](https://evil)\n---"
    result = make_result("w", Verdict.REGRESSED, forward_ms=8.0, message=message)
    result.comparisons[0] = replace(result.comparisons[0], note="**loud**")
    result.comparisons[1] = replace(result.comparisons[1], metric="phase.<b>bold</b>.cpu_ms")
    md = render_markdown([result])
    lines = md.splitlines()
    assert "\\# injected heading" in lines and not any(line.startswith("# injected") for line in lines)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in lines and "<script>" not in md
    assert "\\[click\\](https://evil)" in lines and "\\---" in lines
    assert "| **&lt;b&gt;bold&lt;/b&gt;** |" in md and "<b>" not in md
    assert "\\*\\*loud\\*\\*" in md
