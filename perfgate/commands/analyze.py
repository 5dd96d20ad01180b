"""``perfgate analyze TRACE...``: one trace's (or one job's, a trace per node) metrics, phases and
diagnosis, as a table or JSON; and the analysis options it shares with ``perfgate compare``."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.commands.output import say

if TYPE_CHECKING:
    from perfgate.analysis import AnalysisOptions


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    analyze = subparsers.add_parser(
        "analyze", help="analyze one nsys trace (.sqlite or .nsys-rep), or one per node of a job")
    analyze.add_argument("trace", type=Path, metavar="TRACE", nargs="+")
    analyze.add_argument("--format", choices=("table", "json"), default="table")
    analyze.add_argument("--chrome-trace", type=Path, default=None, metavar="FILE",
                         help="also write 3 measured steps around the median one (host NVTX ranges, GPU "
                              "kernels and copies per stream) as a Chrome trace JSON that Perfetto opens")
    add_analysis_options(analyze)
    analyze.set_defaults(func=cmd_analyze)
    return analyze


def add_analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step-pattern", default=None, metavar="RE", help="regex naming the step range")
    parser.add_argument("--skip-steps", "--warmup-steps", dest="skip_steps", type=int, default=None, metavar="N",
                        help="step ranges of each process skipped before measuring (default 5)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N", help="samples per step (samples/s)")


def analysis_options_from(args: argparse.Namespace) -> AnalysisOptions:
    from perfgate.analysis import AnalysisOptions

    return AnalysisOptions.given(args.step_pattern, args.skip_steps, args.batch_size)


def cmd_analyze(args: argparse.Namespace) -> int:
    from perfgate.trace import read_ahead

    read_ahead.start_reading(args.trace[0])            # its GPU tables read while numpy and the analysis import
    from perfgate.pipeline.inputs import analyze_file  # not perfgate.pipeline.workload_run: nothing of the gate's runs

    options = analysis_options_from(args)
    analysis = analyze_file(args.trace, options)
    if args.chrome_trace is not None:
        write_chrome_trace(args.trace, options, args.chrome_trace)
    if args.format == "json":
        from perfgate.report.json_report import json_ready

        print(json.dumps(json_ready(analysis.to_dict()), indent=2, sort_keys=True, default=str))
    else:
        from perfgate.analysis.table import render_table

        say(render_table(analysis))
        if analysis.launch.diagnosis is not None:
            from perfgate.diagnosis.render import render_diagnosis_text

            say("\n" + render_diagnosis_text(analysis.launch.diagnosis))
    return 0


def write_chrome_trace(traces: list[Path], options: AnalysisOptions, out: Path) -> None:
    """The first trace's steps around its median one, as a Chrome trace at ``out`` (atomically)."""
    from perfgate.analysis.step_trace import steps_trace
    from perfgate.errors import ConfigError
    from perfgate.system.files import write_json_atomically
    from perfgate.trace.export import load_trace

    if len(traces) != 1:
        raise ConfigError(f"--chrome-trace: one TRACE at a time (got {len(traces)})")
    path = traces[0]
    if path.suffix in (".nsys-rep", ".qdrep"):
        path = path.with_suffix(".sqlite")          # analyze_file exported it beside the report
    if not out.parent.is_dir():
        raise ConfigError(f"--chrome-trace {out}: the folder {out.parent} does not exist")
    doc = steps_trace(load_trace(path), options.step_pattern, options.skip_steps, label=path.name)
    write_json_atomically(out, doc)
    say(f"chrome trace: {out} ({len(doc['traceEvents'])} events, steps {doc['otherData']['steps']}; "
        "open it in ui.perfetto.dev or chrome://tracing)")
