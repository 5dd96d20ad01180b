"""A result's notes (records/notes.py): typed, each with a severity; the result record's
``"message"`` keeps the lines it always had, and reads back into the same notes."""
from __future__ import annotations

from hypothesis import given, strategies as st

from perfgate.records.model import Verdict, WorkloadResult
from perfgate.records.notes import (
    ATTRIBUTION, NOTE, SUMMARY, TO_DECIDE, WARNING, WHY, Note, message_text, notes_from_message,
)
from perfgate.report.json_report import render_report_json, results_from_report
from perfgate.report.terminal import summary_notes
from perfgate.report.digest import result_message

NOTES = (Note(WARNING, "the baseline measured other code: commit abc (now def)"),
         Note(SUMMARY, "INCONCLUSIVE: step_time_ms +6.0 % beyond tolerance but not significant [5 vs 3 launches]"),
         Note(NOTE, "launch 0: measured steps are not stable (drift)"),
         Note(WHY, "the change is beyond tolerance but not significant after 3 launches"),
         Note(TO_DECIDE, "raise max_launches (now 3) or budget_s"),
         Note(WARNING, "w is too noisy for its step-time tolerance of 5 %"),
         Note(ATTRIBUTION, "first reason: forward +2.00 ms/step\nmean step +2.00 ms/step\nnote: the baseline keeps no GPU detail"))


def test_the_message_is_the_notes_lines_and_reads_back_into_the_same_notes() -> None:
    message = message_text(NOTES)
    assert message.splitlines()[:2] == [f"warning: {NOTES[0].text}", NOTES[1].text]
    assert "\nwhy: the change" in message and "\nto decide: raise" in message and "\nnote: launch 0" in message
    assert notes_from_message(message) == NOTES
    result = WorkloadResult(workload="w", verdict=Verdict.INCONCLUSIVE, notes=NOTES)
    assert result_message(result) == message
    back, = results_from_report(render_report_json([result]))
    assert back.notes == NOTES and render_report_json([back])["results"][0]["message"] == message


def test_a_passing_result_shows_its_warnings_only() -> None:
    result = WorkloadResult(workload="w", verdict=Verdict.IMPROVED, notes=NOTES)
    assert summary_notes([result]) == [f"w: warning: {NOTES[0].text}", f"w: warning: {NOTES[5].text}"]


@given(st.lists(st.sampled_from(["a", " ", "\n", "\r", "warning: ", "note: ", "why: ", "to decide: ",
                                 "first reason: ", "baseline: "]), max_size=40).map("".join))
def test_any_message_reads_back_into_notes_that_write_it_again(message: str) -> None:
    assert message_text(notes_from_message(message)) == message
