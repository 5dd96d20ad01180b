"""Reading, analyzing and comparing files outside a gate run (``perfgate analyze`` / ``perfgate
compare``): a trace (``.sqlite``, or ``.nsys-rep`` exported first), a baseline, a ``result.json`` /
``perfgate-report.json`` or ``perfgate analyze --format json`` output, each read once; and the
diagnosis steps the gate shares (``diagnosed`` for one analysis, ``explain_change`` for a change).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfgate.errors import BaselineError, PerfgateError, TraceError
from perfgate.baselines.store import FORMAT as BASELINE_FORMAT, checked_metrics, parse_baseline
from perfgate.records.model import Analysis, Verdict
from perfgate.records.version import check_record_version
from perfgate.system.process_tree import swallowed_interrupt

if TYPE_CHECKING:
    from perfgate.analysis import AnalysisOptions
    from perfgate.gate.compare import ComparePolicy, Outcome
    from perfgate.records.diagnosis import Attribution
    from perfgate.records.staleness import Staleness

TRACE_SUFFIXES = (".sqlite", ".nsys-rep")


def explained_launches(base_launches: Sequence[Analysis], timing: Sequence[Analysis],
                        profile: Analysis | None) -> tuple[list[Analysis], list[Analysis]]:
    """The launches the diagnosis compares: the profile launches of both sides when both have one
    (CUDA-traced, with GPU facts), else the timing launches (like with like, never mixed)."""
    base_profiles = [a for a in base_launches if a.launch.kind == "profile"]
    if profile is not None and base_profiles:
        return base_profiles, [profile]
    return [a for a in base_launches if a.launch.kind != "profile"], list(timing)


def analyze_file(path: Path | Sequence[Path], options: AnalysisOptions | None = None,
                 nsys: str | None = None) -> Analysis:
    """The diagnosed Analysis of one trace (``.sqlite``, or ``.nsys-rep`` exported to SQLite beside
    it first), or of a job's traces, one per node (given, or a folder of them), as one job
    (perfgate/trace/nodes.py)."""
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.trace.nodes import job_reports, load_job

    paths = [path] if isinstance(path, Path) else list(path)
    if len(paths) == 1 and paths[0].is_dir():
        paths = job_reports(paths[0])
    trace = load_job([_export(p, nsys) for p in paths])
    return diagnosed(analyze(trace, options or AnalysisOptions()))


def _export(path: Path, nsys: str | None) -> Path:
    """The SQLite export of a trace file (an ``.nsys-rep`` exported beside it first)."""
    if not path.exists():
        raise TraceError(f"{path}: no such file")
    if path.suffix == ".nsys-rep":
        from perfgate.system.nsys import export_sqlite, find_nsys

        try:   # a report perfgate may not read: say so, not nsys's exception trace
            path.open("rb").close()
        except OSError as exc:
            raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None

        path = export_sqlite(path, find_nsys(nsys))
    return path


def load_launch_metrics(path: Path, options: AnalysisOptions | None = None, nsys: str | None = None) -> list[dict[str, float]]:
    """Per-launch metrics from a trace, a baseline file, a ``result.json`` /
    ``perfgate-report.json`` (one workload) or ``perfgate analyze --format json`` output."""
    return _load_side(path, options, nsys).metrics


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (ValueError, RecursionError) as exc:   # not JSON, not UTF-8, nested too deep
        raise TraceError(f"{path}: neither an nsys trace (.sqlite/.nsys-rep) nor JSON ({exc})") from None


def _trace_metrics(analysis: Analysis, path: Path) -> dict[str, float]:
    """The metrics of a trace, checked like a baseline's: a corrupt or hand-edited export (a range
    that ends before it starts) gives a negative or non-finite metric, which would otherwise be
    compared as if measured (a slower run reported IMPROVED)."""
    try:
        return checked_metrics(analysis.metrics(), f"{path}: metrics")
    except BaselineError as exc:
        raise TraceError(f"{exc} (a range that ends before it starts? the export is corrupt)") from None


def metrics_from_document(doc: Any, path: Path) -> list[dict[str, float]]:
    """Per-launch metrics out of a parsed perfgate JSON document (see load_launch_metrics)."""
    if isinstance(doc, dict) and doc.get("format") == BASELINE_FORMAT:
        return parse_baseline(doc, path).launch_metrics
    return _result_metrics(_single_result(doc, path), path)


def _result_metrics(doc: Any, path: Path) -> list[dict[str, float]]:
    """Per-launch metrics of one result (or analysis) document."""
    if isinstance(doc, dict) and isinstance(doc.get("analyses"), list):
        launches = [a.get("metrics") if isinstance(a, dict) else None for a in doc["analyses"]]
    elif isinstance(doc, dict) and isinstance(doc.get("metrics"), dict):
        launches = [doc["metrics"]]
    else:
        raise TraceError(f"{path}: not a perfgate baseline, result or analysis JSON")
    if not launches:
        raise TraceError(f"{path}: contains no measured launches (an errored run?)")
    field = "analyses[{k}].metrics" if isinstance(doc.get("analyses"), list) else "metrics"
    timing = [checked_metrics(m, f"{path}: {field.format(k=k)}") for k, m in enumerate(launches)]
    profile = doc.get("profile")
    if isinstance(profile, dict) and isinstance(profile.get("metrics"), dict):   # the CUDA profile launch
        measured = {name for m in timing for name in m}
        gpu = checked_metrics(profile["metrics"], f"{path}: profile.metrics", profile=True)
        timing.append({name: v for name, v in gpu.items() if name not in measured})
    return timing


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
    """One side of a file comparison, read and analyzed once: its per-launch metrics and the
    launches the attribution reads."""

    metrics: list[dict[str, float]]
    launches: list[Analysis]


def _load_side(path: Path, options: AnalysisOptions | None, nsys: str | None) -> _Side:
    if path.suffix in TRACE_SUFFIXES or path.is_dir():      # a folder: a job's reports, one per node
        analysis = analyze_file(path, options, nsys)
        return _Side([_trace_metrics(analysis, path)], [analysis])
    doc = _read_json(path)
    if isinstance(doc, dict) and doc.get("format") == BASELINE_FORMAT:   # parsed once: metrics and launches
        baseline = parse_baseline(doc, path)
        return _Side(baseline.launch_metrics, baseline.launch_analyses)
    doc = _single_result(doc, path)
    metrics = _result_metrics(doc, path)
    if isinstance(doc, dict) and isinstance(doc.get("analyses"), list):
        check_record_version(doc, str(path), TraceError)      # a result record
        records = [(a, f"{path}: analyses[{k}]") for k, a in enumerate(doc["analyses"]) if isinstance(a, dict)]
    else:
        records = [(doc, str(path))]
    launches = [_analysis_record(a, where) for a, where in records]
    return _Side(metrics, [a for a in launches if a is not None])


def _analysis_record(record: Mapping[str, Any], where: str) -> Analysis | None:
    """The Analysis of an analysis record of a result or ``analyze --format json`` file; None for
    one without its steps (a metrics-only document) or malformed: compared, not explained."""
    if not isinstance(record.get("steps"), dict):
        return None
    try:
        return Analysis.from_dict(record, where)
    except PerfgateError as exc:            # a newer record_version
        raise TraceError(str(exc)) from exc
    except (TypeError, ValueError, AttributeError):
        return None


def _step_basis(side: _Side) -> set[str]:
    """What the side's step times measure ("period" or "range"); documents from before the
    iteration period say nothing and measured the range. Metrics-only documents: unknown."""
    return {launch.steps.basis for launch in side.launches}


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
                        explain: bool = True) -> tuple[Outcome, Attribution | None]:
    """Compare two files (each a trace, a result JSON or a baseline file, read once) and, unless the
    outcome is a PASS without any regressed row, the diagnosis Attribution of the change (phase
    deltas, newly firing rules, kernel changes; None when it cannot be made)."""
    from perfgate.gate.compare import ComparePolicy, compare_launches

    b, c = _load_side(baseline, options, nsys), _load_side(current, options, nsys)
    _check_same_basis(baseline, b, current, c)
    outcome = compare_launches(b.metrics, c.metrics, policy or ComparePolicy())
    clean = outcome.verdict == Verdict.PASS and not any(r.verdict == Verdict.REGRESSED for r in outcome.comparisons)
    if not explain or clean:
        return outcome, None
    return outcome, explain_change(b.launches, c.launches, outcome)


def diagnosed(analysis: Analysis) -> Analysis:
    """``analysis`` with ``launch.diagnosis`` when perfgate.diagnosis can diagnose it."""
    try:
        from perfgate.diagnosis.one_run import diagnose
    except ImportError:
        return analysis
    try:
        diagnosis = diagnose(analysis)
    except Exception as exc:  # a diagnosis bug must not fail the gate (a Ctrl-C must stop it)
        if (interrupt := swallowed_interrupt(exc)) is not None:
            raise interrupt from exc
        return replace(analysis, launch=replace(analysis.launch, diagnosis_error=f"{type(exc).__name__}: {exc}"))
    return replace(analysis, launch=replace(analysis.launch, diagnosis=diagnosis))


def explain_change(baseline_launches: Sequence[Analysis], analyses: Sequence[Analysis], outcome: Outcome,
                   *, provenance: Staleness | None = None, same_code: bool = False,
                   machine: str | None = None) -> Attribution | None:
    """perfgate.diagnosis's Attribution of the change (None when diagnosis is unavailable or fails:
    an attribution bug must not fail the gate)."""
    try:
        from perfgate.diagnosis.attribution import explain_regression
    except ImportError:
        return None
    try:
        return explain_regression(list(baseline_launches), list(analyses), outcome, provenance=provenance,
                                  same_code=same_code, machine=machine)
    except Exception as exc:  # noqa: BLE001 - reported as missing attribution, never as a gate failure
        if (interrupt := swallowed_interrupt(exc)) is not None:
            raise interrupt from exc
        return None