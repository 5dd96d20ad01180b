"""Renderers from WorkloadResult lists, and :func:`write_all` which writes every report file.

Files written into ``out_dir`` by :func:`write_all`:

=====================  =============================================================
junit.xml              one test case per workload (report/junit.py)
summary.md             job-summary Markdown, <= 1 MB (report/markdown.py)
pr-comment.md          PR-comment Markdown, <= 65,536 characters
annotations.txt        ``::error``/``::warning`` workflow commands (report/annotations.py)
benchmark.json         pytest-benchmark-compatible step times (report/benchmark_json.py)
perfgate-report.json   everything (report/json_report.py)
charts/*.png           per-workload charts when matplotlib is installed (report/charts.py)
=====================  =============================================================

In GitHub Actions (``GITHUB_STEP_SUMMARY`` set) the Markdown is also appended to the step
summary and the annotations are printed to stdout, unless told otherwise.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from perfgate.model import WorkloadResult
from perfgate.report.annotations import render_annotations
from perfgate.report.benchmark_json import render_benchmark_json
from perfgate.report.charts import render_charts
from perfgate.report.json_report import render_report_json
from perfgate.report.junit import render_junit
from perfgate.report.markdown import render_markdown, render_pr_comment
from perfgate.report.terminal import failure_message, render_summary

__all__ = [
    "failure_message", "render_annotations", "render_benchmark_json", "render_charts",
    "render_junit", "render_markdown", "render_pr_comment", "render_report_json",
    "render_summary", "write_all",
]

CHARTS_DIR = "charts"


def _write_text(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _write_json(path: Path, doc: Mapping[str, Any]) -> Path:
    return _write_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def write_all(results: Sequence[WorkloadResult], out_dir: Path, *, github_summary: bool | None = None,
              annotations: bool | None = None, machine_info: Mapping[str, Any] | None = None,
              commit_info: Mapping[str, Any] | None = None, charts: bool = True,
              env: Mapping[str, str] | None = None, stdout: TextIO | None = None) -> dict[str, Path]:
    """Write every report into ``out_dir`` and return ``{kind: path}`` (kinds: junit, summary,
    pr_comment, annotations, benchmark, report, and ``chart:<workload>:<kind>``).

    ``github_summary``/``annotations``: None means "when ``GITHUB_STEP_SUMMARY`` is set in
    ``env`` (default ``os.environ``)". ``stdout`` receives the annotations (default sys.stdout).
    """
    env = os.environ if env is None else env
    out_dir.mkdir(parents=True, exist_ok=True)
    chart_paths = render_charts(results, out_dir / CHARTS_DIR) if charts else {}
    links = {k: p.relative_to(out_dir).as_posix() for k, p in chart_paths.items()}
    summary_md = render_markdown(results, chart_links=links)
    lines = render_annotations(results)
    written = {
        "junit": _write_text(out_dir / "junit.xml", render_junit(results)),
        "summary": _write_text(out_dir / "summary.md", summary_md),
        "pr_comment": _write_text(out_dir / "pr-comment.md", render_pr_comment(results, chart_links=links)),
        "annotations": _write_text(out_dir / "annotations.txt", "".join(f"{line}\n" for line in lines)),
        "benchmark": _write_json(out_dir / "benchmark.json",
                                 render_benchmark_json(results, machine_info, commit_info)),
        "report": _write_json(out_dir / "perfgate-report.json", render_report_json(results)),
    }
    written.update({f"chart:{k}": p for k, p in chart_paths.items()})
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    if (github_summary if github_summary is not None else bool(step_summary)) and step_summary:
        with open(step_summary, "a", encoding="utf-8") as fh:
            fh.write(summary_md + "\n")
    if annotations if annotations is not None else bool(step_summary):
        out = stdout or sys.stdout
        if lines:
            out.write("\n")  # a workflow command must start a line (pytest leaves "[100%]" open)
        for line in lines:
            out.write(line + "\n")
        out.flush()
    return written


# ----------------------------------------------------------------------------- `perfgate report`


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``perfgate report --from perfgate-report.json [--post-status] [--github-summary] ...``."""
    parser = subparsers.add_parser(
        "report", help="re-render a perfgate-report.json: summary, job summary, annotations, commit statuses")
    parser.add_argument("--from", dest="source", type=Path, required=True, metavar="JSON",
                        help="a perfgate-report.json written by a run")
    parser.add_argument("--post-status", action="store_true",
                        help="post one commit status per workload (GITHUB_TOKEN, GITHUB_REPOSITORY, "
                             "PERFGATE_STATUS_SHA or GITHUB_SHA from the environment)")
    parser.add_argument("--github-summary", action="store_true",
                        help="append the Markdown summary to $GITHUB_STEP_SUMMARY")
    parser.add_argument("--annotations", action="store_true", help="print ::error/::warning workflow commands")
    parser.add_argument("--pr-comment", type=Path, default=None, metavar="FILE",
                        help="write the PR-comment Markdown (<= 65,536 characters) to FILE")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a workload regressed or errored")
    parser.set_defaults(func=cmd_report)
    return parser


def cmd_report(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run ``perfgate report``; returns the exit status."""
    from perfgate.errors import PerfgateError
    from perfgate.report.json_report import results_from_report

    env = os.environ if env is None else env
    try:
        doc = json.loads(args.source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PerfgateError(f"--from {args.source}: cannot read a perfgate report ({exc})") from exc
    results = results_from_report(doc, where=str(args.source))
    for line in render_summary(results):
        print(line)
    if args.github_summary:
        target = env.get("GITHUB_STEP_SUMMARY")
        if not target:
            print("perfgate: warning: --github-summary: GITHUB_STEP_SUMMARY is not set", file=sys.stderr)
        else:
            with open(target, "a", encoding="utf-8") as fh:
                fh.write(render_markdown(results) + "\n")
    if args.annotations:
        for line in render_annotations(results):
            print(line)
    if args.pr_comment is not None:
        _write_text(args.pr_comment, render_pr_comment(results))
    if args.post_status:
        from perfgate.github import post_statuses

        for warning in post_statuses(results, env=env):
            print(warning, file=sys.stderr)
    return 1 if args.fail_on_regression and any(r.failed for r in results) else 0
