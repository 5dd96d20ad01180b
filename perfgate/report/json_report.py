"""``perfgate-report.json``: everything a later step (``perfgate report``, a dashboard) needs.

Shape (schema version :data:`SCHEMA_VERSION`)::

    {"schema_version": 1, "perfgate_version": "...", "created_utc": "...",
     "verdict": "REGRESSED", "failed": true,
     "counts": {"PASS": 2, "REGRESSED": 1},
     "results": [{"workload", "variant", "name", "verdict", "failed", "message", "error",
                  "run_dir", "baseline_path", "wall_s", "machine": {...} | null,
                  "baseline_step_times_ms": [...], "comparisons": [{...}], "analyses": [{...}],
                  "extra": {...}}]}

``results_from_report`` reads the ``results`` back into WorkloadResults (without analyses'
internals: analyses come back as their dictionaries under ``extra["analyses"]``).
"""
from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from perfgate import __version__
from perfgate.errors import PerfgateError
from perfgate.model import (
    Direction,
    MachineInfo,
    MetricComparison,
    Tolerance,
    Verdict,
    WorkloadResult,
)

SCHEMA_VERSION = 1
_SEVERITY = (Verdict.ERROR, Verdict.REGRESSED, Verdict.INCONCLUSIVE, Verdict.NO_DATA,
             Verdict.NEW, Verdict.IMPROVED, Verdict.PASS)


def overall_verdict(results: Sequence[WorkloadResult]) -> Verdict:
    """The most severe verdict among ``results`` (PASS for none)."""
    present = {r.verdict for r in results}
    return next((v for v in _SEVERITY if v in present), Verdict.PASS)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data: dataclasses, paths and enums converted, a non-finite float as None
    (JSON has no NaN; a reader must never take one for a measurement) and a ``metrics`` mapping
    without its non-finite entries (a metric is there with a number, or absent)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if is_dataclass(value) and not isinstance(value, type):
        return _jsonable(asdict(value))
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (Verdict, Direction)):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): (finite_metrics(v) if k == "metrics" and isinstance(v, Mapping) else _jsonable(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def finite_metrics(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A metrics mapping without the entries that are not finite numbers."""
    return {str(k): v for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


json_ready = _jsonable


def comparison_dict(c: MetricComparison) -> dict[str, Any]:
    """A MetricComparison as JSON-ready data."""
    return _jsonable(asdict(c))


def result_dict(r: WorkloadResult) -> dict[str, Any]:
    """A WorkloadResult as JSON-ready data (analyses via ``Analysis.to_dict()``)."""
    return _jsonable({
        "workload": r.workload, "variant": r.variant, "name": r.name,
        "verdict": r.verdict, "failed": r.failed, "message": r.message, "error": r.error,
        "run_dir": r.run_dir, "baseline_path": r.baseline_path, "wall_s": r.wall_s,
        "machine": None if r.machine is None else asdict(r.machine),
        "baseline_step_times_ms": list(r.baseline_step_times_ms),
        "comparisons": [asdict(c) for c in r.comparisons],
        "analyses": [a.to_dict() for a in r.analyses],
        "extra": r.extra,
    })


def render_report_json(results: Sequence[WorkloadResult]) -> dict[str, Any]:
    """The whole ``perfgate-report.json`` document (``json.dump`` it)."""
    counts: dict[str, int] = {}
    for r in results:
        counts[str(r.verdict)] = counts.get(str(r.verdict), 0) + 1
    verdict = overall_verdict(results)
    return {
        "schema_version": SCHEMA_VERSION,
        "perfgate_version": __version__,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "verdict": verdict.value,
        "failed": any(r.failed for r in results),
        "counts": counts,
        "results": [result_dict(r) for r in results],
    }


def _comparison_from(d: Mapping[str, Any]) -> MetricComparison:
    tol = d.get("tolerance") or {}
    return MetricComparison(
        metric=d["metric"], unit=d.get("unit", ""), direction=Direction(d["direction"]),
        baseline=d.get("baseline"), current=d.get("current"), change=d.get("change"),
        delta=d.get("delta"), tolerance=Tolerance(rel=tol.get("rel"), abs=tol.get("abs")),
        verdict=Verdict(d["verdict"]), gating=d.get("gating", True), p_value=d.get("p_value"),
        ci_low=d.get("ci_low"), ci_high=d.get("ci_high"), note=d.get("note", ""),
    )


def results_from_report(doc: Mapping[str, Any], where: str = "perfgate-report.json") -> list[WorkloadResult]:
    """WorkloadResults back from a report document; ``where`` names it in error messages."""
    version = doc.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PerfgateError(f"{where}: schema_version {version!r} is not supported "
                            f"(this perfgate reads {SCHEMA_VERSION})")
    out = []
    for d in doc.get("results", []):
        machine = d.get("machine")
        out.append(WorkloadResult(
            workload=d["workload"], verdict=Verdict(d["verdict"]),
            comparisons=[_comparison_from(c) for c in d.get("comparisons", [])],
            machine=MachineInfo(**machine) if machine else None,
            baseline_path=Path(d["baseline_path"]) if d.get("baseline_path") else None,
            baseline_step_times_ms=list(d.get("baseline_step_times_ms", [])),
            run_dir=Path(d["run_dir"]) if d.get("run_dir") else None,
            error=d.get("error"), message=d.get("message", ""), variant=d.get("variant"),
            wall_s=d.get("wall_s"), extra={**d.get("extra", {}), "analyses": d.get("analyses", [])},
        ))
    return out
