"""The gate's stages wired together, shared by the pytest plugin and the CLI.

``run_workload``: capture x launches -> analyze_trace -> compare with this machine's baseline
(or record it) -> WorkloadResult, with ``result.json`` in the run directory. ``analyze_file``
and ``compare_files`` serve ``perfgate analyze`` / ``perfgate compare``.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.baseline import (
    FORMAT as BASELINE_FORMAT,
    baseline_from_analyses,
    baseline_path,
    checked_metrics,
    command_line,
    load_baseline,
    parse_baseline,
    provenance,
    write_baseline,
)
from perfgate.config import Settings
from perfgate.errors import BaselineError, PerfgateError, TraceError, os_error_message
from perfgate.gpu_monitor import GpuMonitor, MonitorReport
from perfgate.model import Analysis, MachineInfo, Verdict, WorkloadResult
from perfgate.secrets import WITHHELD_SUFFIX, redact_text, secret_values
from perfgate.workloads import WorkloadSpec

if TYPE_CHECKING:
    from perfgate.analysis import AnalysisOptions
    from perfgate.compare import ComparePolicy, Outcome
    from perfgate.trace import Trace

TRACE_SUFFIXES = (".sqlite", ".nsys-rep")
RESULT_FILE = "result.json"


def analysis_options(spec: WorkloadSpec) -> AnalysisOptions:
    """AnalysisOptions for ``spec`` (its step pattern, skipped steps and batch size)."""
    from perfgate.analysis import AnalysisOptions

    kwargs: dict[str, Any] = {"step_pattern": spec.step_pattern, "batch_size": spec.batch_size}
    if spec.skip_steps is not None:
        kwargs["warmup_steps"] = spec.skip_steps
    return AnalysisOptions(**kwargs)


def compare_policy(settings: Settings, spec: WorkloadSpec | None = None) -> ComparePolicy:
    """The ComparePolicy of a workload. Tolerances, first match wins: the command line's, the
    workload table's, the ``[tool.perfgate.tolerance]`` table's, the metric's default."""
    from perfgate.compare import ComparePolicy

    overrides = (settings.option_tolerances, *([spec.tolerances] if spec else []))
    return ComparePolicy(tolerances=settings.tolerances, tolerance_overrides=overrides, alpha=settings.alpha,
                         strict_new=settings.strict)


