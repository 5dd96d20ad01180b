"""``perfgate history WORKLOAD --changes``: the change points of a history file
(perfgate.gate.change_points), as text lines or a JSON document, and where the chart marks them."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from perfgate.commands.history_entry import Entry
from perfgate.gate.change_points import MAX_PVALUE, MIN_MAGNITUDE, ChangePoint, Run, change_points


def runs_of(entries: Sequence[Entry], metric: str = "step_time_ms") -> list[Run]:
    """One Run per history entry (its launches' values of ``metric``), in the file's order."""
    return [Run(tuple(m[metric] for m in e.launches if m.get(metric, 0) > 0), commit=e.commit,
                time=e.time, machine=e.machine) for e in entries]


def history_changes(entries: Sequence[Entry], *, max_pvalue: float = MAX_PVALUE,
                    min_magnitude: float = MIN_MAGNITUDE) -> list[ChangePoint]:
    """The change points of the step time over ``entries`` (indices count entries)."""
    return change_points(runs_of(entries), max_pvalue=max_pvalue, min_magnitude=min_magnitude)


def render_changes(found: Sequence[ChangePoint], runs: int) -> list[str]:
    """``N change point(s) in R runs`` and one line per change point."""
    head = (f"change points: {len(found)} in {runs} run(s) (Student t p < {MAX_PVALUE} over the launches, "
            f"Bonferroni over the splits; at least {MIN_MAGNITUDE:.0%} step time)")
    if not found:
        return [head, "  none: the step time held over these runs"]
    return [head, *(f"  {c.describe()}" for c in found)]


def changes_document(workload: str, machine_class: str, entries: Sequence[Entry],
                     found: Sequence[ChangePoint]) -> dict[str, Any]:
    """``--changes --format json``: the runs (commit, time, verdict, step time) and the change points."""
    return {"workload": workload, "machine_class": machine_class,
            "max_pvalue": MAX_PVALUE, "min_magnitude": MIN_MAGNITUDE,
            "runs": [{"time": e.time, "commit": e.commit, "kind": e.kind, "verdict": e.verdict,
                      "step_time_ms": e.step_time_ms, "launches": len(e.launches)} for e in entries],
            "change_points": [c.to_dict() for c in found]}
