"""Renderers from WorkloadResult lists, and :func:`write_all` which writes every report file.

Files written into ``out_dir`` by :func:`write_all`:

=====================  =============================================================
junit.xml              one test case per workload (report/junit.py)
summary.md             job-summary Markdown, <= 1 MB (report/markdown.py)
pr-comment.md          PR-comment Markdown, <= 65,536 characters
annotations.txt        ``::error``/``::warning`` workflow commands (report/annotations.py)
benchmark.json         pytest-benchmark-compatible step times (report/benchmark_json.py)
perfgate-report.json   everything (report/json_report.py)
report.html            one self-contained page: verdicts, accounts, charts, the median step's timeline (report/html.py)
charts/*.png           per-workload charts when matplotlib is installed (report/charts.py)
=====================  =============================================================

In GitHub Actions (``GITHUB_STEP_SUMMARY`` set) the Markdown is also appended to the step
summary and the annotations are printed to stdout, unless told otherwise.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from perfgate.system.secrets import redact_text, secret_values
from perfgate.errors import PerfgateError
from perfgate.records.model import WorkloadResult

__all__ = ["ReportWriteError", "append_text", "write_all"]

CHARTS_DIR = "charts"


class ReportWriteError(PerfgateError):
    """Some report files could not be written (the message names each and why)."""


def _write_text(path: Path, text: str) -> Path:
    """Write ``text`` atomically (a temp file of this process beside it, then rename; the temp file
    is removed when the write fails, e.g. on a full disk). Gates run at once in one repository
    each write a whole file (the last one's stays): one shared temp name let one rename another's
    half-written file, or fail to find its own."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def append_text(path: str, text: str) -> None:
    """Append ``text`` to the file at ``path`` (GitHub's step summary)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def write_all(results: Sequence[WorkloadResult], out_dir: Path, *, github_summary: bool | None = None,
              annotations: bool | None = None, machine_info: Mapping[str, Any] | None = None,
              commit_info: Mapping[str, Any] | None = None, charts: bool = True,
              env: Mapping[str, str] | None = None, stdout: TextIO | None = None) -> dict[str, Path]:
    """Write every report into ``out_dir`` and return ``{kind: path}`` (kinds: junit, summary,
    pr_comment, annotations, benchmark, report, html, and ``chart:<workload>:<kind>``).

    ``github_summary``/``annotations``: None means "when ``GITHUB_STEP_SUMMARY`` is set in
    ``env`` (default ``os.environ``)". ``stdout`` receives the annotations (default sys.stdout).
    Every text is redacted of the secrets of ``env`` (perfgate.system.secrets). A file that cannot be
    written (a full disk, no permission) does not stop the others: ReportWriteError at the end
    names each one and why, and the files written stay.
    """
    from perfgate.report.annotations import render_annotations
    from perfgate.report.benchmark_json import render_benchmark_json
    from perfgate.report.charts import render_charts
    from perfgate.report.html import render_html
    from perfgate.report.json_report import render_report_json
    from perfgate.report.junit import render_junit
    from perfgate.report.markdown import render_markdown, render_pr_comment

    env = os.environ if env is None else env
    known = secret_values(env)
    failures: list[str] = []

    def attempt(what: str, write: Callable[[], Any]) -> Any:
        try:
            return write()
        except OSError as exc:
            failures.append(f"{what}: {exc.strerror or exc}")
            return None

    if attempt(str(out_dir), lambda: out_dir.mkdir(parents=True, exist_ok=True)) is None and failures:
        raise ReportWriteError("reports not written: " + "; ".join(failures))
    chart_paths = (attempt(str(out_dir / CHARTS_DIR), lambda: render_charts(results, out_dir / CHARTS_DIR)) or {}
                   ) if charts else {}
    links = {k: p.relative_to(out_dir).as_posix() for k, p in chart_paths.items()}
    summary_md = redact_text(render_markdown(results, chart_links=links), known)
    lines = [redact_text(line, known) for line in render_annotations(results)]
    texts = {
        "junit": ("junit.xml", lambda: render_junit(results)),
        "summary": ("summary.md", lambda: summary_md),
        "pr_comment": ("pr-comment.md", lambda: render_pr_comment(results, chart_links=links)),
        "annotations": ("annotations.txt", lambda: "".join(f"{line}\n" for line in lines)),
        "benchmark": ("benchmark.json", lambda: json.dumps(render_benchmark_json(results, machine_info, commit_info),
                                                            indent=2, sort_keys=True, default=str) + "\n"),
        "report": ("perfgate-report.json", lambda: json.dumps(render_report_json(results), indent=2,
                                                               sort_keys=True, default=str) + "\n"),
        "html": ("report.html", lambda: render_html(results)),
    }
    written: dict[str, Path] = {}
    for kind, (name, render) in texts.items():
        path = attempt(str(out_dir / name), lambda: _write_text(out_dir / name, redact_text(render(), known)))
        if path is not None:
            written[kind] = path
    written.update({f"chart:{k}": p for k, p in chart_paths.items()})
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if (github_summary if github_summary is not None else bool(step_summary)) and step_summary:
        attempt(step_summary, lambda: append_text(step_summary, summary_md + "\n"))
    if annotations if annotations is not None else bool(step_summary):
        out = stdout or sys.stdout
        if lines:
            out.write("\n")  # a workflow command must start a line (pytest leaves "[100%]" open)
        for line in lines:
            out.write(line + "\n")
        out.flush()
    if failures:
        raise ReportWriteError(f"reports in {out_dir} not all written ({len(written)} written): " + "; ".join(failures))
    return written
