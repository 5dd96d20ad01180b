"""``report.html`` (perfgate.report.html): one page with no script and no request to a network, the
names a trace controls escaped, and the median step of the head beside the base's, drawn from the
launches' steps.trace.json made from committed real captures."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

from report_results import make_result

from perfgate.analysis.step_trace import steps_trace
from perfgate.records.launch import STEPS_TRACE_FILE
from perfgate.records.model import Verdict
from perfgate.report.html import render_html, timeline_svg
from perfgate.trace.export import load_trace
from layout import TESTS

FIXTURES = TESTS / "fixtures" / "traces"


class _Tags(HTMLParser):
    """Every start tag with its attributes, and whether each element opened was closed."""

    VOID = {"meta", "br", "img", "line", "rect", "path"}

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID:
            return
        assert self.open and self.open[-1] == tag, (tag, self.open[-5:])
        self.open.pop()


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    assert parser.open == [], parser.open
    return parser


def test_the_page_requests_nothing_and_shows_names_as_text() -> None:
    hostile = '<script>alert(1)</script><img src=x onerror=alert(2)>'
    result = make_result(hostile, Verdict.REGRESSED, forward_ms=9.0, message=f"first reason: {hostile} +5 ms")
    page = render_html([result, make_result("steady", Verdict.PASS)])
    tags = _parse(page)
    names = [t for t, _ in tags.tags]
    assert "script" not in names and "img" not in names and "link" not in names and "iframe" not in names
    assert all((a.get("href") or "#").startswith("#") and "src" not in a for _, a in tags.tags)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # the failed workload first, its phase row and the bars of its phases
    sections = re.findall(r'<h2 id="[^"]*">(.*?):', page)
    assert sections[0].startswith("&lt;script") and sections[1] == "steady"
    assert re.search(r"<td>forward</td><td>4.00 ms</td><td>9.00 ms</td><td>\+125.0 %</td>", page)


def _write(run_dir: Path, folder: str, fixture: str) -> dict:
    trace = load_trace(FIXTURES / fixture / "trace.sqlite")
    doc = steps_trace(trace, None, 5, label=fixture)
    (run_dir / folder).mkdir(parents=True)
    (run_dir / folder / STEPS_TRACE_FILE).write_text(json.dumps(doc))
    return doc


def _middle(doc: dict) -> tuple[float, float, int]:
    starts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("cat") == "step")
    lo, hi = starts[1], starts[2]
    shown = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["ts"] < hi and e["ts"] + e["dur"] > lo]
    return lo, hi, len(shown)


def test_the_median_step_of_the_base_beside_the_heads(tmp_path: Path) -> None:
    """The H100 ResNet with pageable copies as the head's profile launch and with pinned ones as the
    confirmation's base launch: two timelines, base first, each drawing every host range and GPU
    operation of its middle step, one step long."""
    head = _write(tmp_path, "profile", "gpu-resnet-pageable")
    base = _write(tmp_path, "confirm/base-0", "gpu-resnet-pinned")
    page = render_html([replace(make_result("resnet", Verdict.REGRESSED, forward_ms=9.0), run_dir=tmp_path)])
    _parse(page)
    svgs = re.findall(r"<div><svg .*?</svg>", page, flags=re.S)
    assert len(svgs) == 2 and "base (measured beside the head)" in svgs[0] and "this run" in svgs[1]
    for svg, doc in zip(svgs, (base, head)):
        lo, hi, shown = _middle(doc)
        assert svg.count("<rect ") == shown and shown > 300            # 385 kernels a step, and the ranges
        assert f"one step, {(hi - lo) / 1000:.2f} ms" in svg
    assert str(tmp_path / "profile" / STEPS_TRACE_FILE) in page


def test_a_run_without_step_traces_draws_no_timeline(tmp_path: Path) -> None:
    page = render_html([replace(make_result("w", Verdict.REGRESSED, forward_ms=9.0), run_dir=tmp_path)])
    assert "The median step" not in page and "<svg" in page          # the phase bars remain
    doc = {"traceEvents": [{"name": "x", "cat": "nvtx", "ph": "X", "ts": 0, "dur": 5, "pid": 1, "tid": 1}]}
    assert timeline_svg(doc, "one range").count("<rect ") == 1