def new_run_dir(artifacts_dir: Path, name: str) -> Path:
    """A fresh ``<artifacts>/<UTC timestamp>-<name>/`` directory."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ")
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
    run_dir = artifacts_dir / f"{stamp}-{safe}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def this_machine(settings: Settings) -> MachineInfo:
    """MachineInfo of this machine with the nsys version (when nsys can be found)."""
    from perfgate.machine import machine_info
    from perfgate.nsys import find_nsys

    try:
        nsys: Path | None = find_nsys(settings.nsys)
    except PerfgateError:
        nsys = None
    return machine_info(nsys, settings.machine_class)


def run_workload(
    spec: WorkloadSpec,
    settings: Settings,
    *,
    update_baseline: bool = False,
    cwd: Path | None = None,
    extra_args: Sequence[str] = (),
) -> WorkloadResult:
    """Run ``spec`` ``settings.launches`` times under nsys and judge it against its baseline.

    Never raises for a problem of this workload: it comes back as verdict ERROR with ``error``."""
    started = time.monotonic()
    result = WorkloadResult(workload=spec.name, variant=spec.variant, verdict=Verdict.ERROR, strict=settings.strict)
    try:
        result.run_dir = new_run_dir(settings.artifacts_dir, spec.full_name)
        result.machine = this_machine(settings)
        analyses = capture_and_analyze(spec, settings, result.run_dir, cwd=cwd, extra_args=extra_args)
        result.analyses = analyses
        path = baseline_path(settings.baseline_dir, spec.name, result.machine.machine_class, spec.variant)
        result.baseline_path = path
        if update_baseline:
            record = baseline_from_analyses(spec.name, analyses, result.machine,
                                            provenance(settings.root, command_line()), spec.variant)
            write_baseline(path, record)
            result.verdict = Verdict.PASS
            result.message = f"baseline recorded: {path} ({len(analyses)} launch{'es' if len(analyses) != 1 else ''})"
            result.baseline_step_times_ms = record.step_durations_ms
            result.extra["baseline_updated"] = True
        else:
            judge(result, spec, settings, analyses, path)
    except PerfgateError as exc:
        result.verdict, result.error, result.message = Verdict.ERROR, str(exc), ""
    except OSError as exc:  # a full disk, a folder perfgate may not write: the file and why
        result.verdict, result.error, result.message = Verdict.ERROR, os_error_message(exc), ""
    except Exception as exc:  # a bug must not hide the other workloads' results
        text = "".join(traceback.format_exception(exc))
        where = ""
        if result.run_dir is not None:
            with contextlib.suppress(OSError):
                (result.run_dir / "error.txt").write_text(text)
                where = f" (traceback in {result.run_dir / 'error.txt'})"
        result.verdict, result.error = Verdict.ERROR, f"internal error: {type(exc).__name__}: {exc}{where}"
        result.message = ""
    result.wall_s = time.monotonic() - started
    if result.run_dir is not None:
        try:
            _write_result(result)
        except OSError as exc:
            measured = "" if result.verdict is Verdict.ERROR else f" (the measured verdict was {result.verdict})"
            written = f"{os_error_message(exc, result.run_dir / RESULT_FILE)}{measured}"
            result.error, result.verdict = "; ".join(filter(None, (result.error, written))), Verdict.ERROR
    return result


def capture_and_analyze(
    spec: WorkloadSpec, settings: Settings, run_dir: Path, *, cwd: Path | None = None,
    extra_args: Sequence[str] = (),
) -> list[Analysis]:
    """Capture ``settings.launches`` launches into ``run_dir/launch-<k>/`` and analyze each."""
    from perfgate.analysis import analyze
    from perfgate.capture import run_capture
    from perfgate.trace import load_trace

    options = analysis_options(spec)
    analyses = []
    for k in range(settings.launches):
        with GpuMonitor() as monitor:
            capture = run_capture(spec, settings, run_dir / f"launch-{k}", cwd=cwd, extra_args=extra_args)
        withheld = sorted(capture.run_dir.glob(f"*{WITHHELD_SUFFIX}"))
        if capture.sqlite_path is None or not capture.sqlite_path.exists():
            raise TraceError(f"{capture.run_dir}: nsys left no SQLite export{withheld and f' (withheld: {withheld[0]})' or ''}")
        trace = load_trace(capture.sqlite_path)   # once, for the analysis and the diagnosis
        analysis = analyze(trace, _with_reported_batch(options, capture.self_report))
        extra = {**analysis.extra, "launch": k}
        notes = (f"launch {k}: {p.name.removesuffix(WITHHELD_SUFFIX)} withheld ({p})" for p in withheld)
        analysis = replace(analysis, warnings=(*analysis.warnings, *notes))  # the result's message says so
        if capture.self_report is not None:
            extra["self_report"] = capture.self_report
        analysis = _checked(replace(analysis, extra=extra), k, monitor.report())
        analyses.append(_diagnosed(analysis, trace))
    return analyses


def _checked(analysis: Analysis, launch: int, clocks: MonitorReport | None) -> Analysis:
    """``analysis`` with the launch's measurement checks: whether its measured steps look stationary
    (no drift, no second level inside the window: stats.stability) and, with NVML, its GPU clocks
    and whether the GPU throttled. A failed check becomes a warning on the analysis."""
    from perfgate.stats import stability

    extra, warnings = dict(analysis.extra), list(analysis.warnings)
    report = stability(list(analysis.steps.durations_ms))
    extra["stability"] = asdict(report)
    if not report.stable:
        warnings.append(f"launch {launch}: measured steps are not stable ({'; '.join(report.reasons)})")
    if clocks is not None:
        extra["gpu_clocks"] = clocks.to_dict()
        if clocks.throttled:
            warnings.append(f"launch {launch}: the GPU throttled ({', '.join(clocks.reasons)}); "
                            f"SM clock {clocks.sm_mhz_min}-{clocks.sm_mhz_max} MHz")
    return replace(analysis, extra=extra, warnings=tuple(warnings))


def _with_reported_batch(options: AnalysisOptions, self_report: Mapping[str, Any] | None) -> AnalysisOptions:
    """``options`` with the batch size the workload reported (x world size) when none is configured."""
    if options.batch_size is not None or not self_report:
        return options
    batch, world = self_report.get("batch_size"), self_report.get("world_size") or 1
    if isinstance(batch, int) and isinstance(world, int) and batch > 0 and world > 0:
        return replace(options, batch_size=batch * world)
    return options


def judge(result: WorkloadResult, spec: WorkloadSpec, settings: Settings,
          analyses: Sequence[Analysis], path: Path) -> None:
    """Compare ``analyses`` with the baseline at ``path`` (NEW without one); fills ``result``."""
    from perfgate.compare import compare_launches

    baseline = load_baseline(path) if path.exists() else None
    outcome = compare_launches(baseline.launch_metrics if baseline else None,
                               [a.metrics() for a in analyses], compare_policy(settings, spec))
    result.verdict, result.strict = outcome.verdict, outcome.strict
    result.comparisons = list(outcome.comparisons)
    result.message = outcome.summary
    notes = [w for a in analyses for w in a.warnings if w.startswith("launch ")]
    if notes:
        result.message += "\nnote: " + "\nnote: ".join(notes)
    if baseline is None:
        result.message += f" (record one with --perfgate-update-baselines: {path})"
        others = sorted(p.stem for p in path.parent.glob("*.json") if p != path)
        if others:
            result.message += (f"; not compared with the baselines of other machine classes ({', '.join(others)}): "
                               f"this machine is {path.stem}")
        return
    result.baseline_step_times_ms = baseline.step_durations_ms
    if outcome.verdict == Verdict.REGRESSED:
        attribution = _explain(baseline.launch_details, analyses, outcome)
        if attribution is not None:
            from perfgate.diagnosis import render_attribution_text

            result.extra["attribution"] = attribution.to_dict()
            result.message += "\n" + render_attribution_text(attribution)


def analyze_file(path: Path, options: AnalysisOptions | None = None, nsys: str | None = None) -> Analysis:
    """Analyze one trace (``.sqlite``, or ``.nsys-rep`` exported to SQLite beside it first)."""
    return _analyzed(path, options, nsys)[0]


def _analyzed(path: Path, options: AnalysisOptions | None, nsys: str | None) -> tuple[Analysis, Trace]:
    """The diagnosed Analysis of one trace file and the Trace it was made from (loaded once)."""
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.trace import load_trace

    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.suffix == ".nsys-rep":
        from perfgate.nsys import export_sqlite, find_nsys

        path = export_sqlite(path, find_nsys(nsys))
    trace = load_trace(path)
    return _diagnosed(analyze(trace, options or AnalysisOptions()), trace), trace


def load_launch_metrics(path: Path, options: AnalysisOptions | None = None, nsys: str | None = None) -> list[dict[str, float]]:
    """Per-launch metrics from a trace, a baseline file, a ``result.json`` /
    ``perfgate-report.json`` (one workload) or ``perfgate analyze --format json`` output."""
    return _load_side(path, options, nsys).metrics


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: neither an nsys trace (.sqlite/.nsys-rep) nor JSON ({exc})") from exc


def metrics_from_document(doc: Any, path: Path) -> list[dict[str, float]]:
    """Per-launch metrics out of a parsed perfgate JSON document (see load_launch_metrics)."""
    if isinstance(doc, dict) and doc.get("format") == BASELINE_FORMAT:
        return parse_baseline(doc, path).launch_metrics
    doc = _single_result(doc, path)
    if isinstance(doc, dict) and isinstance(doc.get("analyses"), list):
        launches = [a.get("metrics") if isinstance(a, dict) else None for a in doc["analyses"]]
    elif isinstance(doc, dict) and isinstance(doc.get("metrics"), dict):
        launches = [doc["metrics"]]
    else:
        raise TraceError(f"{path}: not a perfgate baseline, result or analysis JSON")
    if not launches:
        raise TraceError(f"{path}: contains no measured launches (an errored run?)")
    field = "analyses[{k}].metrics" if isinstance(doc.get("analyses"), list) else "metrics"
    return [checked_metrics(m, f"{path}: {field.format(k=k)}") for k, m in enumerate(launches)]


def _single_result(doc: Any, path: Path) -> Any:
    """A ``perfgate-report.json``'s one workload result (the document itself when it is not a report)."""
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        results = doc["results"]
        if len(results) != 1:
            names = ", ".join(str(r.get("name", r.get("workload"))) for r in results if isinstance(r, dict))
            raise TraceError(f"{path}: holds {len(results)} workload results ({names}); "
                             f"compare one workload's result.json instead")
        return results[0]
    return doc


