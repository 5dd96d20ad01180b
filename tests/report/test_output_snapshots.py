"""What every report writes from real recorded results, byte for byte: the files of perfgate's
report stage (perfgate.report.write_all: the Markdown summary and the pull request's comment,
GitHub's annotations, JUnit XML, pytest-benchmark's JSON, the HTML report and perfgate's own JSON
report written again from what it read), and the terminal's summary and failure message. A refactor of the records or the renderers must leave them unchanged; a change that means to
alter what users see rewrites them, and the diff of ``tests/fixtures/snapshots/`` is its review:

    PERFGATE_UPDATE_SNAPSHOTS=1 python3 -m pytest tests/report/test_output_snapshots.py

The inputs are results recorded on the GPU machine: nanoGPT's input pull request on an H200
(``nanogpt-h200-input-slowdown-report.json``: REGRESSED, its account) and timm's DDP job on two
H200s with ``--sync-bn`` (``timm-ddp-h200-syncbn/result.json``: a PASS that says NCCL's new
collectives)."""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from perfgate.records.model import WorkloadResult
from perfgate.report import write_all
from perfgate.report.json_report import results_from_report
from perfgate.report.terminal import failure_message, render_summary, summary_notes
from layout import FIXTURES

SNAPSHOTS = FIXTURES / "snapshots"
UPDATE = os.environ.get("PERFGATE_UPDATE_SNAPSHOTS") == "1"


def _report(path: Path) -> list[WorkloadResult]:
    return results_from_report(json.loads(path.read_text()), str(path))


def _result_record(path: Path) -> list[WorkloadResult]:
    return results_from_report({"schema_version": 1, "results": [json.loads(path.read_text())]}, str(path))


INPUTS: dict[str, Callable[[], list[WorkloadResult]]] = {
    "nanogpt-input": lambda: _report(FIXTURES / "records" / "nanogpt-h200-input-slowdown-report.json"),
    "timm-ddp-syncbn": lambda: _result_record(FIXTURES / "records" / "timm-ddp-h200-syncbn" / "result.json"),
}


def _terminal(results: Sequence[WorkloadResult]) -> str:
    lines = [*render_summary(results), "", *summary_notes(results), ""]
    for r in results:
        lines += [f"--- {r.name}", failure_message(r)]
    return "\n".join(lines) + "\n"


#: The one field of a file that a rerun changes ("(when written)" stands for it in the snapshot).
WHEN = {"perfgate-report.json": "created_utc", "benchmark.json": "datetime"}


def written(results: Sequence[WorkloadResult], out: Path) -> dict[str, str]:
    """Every file perfgate's report stage writes (perfgate.report.write_all, no charts: their PNG
    bytes are matplotlib's), and the terminal's text, by file name."""
    paths = write_all(results, out, github_summary=False, annotations=False, charts=False, env={})
    texts = {p.name: p.read_text() for p in paths.values()}
    for name, key in WHEN.items():
        texts[name] = re.sub(rf'"{key}": "[^"]*"', f'"{key}": "(when written)"', texts[name], count=1)
    return {**texts, "terminal.txt": _terminal(results)}


FILES = ("annotations.txt", "benchmark.json", "junit.xml", "perfgate-report.json", "pr-comment.md", "report.html",
         "summary.md", "terminal.txt")


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_every_report_is_what_it_was(name: str, tmp_path: Path) -> None:
    texts = written(INPUTS[name](), tmp_path / "report")
    assert sorted(texts) == sorted(FILES)
    differ = []
    for file, text in texts.items():
        snapshot = SNAPSHOTS / name / file
        if UPDATE:
            snapshot.parent.mkdir(parents=True, exist_ok=True)
            snapshot.write_text(text)
        if not snapshot.is_file() or snapshot.read_text() != text:
            differ.append(file)
    assert differ == [], f"{SNAPSHOTS / name}: {differ} differ (PERFGATE_UPDATE_SNAPSHOTS=1 rewrites them)"


def test_the_snapshots_say_something() -> None:
    """Each snapshot holds its input's verdict and workload: the renderers ran on the records."""
    terminal = (SNAPSHOTS / "nanogpt-input" / "terminal.txt").read_text()
    assert "nanogpt" in terminal and "REGRESSED" in terminal
    comment = (SNAPSHOTS / "timm-ddp-syncbn" / "pr-comment.md").read_text()
    assert "all-gather 0 -&gt; 20 in forward" in comment or "all-gather 0 -> 20 in forward" in comment
    assert '"created_utc": "(when written)"' in (SNAPSHOTS / "nanogpt-input" / "perfgate-report.json").read_text()
    assert {p.name for p in (SNAPSHOTS / "nanogpt-input").iterdir()} == set(FILES)
