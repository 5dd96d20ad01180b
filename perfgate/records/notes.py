"""The notes of a result (``WorkloadResult.notes``): what its message says, one typed record a
line, each with a severity, so that a renderer picks the warnings by ``note.severity``.

Records layer (stdlib only). A result record keeps today's ``"message"``: :func:`message_text`
writes the notes as the lines it always had (a severity's prefix, then the text; the account of a
change follows them, rendered from its record: perfgate.report.digest.result_message), and
:func:`notes_from_message` reads them back from a message, at the edge that reads result files
(perfgate.report.json_report.results_from_report): the only place a message's prose is parsed.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

#: The verdict's line (the comparison's summary, or what a recording recorded): no prefix.
SUMMARY = "summary"
#: Something a reader must see even when the run passed (a too-noisy workload, a stale baseline).
WARNING = "warning"
#: A launch's own note (a file withheld, a capture taken again, unstable steps, a throttled GPU).
NOTE = "note"
#: Why an INCONCLUSIVE run could not decide, and what to do about it.
WHY = "why"
TO_DECIDE = "to decide"
#: The account of a change (perfgate.diagnosis.render.render_attribution_text), several lines, as a
#: record's ``"message"`` ends with it: a gate run keeps it as its record (``WorkloadResult.attribution``),
#: and reads it back as a note only from a result record that has its text but not its record.
ATTRIBUTION = "attribution"
#: Which comparison decided: the base measured in this job, or why it was not (records/confirmation.py).
CONFIRMATION = "confirmation"

#: Each severity's prefix in a message line; the summary and the attribution have none.
PREFIXES = {WARNING: "warning: ", NOTE: "note: ", WHY: "why: ", TO_DECIDE: "to decide: ",
            CONFIRMATION: "confirmation: "}
SEVERITIES = (SUMMARY, WARNING, NOTE, WHY, TO_DECIDE, ATTRIBUTION, CONFIRMATION)
#: How the attribution's text begins (``baseline: ...`` when the baseline measured other code).
_ATTRIBUTION_STARTS = ("baseline: ", "first reason: ")


@dataclass(frozen=True)
class Note:
    """One note of a result: its severity (one of SEVERITIES) and its text, without the prefix."""

    severity: str
    text: str

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"note severity {self.severity!r} is not one of {', '.join(SEVERITIES)}")

    def line(self) -> str:
        """The note as the message writes it: its severity's prefix, then its text."""
        return PREFIXES.get(self.severity, "") + self.text


def message_text(notes: Iterable[Note]) -> str:
    """The notes' lines, one after the other: a result record's ``"message"`` but for the account of
    the change that follows them (perfgate.report.digest.result_message)."""
    return "\n".join(n.line() for n in notes)


def notes_from_message(message: str) -> tuple[Note, ...]:
    """The notes of a result record's ``"message"`` (``message_text`` reversed: ``message_text``
    of them gives ``message`` back, whatever it holds). A line with a severity's prefix begins a
    note of it; the first other line is the summary; the account of a change (``first reason:``
    after the summary) is one note to the end; any other line continues the note before it."""
    notes: list[Note] = []
    for line in message.split("\n") if message else ():
        last = notes[-1] if notes else None
        severity = next((s for s, p in PREFIXES.items() if line.startswith(p)), None)
        if last is not None and last.severity == ATTRIBUTION:
            notes[-1] = Note(ATTRIBUTION, f"{last.text}\n{line}")
        elif severity is not None:
            notes.append(Note(severity, line[len(PREFIXES[severity]):]))
        elif not any(n.severity == SUMMARY for n in notes):
            notes.append(Note(SUMMARY, line))
        elif line.startswith(_ATTRIBUTION_STARTS):
            notes.append(Note(ATTRIBUTION, line))
        elif last is not None:
            notes[-1] = Note(last.severity, f"{last.text}\n{line}")
    return tuple(notes)
