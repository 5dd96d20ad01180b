"""``perfgate report --from perfgate-report.json``: a run's report re-rendered (the terminal
summary, the job summary, annotations, the PR comment) and its commit statuses posted, each text
redacted of this environment's secrets; exit 1 with ``--fail-on-regression`` when a workload
regressed or errored."""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from perfgate.system.secrets import redact_text, secret_values
from perfgate.errors import PerfgateError
from perfgate.report import append_text


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """``perfgate report --from perfgate-report.json [--post-status] [--post-comment] [--github-summary] ...``."""
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
    parser.add_argument("--post-comment", action="store_true",
                        help="post the PR-comment Markdown on the pull request, updating perfgate's comment "
                             "in place (GITHUB_TOKEN with pull-requests: write, GITHUB_REPOSITORY; the pull "
                             "request: PERFGATE_PR_NUMBER, the event's, or the open one of GITHUB_REF_NAME)")
    parser.add_argument("--fail-on-regression", action="store_true",
                        help="exit 1 when a workload regressed or errored")
    parser.set_defaults(func=cmd_report)
    return parser


def _written(option: str, path: object, write: Callable[[], Any]) -> None:
    """Run ``write``; an OSError becomes a PerfgateError naming ``option``, the file and why."""
    try:
        write()
    except OSError as exc:
        raise PerfgateError(f"{option} {exc.filename or path}: cannot write: {exc.strerror or exc}") from None


def cmd_report(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> int:
    """Run ``perfgate report``; returns the exit status."""
    from perfgate.report.annotations import render_annotations
    from perfgate.report.json_report import results_from_report
    from perfgate.report.markdown import render_markdown, render_pr_comment
    from perfgate.report.terminal import render_summary

    env = os.environ if env is None else env
    try:
        doc = json.loads(args.source.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise PerfgateError(f"--from {args.source}: cannot read a perfgate report ({why})") from None
    results = results_from_report(doc, where=str(args.source))
    known = secret_values(env)
    for line in render_summary(results):
        print(redact_text(line, known))
    if args.github_summary:
        target = env.get("GITHUB_STEP_SUMMARY")
        if not target:
            print("perfgate: warning: --github-summary: GITHUB_STEP_SUMMARY is not set", file=sys.stderr)
        else:
            text = redact_text(render_markdown(results), known) + "\n"
            _written("GITHUB_STEP_SUMMARY", target, lambda: append_text(target, text))
    if args.annotations:
        for line in render_annotations(results):
            print(redact_text(line, known))
    if args.pr_comment is not None:
        _written("--pr-comment", args.pr_comment, lambda: args.pr_comment.write_text(  # in place: FILE may be a pipe
            redact_text(render_pr_comment(results), known), encoding="utf-8"))
    if args.post_comment:
        from perfgate.report.github_comment import post_comment

        for warning in post_comment(redact_text(render_pr_comment(results), known), env):
            print(warning, file=sys.stderr)
    if args.post_status:
        from perfgate.report.github import post_statuses

        for warning in post_statuses(results, env=env):
            print(warning, file=sys.stderr)
    return 1 if args.fail_on_regression and any(r.failed for r in results) else 0
