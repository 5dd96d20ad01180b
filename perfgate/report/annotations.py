"""GitHub Actions workflow commands (``::error``/``::warning``) for the workloads that need attention.

GitHub shows at most 10 error and 10 warning annotations per step; the rest are summarised in one
final annotation of the same kind. Escaping follows the workflow-command rules: in messages
``%``, ``\\r`` and ``\\n``; in property values also ``:`` and ``,``.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from perfgate.gate.wording import describe
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.report.digest import artifacts_line, one_line, regressed, result_message

WARNING_VERDICTS = (Verdict.INCONCLUSIVE, Verdict.NEW, Verdict.IMPROVED, Verdict.NO_DATA)
GITHUB_LIMIT_PER_KIND = 10
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")   # \n and \r are escaped below

_WARNING_HINTS = {
    Verdict.INCONCLUSIVE: "the measurement was too noisy to decide; rerun or raise launches",
    Verdict.NEW: "no baseline for this workload on this machine class; record one: `{record}`",
    Verdict.IMPROVED: "faster than the baseline beyond tolerance; refresh the baseline (`{record}`) to lock the gain in",
    Verdict.NO_DATA: "the trace held no measured steps",
}
#: How a result read from a report of a perfgate that did not say records a baseline.
DEFAULT_RECORD = "perfgate baseline update"


def hint(result: WorkloadResult) -> str:
    """What to do about a warning verdict, in the words of the command that ran (its
    ``record_command``, set by the pipeline)."""
    return _WARNING_HINTS[result.verdict].format(record=result.record_command or DEFAULT_RECORD)


def escape_data(text: str) -> str:
    """Escape a workflow-command message."""
    text = _CONTROL.sub(" ", text)   # an escape sequence is no part of a message
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a workflow-command property value (e.g. ``title``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def command(kind: str, title: str, message: str) -> str:
    """One ``::<kind> title=<title>::<message>`` line, escaped."""
    return f"::{kind} title={escape_property(title)}::{escape_data(message)}"


def _kind_lines(kind: str, items: Sequence[tuple[str, str]], limit: int) -> list[str]:
    """At most ``limit`` lines: the first ``limit - 1`` items and one summary of the rest."""
    if limit <= 0 or not items:
        return []
    if len(items) <= limit:
        return [command(kind, t, m) for t, m in items]
    shown, rest = items[: limit - 1], items[limit - 1:]
    names = ", ".join(t.removeprefix("perfgate ") for t, _ in rest)
    summary = command(kind, f"perfgate: {len(rest)} more",
                      f"{len(rest)} more workload(s) not annotated: {names}. See the job summary.")
    return [*(command(kind, t, m) for t, m in shown), summary]


def error_message(result: WorkloadResult) -> str:
    """The body of a workload's ``::error``: the explanation (else what regressed), and where."""
    message = result_message(result)
    if result.verdict is Verdict.ERROR:
        lines = [f"ERROR: {result.error or message or 'the workload failed'}"]
    elif message:
        lines = [message]
    else:
        lines = [f"REGRESSED: {describe(c)}" for c in regressed(result)] or ["REGRESSED"]
    if (where := artifacts_line(result)) is not None:
        lines.append(where)
    return "\n".join(lines)


def render_annotations(results: Sequence[WorkloadResult], max_errors: int = GITHUB_LIMIT_PER_KIND,
                       max_warnings: int = GITHUB_LIMIT_PER_KIND) -> list[str]:
    """``::error`` lines for the workloads that fail (REGRESSED, ERROR, NEW under strict mode) and
    ``::warning`` lines for the other INCONCLUSIVE/NEW/IMPROVED/NO-DATA ones, each kind within its limit."""
    errors = [(f"perfgate {r.name}", error_message(r)) for r in results if r.failed]
    warnings = [(f"perfgate {r.name}", f"{one_line(r, limit=1000)}. {hint(r)}")
                for r in results if not r.failed and r.verdict in WARNING_VERDICTS]
    return _kind_lines("error", errors, max_errors) + _kind_lines("warning", warnings, max_warnings)
