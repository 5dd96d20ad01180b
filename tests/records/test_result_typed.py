"""What a gate run says besides its verdict is typed on WorkloadResult (record_command, looks,
stopped, baseline_updated, provenance, noise, attribution); a result record writes it under
``"extra"`` as it always did, and reads it back into the same fields."""
from __future__ import annotations

from perfgate.records.diagnosis import Attribution, Finding, KernelDelta, PhaseDelta, Reason
from perfgate.records.model import LookRecord, Verdict, WorkloadResult
from perfgate.records.noise import NoiseReport
from perfgate.records.staleness import Staleness
from perfgate.report.json_report import render_report_json, results_from_report

STALE = Staleness(code=("a.py changed",), unknown="no commit")
NOISE = NoiseReport(metric="step_time_ms", noise=0.01, n_baseline=3, max_launches=10, alpha_per_look=0.0023,
                    tolerance_rel=0.03, detectable_change=None)
ATTRIBUTION = Attribution(
    step_mean_delta_ms=2.5, step_median_delta_ms=2.0, phase_deltas=(PhaseDelta("forward", 10.0, 12.5),),
    unexplained_delta_ms=0.0, gpu_idle_delta_ms=None, idle_by_phase_delta_ms={"forward": 0.5},
    new_findings=(Finding("syncs", "warning", "m", ("e",), "s", phases=("forward",), impact_ms=1.0),),
    resolved_findings=(), kernel_deltas=(KernelDelta("gemm", 2.0, 1.0, 2.5),), first_reason="forward +2.50 ms/step",
    regressed_metrics=("step_time_ms",), reasons=(Reason("syncs", "forward", 2.0, "two more syncs"),),
    explained_ms=2.0, software_explains=(1,))
EXTRA = {"record_command": "perfgate baseline update w", "provenance": STALE.to_dict(),
         "looks": [{"launches": 1, "verdict": "INCONCLUSIVE", "elapsed_s": 1.5},
                   {"launches": 2, "verdict": "REGRESSED", "elapsed_s": 3.25}],
         "stopped": "decided", "noise": NOISE.to_dict(), "attribution": ATTRIBUTION.to_dict()}


def test_the_typed_fields_are_the_records_extra_and_read_back() -> None:
    result = WorkloadResult(workload="w", verdict=Verdict.REGRESSED, record_command=EXTRA["record_command"],
                            provenance=STALE, stopped="decided", noise=NOISE,
                            looks=(LookRecord(1, "INCONCLUSIVE", 1.5), LookRecord(2, "REGRESSED", 3.25)),
                            attribution=ATTRIBUTION)
    doc = render_report_json([result])
    assert doc["results"][0]["extra"] == EXTRA
    assert EXTRA["provenance"]["text"] == "the baseline was recorded from other code: a.py changed (no commit)"
    assert EXTRA["attribution"]["phase_deltas"][0]["delta_ms"] == 2.5
    back, = results_from_report(doc)
    assert back == result and back.extra == {}


def test_a_record_that_would_not_be_written_back_as_read_stays_in_extra() -> None:
    """A record is read into its type only when writing it again gives the same JSON: a derived
    value that disagrees, a missing or unknown key, a value of another kind stay in ``extra``."""
    attribution = {**EXTRA["attribution"], "phase_deltas": [{"name": "forward", "baseline_ms": 10.0,
                                                              "current_ms": 12.5, "delta_ms": 9.0}]}
    extra = {"provenance": {**EXTRA["provenance"], "text": "other words"},
             "noise": {**EXTRA["noise"], "n_baseline": 3.0},
             "attribution": attribution}
    back, = results_from_report(render_report_json([WorkloadResult(workload="w", verdict=Verdict.PASS, extra=extra)]))
    assert (back.provenance, back.noise, back.attribution) == (None, None, None) and back.extra == extra
    unknown = {"noise": {**EXTRA["noise"], "newer": 1}, "attribution": {k: v for k, v in EXTRA["attribution"].items()
                                                                        if k != "cause"}}
    back, = results_from_report(render_report_json([WorkloadResult(workload="w", verdict=Verdict.PASS, extra=unknown)]))
    assert (back.noise, back.attribution) == (None, None) and back.extra == unknown


def test_a_recording_says_so_and_a_result_without_the_facts_writes_none_of_them() -> None:
    recorded = WorkloadResult(workload="w", verdict=Verdict.PASS, baseline_updated=True)
    assert render_report_json([recorded])["results"][0]["extra"] == {"baseline_updated": True}
    assert render_report_json([WorkloadResult(workload="w", verdict=Verdict.ERROR)])["results"][0]["extra"] == {}


def test_keys_of_another_kind_or_of_a_newer_perfgate_are_kept_as_read() -> None:
    extra = {"looks": [{"launches": 1, "verdict": "PASS"}], "baseline_updated": False, "stopped": 3,
             "noise": "loud", "newer": {"x": 1}}
    doc = render_report_json([WorkloadResult(workload="w", verdict=Verdict.PASS, extra=extra)])
    back, = results_from_report(doc)
    assert back.looks == () and not back.baseline_updated and back.stopped is None and back.noise is None
    assert back.extra == extra and render_report_json([back])["results"][0]["extra"] == extra
