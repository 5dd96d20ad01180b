"""``perfgate run``: each selected workload through the pipeline (capture, analysis, comparison
with its baseline, diagnosis), then its history line, the terminal summary and the report files.
:func:`gate_workload` and :func:`write_reports` are the gate run that ``pytest --perfgate``
(perfgate.plugin) shares: one workload's run and record, and the reports of all of them."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.commands.output import say, say_error
from perfgate.errors import PerfgateError, os_error_message
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.settings.options import add_command_options, settings_from_args
from perfgate.settings.workloads import helper_notes, selected_specs
from perfgate.system.machine import machine_info

if TYPE_CHECKING:
    from perfgate.settings.config import Settings
    from perfgate.settings.workloads import WorkloadSpec

EXIT_PASS, EXIT_REGRESSION, EXIT_ERROR = 0, 1, 2


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    run = subparsers.add_parser("run", help="run workloads under nsys and compare with their baselines")
    run.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="workloads to run (default: all enabled)")
    run.add_argument("--update-baseline", action="store_true", help="record the results as the new baselines")
    add_command_options(run)
    run.set_defaults(func=cmd_run)
    return run


def cmd_run(args: argparse.Namespace, *, update: bool | None = None) -> int:
    """Exit 0 when every workload passed, 1 when one regressed, 2 when one errored or a history line
    or a report could not be written (the verdicts are printed first)."""
    settings = settings_from_args(args)
    specs = specs_on_this_machine(settings)
    for note in helper_notes(settings):
        print(f"perfgate: note: {note}", file=sys.stderr)
    update = args.update_baseline if update is None else update
    results = []
    unrecorded = False   # a history line that could not be written: the run still reports, then exits 2
    for spec in specs:
        most = settings.record_launches if update else settings.max_launches
        how = f"{most} launches, recording" if update else f"{settings.min_launches} to {most} launches"
        print(f"perfgate: running {spec.full_name} ({how})", file=sys.stderr, flush=True)
        result, problem = gate_workload(spec, settings, update=update,
                                        progress=lambda line: say(f"perfgate: {line}", sys.stderr))
        results.append(result)
        if problem is not None:
            say_error(problem)
            unrecorded = True
    _print_results(results)
    reports_written = _write_reports_saying(results, settings.report_dir)
    if unrecorded or not reports_written or any(r.verdict is Verdict.ERROR for r in results):
        return EXIT_ERROR
    return EXIT_REGRESSION if any(r.failed for r in results) else EXIT_PASS


def specs_on_this_machine(settings: Settings) -> list[WorkloadSpec]:
    """The workloads a command runs here (settings.workloads.selected_specs with this machine's GPU
    count, or the count of ``machine_class`` where it is set)."""
    return selected_specs(settings, machine_info(None, settings.machine_class).gpu_count)


def gate_workload(spec: WorkloadSpec, settings: Settings, *, update: bool,
                  progress: Callable[[str], None] | None) -> tuple[WorkloadResult, PerfgateError | None]:
    """Run ``spec`` through the pipeline (recording its baseline with ``update``), write its
    result.json into its run folder and its history line (with ``history_dir`` set): the result,
    and why the line could not be written. A result.json that cannot be written is the run's
    ERROR, naming the file and the verdict measured."""
    from perfgate.commands import history
    from perfgate.pipeline.workload_run import run_workload
    from perfgate.report.json_report import RESULT_FILE, write_result

    result = run_workload(spec, settings, update_baseline=update, progress=progress)
    if result.run_dir is not None:
        try:
            write_result(result)
        except OSError as exc:
            measured = "" if result.verdict is Verdict.ERROR else f" (the measured verdict was {result.verdict})"
            written = f"{os_error_message(exc, result.run_dir / RESULT_FILE)}{measured}"
            result = replace(result, error="; ".join(filter(None, (result.error, written))), verdict=Verdict.ERROR)
    try:
        history.record(result, settings, update_baseline=update)
    except PerfgateError as exc:
        return result, exc
    return result, None


def write_reports(results: Sequence[WorkloadResult], report_dir: Path) -> dict[str, Path]:
    """Every report file of ``results`` in ``report_dir`` (perfgate.report.write_all), with the
    machine of the first result that has one; ReportWriteError names the files not written."""
    from perfgate.report import write_all

    machine = next((r.machine for r in results if r.machine is not None), None)
    return write_all(results, report_dir, machine_info=None if machine is None else vars(machine))


def _print_results(results: list[WorkloadResult]) -> None:
    from perfgate.report.terminal import failure_message, render_summary

    for result in results:
        if result.failed:
            say(failure_message(result) + "\n")
    for line in render_summary(results):
        say(line)


def _write_reports_saying(results: list[WorkloadResult], report_dir: Path) -> bool:
    """Write the report files; False (after saying which and why) when some could not be written:
    the run then exits 2, an infrastructure error, whatever the verdicts (they were printed)."""
    try:
        write_reports(results, report_dir)
    except PerfgateError as exc:
        say_error(exc)
        return False
    except Exception as exc:  # a renderer bug: the verdicts were printed; say what failed
        say_error(f"reports not written to {report_dir}: {type(exc).__name__}: {exc}")
        return False
    print(f"perfgate: reports in {report_dir}")
    return True
