"""What a gate run says besides its verdict is typed on WorkloadResult (record_command, looks,
stopped, baseline_updated, provenance, noise, attribution); a result record writes it under
``"extra"`` as it always did, and reads it back into the same fields."""
from __future__ import annotations

from perfgate.records.model import LookRecord, Verdict, WorkloadResult
from perfgate.report.json_report import render_report_json, results_from_report

EXTRA = {"record_command": "perfgate baseline update w",
         "provenance": {"code": ["a.py changed"], "environment": [], "unknown": None, "text": "other code: a.py changed"},
         "looks": [{"launches": 1, "verdict": "INCONCLUSIVE", "elapsed_s": 1.5},
                   {"launches": 2, "verdict": "REGRESSED", "elapsed_s": 3.25}],
         "stopped": "decided", "noise": {"metric": "step_time_ms", "noise": 0.01, "n_baseline": 3},
         "attribution": {"first_reason": "forward +2.00 ms/step"}}


def test_the_typed_fields_are_the_records_extra_and_read_back() -> None:
    result = WorkloadResult(workload="w", verdict=Verdict.REGRESSED, record_command=EXTRA["record_command"],
                            provenance=EXTRA["provenance"], stopped="decided", noise=EXTRA["noise"],
                            looks=(LookRecord(1, "INCONCLUSIVE", 1.5), LookRecord(2, "REGRESSED", 3.25)),
                            attribution=EXTRA["attribution"])
    doc = render_report_json([result])
    assert doc["results"][0]["extra"] == EXTRA
    back, = results_from_report(doc)
    assert back == result and back.extra == {}


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
