"""``perfgate-report.json``: everything a later step (``perfgate report``, a dashboard) needs.

Shape (schema version :data:`SCHEMA_VERSION`)::

    {"schema_version": 1, "perfgate_version": "...", "created_utc": "...",
     "verdict": "REGRESSED", "failed": true,
     "counts": {"PASS": 2, "REGRESSED": 1},
     "results": [{"record_version", "workload", "variant", "name", "verdict", "failed", "strict", "message", "error",
                  "run_dir", "baseline_path", "wall_s", "machine": {...} | null,
                  "baseline_step_times_ms": [...], "comparisons": [{...}], "analyses": [{...}],
                  "extra": {...}}]}

Each result is a result record (``result_dict``; ``result.json`` holds one), of the record schema
(perfgate.records.version, docs/schema.md); the report's ``schema_version`` is the same version.
``results_from_report`` reads the ``results`` back into WorkloadResults, their analyses and profile
launch included (``Analysis.from_dict``), their notes from the ``message`` (records/notes.py, the one place
that reads a message's prose): a report re-rendered from it says what the run's said.
"""
from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any

from perfgate import __version__
from perfgate.errors import PerfgateError
from perfgate.records.model import (
    Analysis, Direction, LookRecord, MachineInfo, MetricComparison, Tolerance, Verdict, WorkloadResult,
)
from perfgate.records.diagnosis import Attribution
from perfgate.records.confirmation import Confirmation
from perfgate.records.noise import NoiseReport
from perfgate.records.notes import ATTRIBUTION, Note, notes_from_message
from perfgate.records.safe_names import RULE, is_safe_name
from perfgate.records.staleness import Staleness
from perfgate.records.version import RECORD_VERSION, VERSION_KEY, check_record_version
from perfgate.report.digest import result_message
from perfgate.report.resources import resources_dict

#: The report is a list of result records: its version is theirs (perfgate.records.version).
SCHEMA_VERSION = RECORD_VERSION
_SEVERITY = (Verdict.ERROR, Verdict.REGRESSED, Verdict.INCONCLUSIVE, Verdict.NO_DATA,
             Verdict.NEW, Verdict.IMPROVED, Verdict.PASS)


def overall_verdict(results: Sequence[WorkloadResult]) -> Verdict:
    """The most severe verdict among ``results`` (PASS for none)."""
    present = {r.verdict for r in results}
    return next((v for v in _SEVERITY if v in present), Verdict.PASS)


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data: dataclasses, paths and enums converted, and every ``metrics``
    mapping without its non-finite entries (a metric is there with a number, or absent: a reader
    refuses NaN, perfgate.baselines.store.measured_number)."""
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


#: The record of one workload's gate run, in its run folder.
RESULT_FILE = "result.json"


def write_result(result: WorkloadResult) -> Path:
    """``result_dict`` of ``result`` as ``<run_dir>/result.json``, the values of this environment's
    secrets redacted; OSError where it cannot be written."""
    import json
    import os

    from perfgate.system.secrets import redact_text, secret_values

    assert result.run_dir is not None
    text = redact_text(json.dumps(result_dict(result), indent=2, sort_keys=True, default=str) + "\n",
                       secret_values(os.environ))
    path = Path(result.run_dir) / RESULT_FILE
    path.write_text(text)
    return path


def result_dict(r: WorkloadResult) -> dict[str, Any]:
    """A WorkloadResult as JSON-ready data (analyses via ``Analysis.to_dict()``)."""
    return _jsonable({
        VERSION_KEY: RECORD_VERSION, "workload": r.workload, "variant": r.variant, "name": r.name,
        "verdict": r.verdict, "failed": r.failed, "strict": r.strict,
        "message": result_message(r), "error": r.error,
        "run_dir": r.run_dir, "baseline_path": r.baseline_path, "wall_s": r.wall_s,
        "machine": None if r.machine is None else asdict(r.machine),
        "baseline_step_times_ms": list(r.baseline_step_times_ms),
        "comparisons": [asdict(c) for c in r.comparisons],
        "analyses": [a.to_dict() for a in r.analyses],
        "profile": None if r.profile is None else r.profile.to_dict(),
        "resources": resources_dict(r),
        "extra": _extra_dict(r),
    })


def _extra_dict(r: WorkloadResult) -> dict[str, Any]:
    """A result record's ``extra``: what the gate run says besides its verdict (the keys a result
    without it leaves out), and the keys of a newer perfgate kept as read."""
    records = {"provenance": r.provenance, "noise": r.noise, "attribution": r.attribution,
               "confirmation": r.confirmation}
    own = {"record_command": r.record_command, "looks": [lk.to_dict() for lk in r.looks] or None,
           "stopped": r.stopped, "baseline_updated": r.baseline_updated or None,
           **{k: v.to_dict() for k, v in records.items() if v is not None}}
    return {**r.extra, **{k: v for k, v in own.items() if v is not None}}


def _extra_from(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``_extra_dict`` reversed: the WorkloadResult fields of a record's ``extra``; a key whose
    value is not of its kind stays in ``extra``, as read (written back unchanged)."""
    rest, out = dict(extra), {}
    for key in ("record_command", "stopped"):
        if isinstance(rest.get(key), str):
            out[key] = rest.pop(key)
    for key, record in (("provenance", Staleness), ("noise", NoiseReport), ("attribution", Attribution),
                        ("confirmation", Confirmation)):
        if (found := record.from_dict(rest.get(key))) is not None:
            out[key], _ = found, rest.pop(key)
    if rest.get("baseline_updated") is True:
        out["baseline_updated"] = rest.pop("baseline_updated")
    looks = [LookRecord.from_dict(lk) for lk in rest.get("looks") or ()] if isinstance(rest.get("looks"), list) else []
    if looks and all(lk is not None for lk in looks):
        out["looks"], _ = tuple(looks), rest.pop("looks")
    return {**out, "extra": rest}


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