@dataclass(frozen=True)
class _Side:
    """One side of a file comparison, read and analyzed once: its per-launch metrics, what the
    attribution reads (Analyses, or launch dicts of a JSON document) and, for a trace, the Trace."""

    metrics: list[dict[str, float]]
    launches: list[Any]
    trace: Trace | None = None


def _load_side(path: Path, options: AnalysisOptions | None, nsys: str | None) -> _Side:
    if path.suffix in TRACE_SUFFIXES:
        analysis, trace = _analyzed(path, options, nsys)
        return _Side([analysis.metrics()], [analysis], trace)
    doc = _read_json(path)
    metrics = metrics_from_document(doc, path)
    if isinstance(doc, dict) and doc.get("format") == BASELINE_FORMAT:
        return _Side(metrics, parse_baseline(doc, path).launch_details)
    doc = _single_result(doc, path)
    if isinstance(doc, dict) and isinstance(doc.get("analyses"), list):
        return _Side(metrics, [a for a in doc["analyses"] if isinstance(a, dict)])
    return _Side(metrics, [doc])


def _step_basis(side: _Side) -> set[str]:
    """What the side's step times measure ("period" or "range"); documents from before the
    iteration period say nothing and measured the range. Metrics-only documents: unknown."""
    found: set[str] = set()
    for launch in side.launches:
        if isinstance(launch, Analysis):
            found.add(launch.steps.basis)
        elif isinstance(launch, dict) and isinstance(launch.get("steps"), dict):
            found.add(str(launch["steps"].get("basis") or "range"))
    return found


