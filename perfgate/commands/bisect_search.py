"""The search of ``perfgate bisect``, apart from git and nsys: which candidate to measure next, what a
verdict says about the culprit's side, and the JSONL log that makes a bisection resumable.

Candidates are the first-parent commits after GOOD up to BAD, oldest first. Each is measured
against GOOD (``measure(commit) -> verdict``): REGRESSED puts it on the bad side, PASS or IMPROVED
on the good side, anything else (INCONCLUSIVE, a commit that fails to run) is skipped as ``git
bisect skip`` does: its nearest untried neighbour in the open range is measured instead. The
culprit is the first commit of the bad side whose first parent is on the good side.
"""
from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.errors import PerfgateError

LOG_FORMAT = "perfgate-bisect"
BAD_SIDE = ("REGRESSED",)
GOOD_SIDE = ("PASS", "IMPROVED")


@dataclass(frozen=True)
class Measurement:
    """One candidate measured against GOOD (a line of the log)."""

    commit: str
    verdict: str
    summary: str = ""
    step_change: float | None = None      # relative change of the step time's geometric mean vs GOOD
    launches_per_side: int = 0
    reused: bool = False                  # read from the log of an earlier run, not measured now
    step_ci: tuple[float, float] | None = None   # the gate's 95 % interval of that change (none: not tested)

    def to_dict(self) -> dict[str, Any]:
        return {"commit": self.commit, "verdict": self.verdict, "summary": self.summary,
                "step_change": self.step_change, "launches_per_side": self.launches_per_side,
                "step_ci": list(self.step_ci) if self.step_ci is not None else None}


@dataclass(frozen=True)
class BisectOutcome:
    """Where the search ended: ``culprit`` (a commit), or none (BAD is not slower than GOOD), or an
    open range when the budget ran out or every commit left in it was skipped."""

    measured: tuple[Measurement, ...]
    culprit: str | None = None
    no_culprit: bool = False
    first_suspect: str | None = None      # unresolved: the culprit is one of suspects
    suspects: tuple[str, ...] = ()
    reason: str = ""
    skipped: tuple[str, ...] = field(default_factory=tuple)

    @property
    def done(self) -> bool:
        return self.culprit is not None or self.no_culprit


def next_candidate(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The index to measure in the open range (lo, hi): its middle, or when that was skipped the
    nearest untried neighbour (the earlier one first); None when every one was skipped."""
    mid = (lo + hi) // 2
    left = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(left, key=lambda i: (abs(i - mid), i)) if left else None


def bisect_commits(commits: Sequence[str], measure: Callable[[str], Measurement], *,
                   known: Mapping[str, Measurement] | None = None,
                   may_measure: Callable[[], bool] = lambda: True) -> BisectOutcome:
    """Binary search over ``commits`` (oldest first, the last one BAD) for the first commit whose
    measurement against GOOD is REGRESSED. ``known`` holds earlier measurements (the log), reused
    without measuring; ``may_measure()`` False (the budget spent) stops before a new measurement."""
    known = dict(known or {})
    measured: list[Measurement] = []

    def verdict_of(commit: str) -> Measurement | None:
        if commit in known:
            found = known[commit]
            found = found if found.reused else Measurement(**{**found.to_dict(), "reused": True})
        elif not may_measure():
            return None
        else:
            found = measure(commit)
            known[commit] = found
        measured.append(found)
        return found

    if not commits:
        return BisectOutcome((), no_culprit=True, reason="GOOD and BAD are the same commit")
    bad = verdict_of(commits[-1])
    if bad is None:
        return BisectOutcome((), reason="the budget was spent before BAD was measured",
                             suspects=tuple(commits), first_suspect=commits[0])
    if bad.verdict not in BAD_SIDE:
        return BisectOutcome(tuple(measured), no_culprit=True,
                             reason=f"BAD is {bad.verdict} against GOOD, not REGRESSED")
    lo, hi = -1, len(commits) - 1
    skipped: set[int] = set()
    while hi - lo > 1:
        index = next_candidate(lo, hi, skipped)
        if index is None:
            return _open(commits, lo, hi, measured, skipped, "every commit left in the range was skipped")
        found = verdict_of(commits[index])
        if found is None:
            return _open(commits, lo, hi, measured, skipped, "the budget (--budget-s) was spent")
        if found.verdict in BAD_SIDE:
            hi = index
        elif found.verdict in GOOD_SIDE:
            lo = index
        else:
            skipped.add(index)
    return BisectOutcome(tuple(measured), culprit=commits[hi],
                         skipped=tuple(commits[i] for i in sorted(skipped)))


def _open(commits: Sequence[str], lo: int, hi: int, measured: list[Measurement], skipped: set[int],
          reason: str) -> BisectOutcome:
    suspects = tuple(commits[lo + 1: hi + 1])
    return BisectOutcome(tuple(measured), first_suspect=suspects[0], suspects=suspects, reason=reason,
                         skipped=tuple(commits[i] for i in sorted(skipped)))


# --------------------------------------------------------------------------- the log


def log_key(good: str, bad: str, workload: str) -> dict[str, str]:
    return {"good": good, "bad": bad, "workload": workload}


def read_log(path: Path, good: str, bad: str, workload: str) -> dict[str, Measurement]:
    """The measurements an earlier ``perfgate bisect`` of the same GOOD, BAD and WORKLOAD appended
    to ``path`` (other bisections' lines are left alone); PerfgateError naming a bad line."""
    if not path.is_file():
        return {}
    key = log_key(good, bad, workload)
    found: dict[str, Measurement] = {}
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not text.strip():
            continue
        try:
            doc = json.loads(text)
            if not isinstance(doc, dict) or doc.get("format") != LOG_FORMAT:
                raise ValueError("not a perfgate bisect line")
            if any(doc.get(k) != v for k, v in key.items()):
                continue
            change, ci = doc.get("step_change"), doc.get("step_ci")
            found[str(doc["commit"])] = Measurement(
                commit=str(doc["commit"]), verdict=str(doc["verdict"]), summary=str(doc.get("summary", "")),
                step_change=float(change) if isinstance(change, (int, float)) else None,
                launches_per_side=int(doc.get("launches_per_side", 0)), reused=True,
                step_ci=(float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None)
        except (ValueError, KeyError, TypeError) as exc:
            raise PerfgateError(f"{path}:{number}: not a perfgate bisect log line ({exc}); "
                                "remove it or pass another --log") from None
    return found


def append_log(path: Path, good: str, bad: str, workload: str, measurement: Measurement) -> None:
    """Append one measurement (a JSON line) to the log, so that a rerun reuses it."""
    line = json.dumps({"format": LOG_FORMAT, **log_key(good, bad, workload), **measurement.to_dict()},
                      sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:
        raise PerfgateError(f"{path}: bisect log not written: {exc.strerror or exc}") from None
