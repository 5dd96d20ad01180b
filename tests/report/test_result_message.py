"""The account of a change reaches every renderer as its record (``WorkloadResult.attribution``),
rendered at the report stage (perfgate.report.digest.result_message), never as text a stage
upstream made: the terminal, the annotations, the Markdown summary and the result record's
``"message"`` each end with it, and a record read back keeps it once, as its record."""
from __future__ import annotations

from perfgate.diagnosis.render import render_attribution_text
from perfgate.records.diagnosis import Attribution, PhaseDelta
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.records.notes import ATTRIBUTION, SUMMARY, WARNING, Note
from perfgate.report.annotations import error_message
from perfgate.report.digest import result_message
from perfgate.report.json_report import render_report_json, results_from_report
from perfgate.report.markdown import render_markdown
from perfgate.report.terminal import failure_message

ACCOUNT = Attribution(
    step_mean_delta_ms=3.0, step_median_delta_ms=2.5, phase_deltas=(PhaseDelta("data_load", 1.0, 4.0),),
    unexplained_delta_ms=0.0, gpu_idle_delta_ms=None, idle_by_phase_delta_ms={}, new_findings=(),
    resolved_findings=(), kernel_deltas=(), first_reason="data_load +3.00 ms/step", regressed_metrics=("step_time_ms",))
NOTES = (Note(SUMMARY, "REGRESSED: step_time_ms +30.0 %"), Note(WARNING, "communication: 2 -> 3 all-reduces a step"))


def _result() -> WorkloadResult:
    return WorkloadResult(workload="w", verdict=Verdict.REGRESSED, notes=NOTES, attribution=ACCOUNT)


def test_every_renderer_writes_the_account_from_its_record_after_the_notes() -> None:
    account = render_attribution_text(ACCOUNT)
    assert account.startswith("first reason: data_load +3.00 ms/step\n")
    message = result_message(_result())
    assert message == "REGRESSED: step_time_ms +30.0 %\nwarning: communication: 2 -> 3 all-reduces a step\n" + account
    assert message in failure_message(_result())
    assert error_message(_result()).startswith(message)
    assert "\nfirst reason: data_load +3.00 ms/step\n" in render_markdown([_result()])
    assert render_report_json([_result()])["results"][0]["message"] == message
    assert result_message(WorkloadResult(workload="w", verdict=Verdict.PASS, notes=NOTES[:1])) == NOTES[0].text


def test_a_record_read_back_keeps_the_account_once_as_its_record() -> None:
    back, = results_from_report(render_report_json([_result()]))
    assert back.notes == NOTES and back.attribution == ACCOUNT
    assert result_message(back) == result_message(_result())


def test_an_account_in_another_wording_is_replaced_by_the_records() -> None:
    """A record whose message has the account in words this perfgate does not write (another
    version's) but whose ``attribution`` it reads: the account is said once, from the record."""
    doc = render_report_json([_result()])
    doc["results"][0]["message"] = "\n".join([*(n.line() for n in NOTES), "first reason: data loading got slower"])
    back, = results_from_report(doc)
    assert back.notes == NOTES
    assert result_message(back).count("first reason:") == 1
    # without the record, the account stays as the note it was written as
    del doc["results"][0]["extra"]["attribution"]
    old, = results_from_report(doc)
    assert old.attribution is None and old.notes[-1] == Note(ATTRIBUTION, "first reason: data loading got slower")
    assert result_message(old).endswith("first reason: data loading got slower")