class _Fields:
    """Typed reads from one JSON object of a report; errors name the file and the field path."""

    def __init__(self, doc: Any, where: str, path: str) -> None:
        if not isinstance(doc, Mapping):
            raise PerfgateError(f"{where}: {path}: expected an object, got {type(doc).__name__}")
        self.doc, self.where, self.path = doc, where, path

    def fail(self, key: str, problem: str) -> PerfgateError:
        return PerfgateError(f"{self.where}: {self.path}.{key}: {problem}")

    def get(self, key: str, kinds: tuple[type, ...], default: Any = None, *, required: bool = False) -> Any:
        if key not in self.doc or self.doc[key] is None:
            if required:
                raise self.fail(key, "missing")
            return default
        value = self.doc[key]
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join("number" if k in (int, float) else k.__name__ for k in dict.fromkeys(kinds))
            raise self.fail(key, f"expected {names}, got {value!r}")
        return value

    def number(self, key: str, *, allow_inf: bool = False, non_negative: bool = False,
               required: bool = False) -> float | None:
        value = self.get(key, (int, float), required=required)
        if value is None:
            return None
        if math.isnan(value) or (math.isinf(value) and not allow_inf) or (non_negative and value < 0):
            raise self.fail(key, f"expected a finite{', non-negative' if non_negative else ''} number, got {value!r}")
        return float(value)

    def enum(self, key: str, kind: type[Verdict] | type[Direction]) -> Any:
        value = self.get(key, (str,), required=True)
        try:
            return kind(value)
        except ValueError:
            raise self.fail(key, f"{value!r} is not one of {', '.join(m.value for m in kind)}") from None

    def name(self, key: str, *, required: bool = False) -> str | None:
        value = self.get(key, (str,), required=required)
        if value is not None and not is_safe_name(value):
            raise self.fail(key, f"{value!r} is not a safe name ({RULE})")
        return value


def _comparison_from(f: _Fields) -> MetricComparison:
    tol = _Fields(f.doc.get("tolerance") or {}, f.where, f"{f.path}.tolerance")
    return MetricComparison(
        metric=f.get("metric", (str,), required=True), unit=f.get("unit", (str,), ""),
        direction=f.enum("direction", Direction),
        baseline=f.number("baseline"), current=f.number("current"), change=f.number("change"),
        delta=f.number("delta"),
        tolerance=Tolerance(rel=tol.number("rel", allow_inf=True, non_negative=True),
                            abs=tol.number("abs", non_negative=True)),
        verdict=f.enum("verdict", Verdict), gating=f.get("gating", (bool,), True),
        p_value=f.number("p_value"), ci_low=f.number("ci_low"), ci_high=f.number("ci_high"),
        note=f.get("note", (str,), ""),
    )


