"""``perfgate`` command line: run, analyze, compare, baseline update, list (and ab/calibrate/report
when those modules provide ``add_parser(subparsers)``).

Exit codes: 0 pass, 1 regression, 2 usage or infrastructure error (``perfgate: error: <message>``),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM); every process perfgate started has ended by then.
Subcommand handlers are ``func(args) -> int`` set with ``parser.set_defaults(func=...)``.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError, PerfgateError, StaleBaselineError
from perfgate.settings.options import add_command_options, settings_from_args
from perfgate.settings.workloads import helper_notes, selected_specs

EXIT_PASS, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE, what a shell reports for a program its pipe's reader left
PLUGGABLE = {"ab": "perfgate.commands.ab", "calibrate": "perfgate.commands.calibrate", "report": "perfgate.report",
             "history": "perfgate.commands.history", "init": "perfgate.commands.init_repo",
             "bisect": "perfgate.commands.bisect"}   # command -> its module
# Their help, so that ``perfgate --help`` lists them unimported (scipy): each imports when it runs.
PLUGGABLE_HELP = {
    "ab": "A/B: measure two commits interleaved in this job and compare them",
    "calibrate": "measure false-alarm and detection rates of the gate on this machine",
    "report": "re-render a perfgate-report.json: summary, job summary, annotations, commit statuses",
    "history": "the step-time trend of a workload's gated runs (history_dir)",
    "init": "set up this repository for the gate: pyproject table, baselines/, a GitHub workflow, .gitignore",
    "bisect": "find the commit that made a workload slower (binary search of A/B measurements)",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv`` given, only the pluggable command it names is imported (the others
    are listed by their help line)."""
    parser = argparse.ArgumentParser(
        prog="perfgate", description="CI performance regression gate for PyTorch training under Nsight Systems.")
    from perfgate import __version__

    parser.add_argument("--version", action="version", version=f"perfgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = sub.add_parser("run", help="run workloads under nsys and compare with their baselines")
    run.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads to run (default: all enabled)")
    run.add_argument("--update-baseline", action="store_true", help="record the results as the new baselines")
    add_gate_options(run)
    run.set_defaults(func=cmd_run)

    analyze = sub.add_parser("analyze", help="analyze one nsys trace (.sqlite or .nsys-rep), or one per node of a job")
    analyze.add_argument("trace", type=Path, metavar="TRACE", nargs="+")
    analyze.add_argument("--format", choices=("table", "json"), default="table")
    add_analysis_options(analyze)
    analyze.set_defaults(func=cmd_analyze)

    compare = sub.add_parser("compare", help="compare two traces (or job folders), result JSONs or baseline files")
    compare.add_argument("baseline", type=Path, metavar="BASELINE")
    compare.add_argument("current", type=Path, metavar="CURRENT")
    compare.add_argument("--format", choices=("table", "json"), default="table")
    compare.add_argument("--tolerance", action="append", default=[], metavar="METRIC=SPEC",
                         help="tolerance override, e.g. step_time_ms=5%% (repeatable)")
    compare.add_argument("--alpha", type=float, default=0.01, help="false-alarm budget (default 0.01)")
    compare.add_argument("--nsys", default=None, metavar="PATH", help="nsys for exporting .nsys-rep files")
    compare.add_argument("--force", action="store_true",
                         help="compare even when the two inputs name different workloads or machine classes")
    add_analysis_options(compare)
    compare.set_defaults(func=cmd_compare)

    baseline = sub.add_parser("baseline", help="manage baselines")
    baseline_sub = baseline.add_subparsers(dest="baseline_command", metavar="ACTION", required=True)
    update = baseline_sub.add_parser("update", help="run workloads and record them as baselines")
    update.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads (default: all enabled)")
    add_gate_options(update)
    update.set_defaults(func=cmd_baseline_update)
    check = baseline_sub.add_parser(
        "check", help="list baselines recorded from other code or software than this checkout's (exit 1 if any)")
    add_gate_options(check)
    check.set_defaults(func=cmd_baseline_check)

    listing = sub.add_parser("list", help="list the workloads perfgate discovers")
    listing.add_argument("--root", type=Path, default=None, help="project folder (default: nearest pyproject.toml)")
    listing.set_defaults(func=cmd_list)

    wanted = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name in PLUGGABLE:
        if wanted is not None and name != wanted:
            sub.add_parser(name, help=PLUGGABLE_HELP[name], add_help=False)
            continue
        try:
            module = importlib.import_module(PLUGGABLE[name])
        except ImportError as exc:   # a missing dependency: said, never a command that vanishes
            if wanted == name:
                raise ConfigError(f"perfgate {name} cannot run: importing {PLUGGABLE[name]} failed ({exc}); "
                                  "install perfgate's dependencies (pip install -e .)") from exc
            sub.add_parser(name, help=f"{PLUGGABLE_HELP[name]} (unavailable: {exc})", add_help=False)
            continue
        add_parser = getattr(module, "add_parser", None)
        if callable(add_parser):
            add_parser(sub)
    return parser


def add_gate_options(parser: argparse.ArgumentParser) -> None:
    """Options of ``run``, ``baseline update``, ``ab``, ``calibrate``: the pytest options' declaration."""
    add_command_options(parser)


def add_analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--step-pattern", default=None, metavar="RE", help="regex naming the step range")
    parser.add_argument("--skip-steps", "--warmup-steps", dest="skip_steps", type=int, default=None, metavar="N",
                        help="step ranges of each process skipped before measuring (default 5)")
    parser.add_argument("--batch-size", type=int, default=None, metavar="N", help="samples per step (samples/s)")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; exit codes 0 pass, 1 regression, 2 error, 130 Ctrl-C, 143 SIGTERM (SIGHUP:
    129). Every process a command started has ended when this returns (perfgate.system.process_tree).
    Without ``argv`` (the ``perfgate`` program itself) the process then ends at once
    (:func:`exit_now`) rather than returning."""
    if argv is None:
        import gc

        # an analysis makes many objects and few reference cycles: collect every 10,000
        # allocations rather than every 700 (about 150 collections fewer at 10^6 GPU ops)
        gc.set_threshold(10_000, *gc.get_threshold()[1:])
    code = _main(argv)
    if argv is None:
        exit_now(code)
    return code


def exit_now(code: int) -> None:
    """End the process with ``code`` once the exit handlers have run and stdout and stderr are
    flushed, without tearing the interpreter down: freeing numpy's, pandas's and DuckDB's modules
    one object at a time takes about 0.1 s, as long as a small analysis. Returns (the process
    goes on to end normally) while another thread is still running."""
    import atexit
    import os
    import threading

    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()   # perfgate.system.process_tree's stop_all among them
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: let the interpreter report it as it would
        return
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    from perfgate.system.process_tree import EXIT_INTERRUPTED, Terminated, stop_all, terminate_raises

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(argv)      # a Ctrl-C while it imports a command or reads the options: 130,
        args = parser.parse_args(argv)   # not a traceback
        with terminate_raises():
            return int(args.func(args))
    except StaleBaselineError as exc:   # the fix is a recording, with this command
        _error(f"{exc}: perfgate baseline update")
        return EXIT_ERROR
    except PerfgateError as exc:
        _error(str(exc))
        return EXIT_ERROR
    except BrokenPipeError:  # whoever read stdout went away (`perfgate analyze | head`): end quietly
        stop_all()
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # a full disk, a file perfgate may not read or write
        _error(f"{exc.filename if exc.filename is not None else 'a file'}: {exc.strerror or exc}")
        return EXIT_ERROR
    except Terminated as exc:
        stop_all()
        print(f"perfgate: terminated (signal {exc.signum})", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        stop_all()
        print("perfgate: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: exit 2, never 1 (a regression), one line rather than a traceback
        import traceback

        from perfgate.system.process_tree import swallowed_interrupt

        stop_all()
        interrupt = swallowed_interrupt(exc)
        if interrupt is not None:   # a Ctrl-C or SIGTERM that DuckDB turned into an error
            signum = interrupt.signum if isinstance(interrupt, Terminated) else None
            print(f"perfgate: terminated (signal {signum})" if signum else "perfgate: interrupted", file=sys.stderr)
            return 128 + signum if signum else EXIT_INTERRUPTED
        if os.environ.get("PERFGATE_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        _error(f"internal error (a bug in perfgate, please report it): {type(exc).__name__}: {exc} "
               "(PERFGATE_DEBUG=1 prints the traceback)")
        return EXIT_ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of a closed pipe is silent."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _error(message: str) -> None:
    """Print ``perfgate: error: <message>`` with any secret of this environment redacted."""
    from perfgate.report.escape import terminal_text
    from perfgate.capture.redaction.secrets import redact_text, secret_values

    print(f"perfgate: error: {terminal_text(redact_text(message, secret_values(os.environ)))}", file=sys.stderr)


# --------------------------------------------------------------------------- commands


def cmd_run(args: argparse.Namespace, *, update: bool | None = None) -> int:
    from perfgate.commands import history
    from perfgate.pipeline.workload_run import run_workload

    settings = settings_from_args(args)
    specs = selected_specs(settings)
    for note in helper_notes(settings):
        print(f"perfgate: note: {note}", file=sys.stderr)
    update = args.update_baseline if update is None else update
    results = []
    unrecorded = False   # a history line that could not be written: the run still reports, then exits 2
    for spec in specs:
        most = settings.record_launches if update else settings.max_launches
        how = f"{most} launches, recording" if update else f"{settings.min_launches} to {most} launches"
        print(f"perfgate: running {spec.full_name} ({how})", file=sys.stderr, flush=True)
        results.append(run_workload(spec, settings, update_baseline=update,
                                    progress=lambda line: _say(f"perfgate: {line}", sys.stderr)))
        try:
            history.record(results[-1], settings, update_baseline=update)   # with history_dir set
        except PerfgateError as exc:
            _error(str(exc))
            unrecorded = True
    _print_results(results)
    reports_written = _write_reports(results, settings.report_dir)
    if unrecorded or not reports_written or any(r.verdict.value == "ERROR" for r in results):
        return EXIT_ERROR
    return EXIT_REGRESSION if any(r.failed for r in results) else EXIT_PASS


def cmd_baseline_update(args: argparse.Namespace) -> int:
    return cmd_run(args, update=True)


def cmd_baseline_check(args: argparse.Namespace) -> int:
    """Each baseline file: current, stale (what differs) or unreadable; exit 1 if one is stale."""
    from perfgate.pipeline.staleness import check_baselines, check_lines

    settings = settings_from_args(args)
    lines, status = check_lines(check_baselines(settings))
    for line in lines or [f"perfgate: no baselines in {settings.baseline_dir}"]:
        _say(line)
    return status


def cmd_analyze(args: argparse.Namespace) -> int:
    from perfgate.trace import read_ahead

    read_ahead.start_reading(args.trace[0])            # its GPU tables read while numpy and the analysis import
    from perfgate.pipeline.inputs import analyze_file  # not perfgate.pipeline.workload_run: nothing of the gate's runs

    analysis = analyze_file(args.trace, analysis_options_from(args))
    if args.format == "json":
        from perfgate.report.json_report import json_ready

        print(json.dumps(json_ready(analysis.to_dict()), indent=2, sort_keys=True, default=str))
    else:
        from perfgate.analysis.table import render_table

        _say(render_table(analysis))
        if analysis.launch.diagnosis is not None:
            from perfgate.diagnosis.render import render_diagnosis_text

            _say("\n" + render_diagnosis_text(analysis.launch.diagnosis))
    return EXIT_PASS


def cmd_compare(args: argparse.Namespace) -> int:
    from perfgate.gate.compare import ComparePolicy
    from perfgate.gate.wording import describe
    from perfgate.gate.metric_specs import alpha_problem, parse_tolerance
    from perfgate.settings.config import parse_tolerance_option
    from perfgate.pipeline.inputs import compare_and_explain

    for path, what in ((args.baseline, "BASELINE"), (args.current, "CURRENT")):
        if not path.exists():
            raise ConfigError(f"{what} {path}: no such file")
    if not args.force:
        from perfgate.commands.compare_inputs import check_comparable

        check_comparable(args.baseline, args.current)
    from perfgate.gate.tolerance_names import check_metric_name

    tolerances = {}
    for text in args.tolerance:
        metric, spec = parse_tolerance_option(text, "--tolerance")
        check_metric_name(metric, "option --tolerance")
        tolerances[metric] = parse_tolerance(spec, f"option --tolerance {metric}")
    if (problem := alpha_problem(args.alpha)) is not None:
        raise ConfigError(f"option --alpha: {problem}, got {args.alpha!r}")
    policy = ComparePolicy(tolerances=tolerances, alpha=args.alpha)
    options = analysis_options_from(args)
    outcome, attribution = compare_and_explain(args.baseline, args.current, policy, options, args.nsys)
    if args.format == "json":
        from perfgate.report.json_report import comparison_dict

        print(json.dumps({"verdict": outcome.verdict.value, "failed": outcome.failed, "summary": outcome.summary,
                          "comparisons": [comparison_dict(c) for c in outcome.comparisons],
                          "attribution": attribution.to_dict() if attribution is not None else None},
                         indent=2, sort_keys=True, default=str))
    else:
        _say(outcome.summary)
        if attribution is not None:
            from perfgate.diagnosis.render import render_attribution_text

            _say(render_attribution_text(attribution))
        for c in outcome.comparisons:
            _say(f"  {str(c.verdict):<12} {describe(c)}{'' if c.gating else ' (not gating)'}")
    return EXIT_REGRESSION if outcome.failed else EXIT_PASS


def cmd_list(args: argparse.Namespace) -> int:
    from perfgate.system.machine import machine_info
    from perfgate.settings.workloads import discover_workloads

    settings = settings_from_args(args)
    specs = discover_workloads(settings, machine_info(None, settings.machine_class).gpu_count)
    for note in helper_notes(settings):
        print(f"perfgate: note: {note}", file=sys.stderr)
    if not specs:
        print(f"perfgate: no workloads in {settings.workloads_dir} or [tool.perfgate.workloads]")
    for spec in specs:
        state = "" if spec.enabled else "  (disabled)"
        launcher = f"torchrun x{spec.nproc}" if spec.launcher == "torchrun" else "python"
        print(f"{spec.full_name:<32} {launcher:<12} -m {spec.module} {' '.join(spec.args)}".rstrip() + state)
    return EXIT_PASS


# --------------------------------------------------------------------------- helpers


def analysis_options_from(args: argparse.Namespace) -> Any:
    from perfgate.analysis import AnalysisOptions

    kwargs: dict[str, Any] = {"step_pattern": args.step_pattern, "batch_size": args.batch_size}
    if args.skip_steps is not None:
        kwargs["skip_steps"] = args.skip_steps
    return AnalysisOptions(**kwargs)


def _say(text: str, stream: Any = None) -> None:
    """Print ``text`` made inert for a terminal and a CI log (perfgate.report.escape.terminal_text):
    names and messages come from the workload's trace, output and files."""
    from perfgate.report.escape import terminal_text

    print(terminal_text(text), file=stream or sys.stdout, flush=True)


def _print_results(results: list[Any]) -> None:
    from perfgate.report.terminal import failure_message, render_summary

    for result in results:
        if result.failed:
            _say(failure_message(result) + "\n")
    for line in render_summary(results):
        _say(line)


def _write_reports(results: list[Any], report_dir: Path) -> bool:
    """Write the report files; False (after saying which and why) when some could not be written:
    the run then exits 2, an infrastructure error, whatever the verdicts (they were printed)."""
    from perfgate.report import write_all

    try:
        machine = next((r.machine for r in results if r.machine is not None), None)
        write_all(results, report_dir, machine_info=None if machine is None else vars(machine))
    except PerfgateError as exc:
        _error(str(exc))
        return False
    except Exception as exc:  # a renderer bug: the verdicts were printed; say what failed
        _error(f"reports not written to {report_dir}: {type(exc).__name__}: {exc}")
        return False
    print(f"perfgate: reports in {report_dir}")
    return True
