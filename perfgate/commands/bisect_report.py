"""What ``perfgate bisect`` says: the measured candidates with their verdicts, the culprit with its
subject, ``git diff --stat`` and the parent-vs-culprit diagnosis, as terminal text and as Markdown
(``--report FILE``, what the bisect workflow posts to the job summary)."""
from __future__ import annotations

import re
from collections.abc import Mapping

from perfgate.commands.bisect_search import BisectOutcome, Measurement
from perfgate.report.escape import md_cell_text, md_code, md_text


def _change(m: Measurement) -> str:
    return "-" if m.step_change is None else f"{m.step_change * 100:+.1f} %"


def _interval(m: Measurement) -> str:
    """The gate's 95 % interval of the step time's change: how far a PASS is from ruling out a slowdown."""
    return "-" if m.step_ci is None else f"{m.step_ci[0] * 100:+.1f} .. {m.step_ci[1] * 100:+.1f} %"


def _how(m: Measurement) -> str:
    return "from the log" if m.reused else f"{m.launches_per_side} launches per side"


def _headline(workload: str, outcome: BisectOutcome, subjects: Mapping[str, str]) -> str:
    if outcome.culprit is not None:
        return f"culprit: {outcome.culprit[:12]} {subjects.get(outcome.culprit, '')!r}"
    if outcome.no_culprit:
        return f"no culprit: {outcome.reason}"
    first, last = outcome.suspects[0][:12], outcome.suspects[-1][:12]
    return (f"unfinished ({outcome.reason}): the culprit is one of {len(outcome.suspects)} commit(s) "
            f"{first}..{last}; run the same command again to go on")


def render_text(workload: str, good: str, bad: str, outcome: BisectOutcome, subjects: Mapping[str, str],
                diff_stat: str | None, diagnosis: str | None) -> str:
    """The terminal report."""
    fresh = sum(not m.reused for m in outcome.measured)
    lines = [f"perfgate bisect {workload}: GOOD {good[:12]} .. BAD {bad[:12]}: {len(outcome.measured)} candidate(s) "
             f"({fresh} measured now, {len(outcome.measured) - fresh} from the log)"]
    for m in outcome.measured:
        ci = f" (95 % CI {_interval(m)})" if m.step_ci is not None else ""
        lines.append(f"  {m.commit[:12]}  {m.verdict:<12} {_change(m):>9}  {subjects.get(m.commit, '')[:60]}"
                     f"  ({_how(m)}){ci}")
    lines.append(_headline(workload, outcome, subjects))
    if diff_stat:
        lines += ["", "git diff --stat (first parent .. culprit):", diff_stat]
    if diagnosis:
        lines += ["", "diagnosis (first parent vs culprit, one capture each):", diagnosis]
    return "\n".join(lines)


def _fenced(text: str) -> str:
    fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", text)), default=0))
    return f"{fence}text\n{text}\n{fence}"


def render_markdown_report(workload: str, good: str, bad: str, outcome: BisectOutcome, subjects: Mapping[str, str],
                           diff_stat: str | None, diagnosis: str | None) -> str:
    """The Markdown report: headline, the candidates table, the culprit's diff stat and diagnosis."""
    lines = [f"## perfgate bisect: {md_text(workload)}", "",
             f"GOOD {md_code(good[:12])} .. BAD {md_code(bad[:12])}", "",
             f"**{md_text(_headline(workload, outcome, subjects))}**", "",
             "| commit | verdict vs GOOD | step time vs GOOD | its 95 % CI | subject | measured |",
             "|---|---|---|---|---|---|"]
    for m in outcome.measured:
        lines.append(f"| {md_code(m.commit[:12])} | {m.verdict} | {_change(m)} | {_interval(m)} | "
                     f"{md_cell_text(subjects.get(m.commit, '')).replace('|', chr(92) + '|')} | {_how(m)} |")
    if outcome.skipped:
        lines += ["", "Skipped (neither REGRESSED nor PASS): " + ", ".join(md_code(c[:12]) for c in outcome.skipped)]
    if diff_stat:
        lines += ["", "### git diff --stat (first parent .. culprit)", "", _fenced(diff_stat)]
    if diagnosis:
        lines += ["", "### Diagnosis (first parent vs culprit, one capture each)", "", _fenced(diagnosis)]
    return "\n".join(lines) + "\n"
