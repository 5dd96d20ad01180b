"""``perfgate compare BASELINE CURRENT``: two traces (or job folders), result JSONs or baseline
files compared as the gate compares, with the project's tolerances and alpha: the options', then
the workload's ``[tool.perfgate.workloads.<name>]`` table (when the inputs name a workload), then
``[tool.perfgate.tolerance]``, then the metric's default (perfgate.pipeline.workload_run.compare_policy)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from perfgate.commands.analyze import add_analysis_options, analysis_options_from
from perfgate.commands.output import say
from perfgate.errors import ConfigError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    compare = subparsers.add_parser(
        "compare", help="compare two traces (or job folders), result JSONs or baseline files")
    compare.add_argument("baseline", type=Path, metavar="BASELINE")
    compare.add_argument("current", type=Path, metavar="CURRENT")
    compare.add_argument("--format", choices=("table", "json"), default="table")
    compare.add_argument("--tolerance", action="append", default=[], metavar="METRIC=SPEC",
                         help="tolerance override, e.g. step_time_ms=5%% (repeatable; beats the pyproject tables)")
    compare.add_argument("--alpha", default=None, metavar="A",
                         help="false-alarm budget (default 0.01; [tool.perfgate] alpha, PERFGATE_ALPHA)")
    compare.add_argument("--root", type=Path, default=None,
                         help="project whose [tool.perfgate] tables apply (default: nearest pyproject.toml)")
    compare.add_argument("--nsys", default=None, metavar="PATH", help="nsys for exporting .nsys-rep files")
    compare.add_argument("--force", action="store_true",
                         help="compare even when the two inputs name different workloads or machine classes")
    add_analysis_options(compare)
    compare.set_defaults(func=cmd_compare)
    return compare


def cmd_compare(args: argparse.Namespace) -> int:
    from perfgate.commands.compare_inputs import check_comparable, identity
    from perfgate.gate.wording import describe
    from perfgate.pipeline.inputs import compare_and_explain
    from perfgate.pipeline.workload_run import compare_policy
    from perfgate.settings.config import load_settings

    for path, what in ((args.baseline, "BASELINE"), (args.current, "CURRENT")):
        if not path.exists():
            raise ConfigError(f"{what} {path}: no such file")
    sides = identity(args.baseline), identity(args.current)
    if not args.force:
        check_comparable(*sides)
    settings = load_settings(args.root, overrides={"alpha": args.alpha, "tolerance": args.tolerance},
                             option_prefix="")
    named = sides[0].workload or sides[1].workload
    workload = settings.workloads.get(named.split("[", 1)[0]) if named else None
    outcome, attribution = compare_and_explain(args.baseline, args.current, compare_policy(settings, workload),
                                               analysis_options_from(args), args.nsys)
    if args.format == "json":
        from perfgate.report.json_report import comparison_dict

        print(json.dumps({"verdict": outcome.verdict.value, "failed": outcome.failed, "summary": outcome.summary,
                          "comparisons": [comparison_dict(c) for c in outcome.comparisons],
                          "attribution": attribution.to_dict() if attribution is not None else None},
                         indent=2, sort_keys=True, default=str))
    else:
        say(outcome.summary)
        if attribution is not None:
            from perfgate.diagnosis.render import render_attribution_text

            say(render_attribution_text(attribution))
        for c in outcome.comparisons:
            say(f"  {str(c.verdict):<12} {describe(c)}{'' if c.gating else ' (not gating)'}")
    return 1 if outcome.failed else 0