def _machine_from(f: _Fields) -> MachineInfo:
    known = {x.name for x in fields(MachineInfo)}
    unknown = sorted(set(f.doc) - known)
    if unknown:
        raise f.fail(unknown[0], f"unknown key (known: {', '.join(sorted(known))})")
    values = {k: f.get(k, (str,)) for k in known if k != "gpu_count"}
    values["machine_class"] = f.name("machine_class", required=True)
    count = f.number("gpu_count", non_negative=True)
    return MachineInfo(**values, gpu_count=int(count or 0))


def _result_from(f: _Fields) -> WorkloadResult:
    """The reverse of ``result_dict`` (a result record: perfgate.records.version)."""
    check_record_version(f.doc, f"{f.where}: {f.path}")
    verdict = f.enum("verdict", Verdict)
    machine = f.get("machine", (dict,))
    comparisons = f.get("comparisons", (list,), [])
    steps = f.get("baseline_step_times_ms", (list,), [])
    step_fields = _Fields({str(k): v for k, v in enumerate(steps)}, f.where, f"{f.path}.baseline_step_times_ms")
    extra = _extra_from(f.get("extra", (dict,), {}))
    return WorkloadResult(
        workload=f.name("workload", required=True) or "", verdict=verdict,
        comparisons=[_comparison_from(_Fields(c, f.where, f"{f.path}.comparisons[{k}]"))
                     for k, c in enumerate(comparisons)],
        machine=_machine_from(_Fields(machine, f.where, f"{f.path}.machine")) if machine else None,
        baseline_path=Path(p) if (p := f.get("baseline_path", (str,))) else None,
        baseline_step_times_ms=[float(step_fields.number(str(k), non_negative=True, required=True) or 0.0)
                                for k in range(len(steps))],   # a null is an error, never a step of 0 ms
        run_dir=Path(p) if (p := f.get("run_dir", (str,))) else None,
        error=f.get("error", (str,)), notes=_notes_from(f.get("message", (str,), ""), extra.get("attribution")),
        variant=f.name("variant"),
        wall_s=f.number("wall_s", non_negative=True),
        # reports from before "strict" say a strict NEW failed only by "failed"
        strict=f.get("strict", (bool,), False) or (verdict is Verdict.NEW and f.get("failed", (bool,), False)),
        **extra,
        analyses=[_analysis_from(a, f, f"analyses[{k}]") for k, a in enumerate(f.get("analyses", (list,), []))],
        profile=_analysis_from(p, f, "profile") if (p := f.get("profile", (dict,))) else None,
    )


def _notes_from(message: str, attribution: Attribution | None) -> tuple[Note, ...]:
    """The notes of a record's ``"message"``, but the account of the change where its record was
    read too (``result_message`` renders it from the record, at the message's end)."""
    if attribution is None:
        return notes_from_message(message)
    from perfgate.diagnosis.render import render_attribution_text   # the diagnosis (numpy) only for an account

    account = render_attribution_text(attribution)
    if message.endswith(account):
        return notes_from_message(message[:-len(account)].removesuffix("\n"))
    return tuple(n for n in notes_from_message(message) if n.severity != ATTRIBUTION)   # another perfgate's wording


def _analysis_from(record: Any, f: _Fields, key: str) -> Analysis:
    """An analysis record of a result, read back (``Analysis.from_dict``); PerfgateError naming it."""
    where = f"{f.where}: {f.path}.{key}"
    if not isinstance(record, Mapping):
        raise PerfgateError(f"{where}: expected an object, got {type(record).__name__}")
    try:
        return Analysis.from_dict(record, where)
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise PerfgateError(f"{where}: not an analysis record ({type(exc).__name__}: {exc})") from None


def results_from_report(doc: Any, where: str = "perfgate-report.json") -> list[WorkloadResult]:
    """WorkloadResults back from a report document, checked against its schema (kinds, known
    verdicts and directions, finite numbers, safe names); PerfgateError names ``where`` and the
    field (``results[0].verdict: 'BOGUS' is not one of PASS, ...``)."""
    top = _Fields(doc, where, "document")
    version = doc.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise PerfgateError(f"{where}: schema_version {version!r} is not supported "
                            f"(this perfgate reads 1 to {SCHEMA_VERSION})")
    results = top.get("results", (list,), required=True)
    return [_result_from(_Fields(d, where, f"results[{k}]")) for k, d in enumerate(results)]