def _check_same_basis(base_path: Path, base: _Side, cur_path: Path, cur: _Side) -> None:
    b, c = _step_basis(base), _step_basis(cur)
    if b and c and b != c:
        old = base_path if "range" in b else cur_path
        raise BaselineError(
            f"{old}: its step times are step-range durations (written by an older perfgate), the other "
            "side's are iteration periods (step start to next step start); they cannot be compared. "
            "Re-analyze the trace or re-record the result with this perfgate")


def compare_files(baseline: Path, current: Path, policy: ComparePolicy | None = None,
                  options: AnalysisOptions | None = None, nsys: str | None = None) -> Outcome:
    """Compare two files, each a trace, a result JSON or a baseline file."""
    return compare_and_explain(baseline, current, policy, options, nsys, explain=False)[0]


def compare_and_explain(baseline: Path, current: Path, policy: ComparePolicy | None = None,
                        options: AnalysisOptions | None = None, nsys: str | None = None, *,
                        explain: bool = True) -> tuple[Outcome, Any | None]:
    """Compare two files (each a trace, a result JSON or a baseline file, read once) and, unless the
    outcome is a PASS without any regressed row, the diagnosis Attribution of the change (phase
    deltas, newly firing rules, kernel changes; None when it cannot be made)."""
    from perfgate.compare import ComparePolicy, compare_launches

    b, c = _load_side(baseline, options, nsys), _load_side(current, options, nsys)
    _check_same_basis(baseline, b, current, c)
    outcome = compare_launches(b.metrics, c.metrics, policy or ComparePolicy())
    clean = outcome.verdict == Verdict.PASS and not any(r.verdict == Verdict.REGRESSED for r in outcome.comparisons)
    if not explain or clean:
        return outcome, None
    traces = {"baseline_trace": b.trace, "current_trace": c.trace} if b.trace and c.trace else {}
    return outcome, _explain(b.launches, c.launches, outcome, **traces)


def _write_result(result: WorkloadResult) -> None:
    from perfgate.report.json_report import result_dict

    assert result.run_dir is not None
    doc = result_dict(result)
    text = redact_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n", secret_values(os.environ))
    (result.run_dir / RESULT_FILE).write_text(text)


def _diagnosed(analysis: Analysis, trace: Trace | None = None) -> Analysis:
    """``analysis`` with ``extra["diagnosis"]`` (a dict) when perfgate.diagnosis can diagnose it;
    ``trace`` (the Trace the analysis was made from) lets the trace-level rules run too."""
    try:
        from perfgate.diagnosis import diagnose
    except ImportError:
        return analysis
    try:
        diagnosis = diagnose(analysis, trace).to_dict()
    except Exception as exc:  # a diagnosis bug must not fail the gate
        return replace(analysis, extra={**analysis.extra, "diagnosis_error": f"{type(exc).__name__}: {exc}"})
    return replace(analysis, extra={**analysis.extra, "diagnosis": diagnosis})


def _explain(baseline_launches: Sequence[Any], analyses: Sequence[Any], outcome: Outcome,
             **traces: Any) -> Any | None:
    """perfgate.diagnosis's Attribution of the change (None when diagnosis is unavailable or fails:
    an attribution bug must not fail the gate)."""
    try:
        from perfgate.diagnosis import explain_regression
    except ImportError:
        return None
    try:
        return explain_regression(list(baseline_launches), list(analyses), outcome, **traces)
    except Exception:  # noqa: BLE001 - reported as missing attribution, never as a gate failure
        return None