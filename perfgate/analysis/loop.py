"""The loop's shape, read from what perfgate's autostep hooks recorded (perfgate/capture/autostep/install.py): which
event marks the end of one training iteration where the workload has no step ranges of its own,
the periods that are interludes rather than iterations, and the samples each iteration takes.

Iteration markers, the first one present wins (``steps.find_steps`` tries the workload's own step
ranges and nsys's PyTorch annotation before these):

1. **Optimizer steps** (marks ``perfgate/optimizer_step:<k>``, and ``perfgate/optimizer_skipped:<k>``
   where GradScaler skipped a step): one iteration is one pass through the cycle of the optimizers'
   steps. One optimizer: each step ends an iteration. A GAN's discriminator and generator steps
   alternate: the cycle is (D, G) and each G step ends an iteration; a critic stepped five times per
   generator step: a cycle of six. The cycle is the shortest period (up to ``MAX_CYCLE`` steps) that
   at least ``CYCLE_MATCH`` of the sequence repeats; an optimizer that steps rarely (a probe every
   100 steps) does not make one, it falls inside an iteration.
2. **Backward passes** (``perfgate/backward`` ranges), where no optimizer stepped (parameters
   updated by hand): each backward pass's end ends an iteration.
3. **DataLoader batches** (``perfgate/data_load`` ranges), where there was no backward pass either.

Captures made before the marks existed end an iteration at each ``perfgate/optimizer`` range
(``steps.ITERATION_MARKERS``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from perfgate.analysis.intervals import top_level_mask
from perfgate.records.autostep_ranges import (
    BACKWARD, DATA_LOAD, INTERLUDE_RANGES, MARK_BATCH, MARK_INPUT, MARK_LOADER, MARK_OPTIMIZER_NEW,
    MARK_OPTIMIZER_SKIPPED, MARK_OPTIMIZER_STEP, PREFIX,
)
from perfgate.trace.columns import Columns, first_seen

__all__ = ["Boundaries", "CYCLE_MATCH", "MAX_CYCLE", "batch_sizes", "find_boundaries", "input_function",
           "interludes", "loader_in_use", "loader_workers", "optimizer_cycle", "samples_per_iteration"]

MAX_CYCLE = 8          # the longest cycle of optimizer steps taken as one iteration
CYCLE_MATCH = 0.9      # the share of steps that must repeat the cycle's order
SOURCE = "autostep"


@dataclass(frozen=True, eq=False)
class Boundaries:
    """Where iterations end, per thread: ``time`` (ns) and ``global_tid`` in time order per thread;
    ``label``: the steps' name; ``description``: which marker was chosen and why (for the output)."""

    label: str
    description: str
    time: np.ndarray
    global_tid: np.ndarray


def _marks(marks: Columns, name: str) -> Columns:
    """The marks ``<name>:...``, with ``value``: the text after ``<name>:``."""
    prefix = name + ":"
    keep = np.array([isinstance(t, str) and t.startswith(prefix) for t in marks["text"]], dtype=bool)
    rows = marks.take(keep)
    return rows.assign(value=np.array([t[len(prefix):] for t in rows["text"]], dtype=object))


def optimizer_cycle(numbers: np.ndarray) -> int:
    """The period of a sequence of optimizer numbers: the smallest ``p`` <= MAX_CYCLE with
    ``numbers[i] == numbers[i + p]`` for at least CYCLE_MATCH of the positions, 0 when none is."""
    n = numbers.size
    for p in range(1, MAX_CYCLE + 1):
        if n < 2 * p:
            break
        if np.count_nonzero(numbers[:-p] == numbers[p:]) >= CYCLE_MATCH * (n - p):
            return p
    return 0


def _cycle_ends(numbers: np.ndarray) -> tuple[np.ndarray, int]:
    """(which steps end an iteration, the cycle's length; 0: no cycle, every step ends one). Where
    the cycle's last optimizer steps once per cycle, each of its steps ends an iteration (a missing
    or extra step elsewhere does not shift the iterations); else every p-th step does."""
    p = optimizer_cycle(numbers)
    if p <= 1:
        return np.ones(numbers.size, dtype=bool), p
    last = numbers[p - 1]
    if np.count_nonzero(numbers[:p] == last) == 1:
        return numbers == last, p
    return np.arange(numbers.size) % p == p - 1, p


def _optimizer_boundaries(marks: Columns) -> Boundaries | None:
    steps = Columns.concat([_marks(marks, MARK_OPTIMIZER_STEP).assign(skipped=False),
                            _marks(marks, MARK_OPTIMIZER_SKIPPED).assign(skipped=True)])
    if steps.empty:
        return None
    steps = steps.sorted_by("global_tid", "start")
    numbers = np.array([int(v) if str(v).isdigit() else 0 for v in steps["value"]], dtype=np.int64)
    classes: dict[int, str] = {}
    for value in _marks(marks, MARK_OPTIMIZER_NEW)["value"]:
        k, _, cls = str(value).partition(":")
        if k.isdigit():
            classes.setdefault(int(k), cls or "optimizer")
    tid = steps["global_tid"]
    ends = np.zeros(len(steps), dtype=bool)
    cycles = []
    for thread in first_seen(tid):
        mine = np.flatnonzero(tid == thread)
        ends[mine], p = _cycle_ends(numbers[mine])
        cycles.append((p, numbers[mine]))
    p, seq = max(cycles, key=lambda c: c[1].size)        # the thread that stepped most describes it
    description = _describe_cycle(p, seq, classes)
    skipped = int(np.count_nonzero(steps["skipped"]))
    if skipped:
        description += f"; {skipped} step{'s' if skipped != 1 else ''} skipped by GradScaler (inf/NaN) still end iterations"
    return Boundaries("optimizer step", description, steps["start"][ends], tid[ends])


def _name(k: int, classes: dict[int, str]) -> str:
    return f"{classes.get(k, 'optimizer')} #{k}"


def _describe_cycle(p: int, seq: np.ndarray, classes: dict[int, str]) -> str:
    distinct = [int(k) for k in first_seen(seq)]
    head = "perfgate's optimizer hook (no step ranges in the workload): "
    if len(distinct) == 1:
        return head + f"one iteration per optimizer step ({_name(distinct[0], classes)})"
    if p == 0:
        return head + (f"one iteration per optimizer step: the steps of {', '.join(_name(k, classes) for k in distinct)} "
                       f"follow no cycle of up to {MAX_CYCLE} steps")
    if p == 1:
        main = int(seq[0])
        others = ", ".join(f"{_name(k, classes)} ({int(np.count_nonzero(seq == k))} of {seq.size} steps)"
                           for k in distinct if k != main)
        return head + f"one iteration per step of {_name(main, classes)}; {others} step inside iterations"
    cycle = seq[:p]
    parts = []
    for k in first_seen(cycle):
        times = int(np.count_nonzero(cycle == k))
        parts.append(_name(int(k), classes) + (f" x{times}" if times > 1 else ""))
    return head + (f"one iteration = one pass through the optimizers' cycle {', '.join(parts)} "
                   f"(it ends at each step of {_name(int(cycle[-1]), classes)})")


def _range_ends(nvtx: Columns, name: str) -> Columns:
    """Top-level ranges ``name`` per thread, by end."""
    rows = nvtx.take(np.array([t == name for t in nvtx["text"]], dtype=bool))
    if rows.empty:
        return rows
    rows = rows.take(top_level_mask(rows["start"], rows["end"], rows["global_tid"]))
    return rows.sorted_by("global_tid", "end")


def find_boundaries(nvtx: Columns, marks: Columns) -> Boundaries | None:
    """The iteration marker of perfgate's hooks (the module's docstring), or None."""
    found = _optimizer_boundaries(marks)
    if found is not None:
        return found
    if len(_marks(marks, MARK_LOADER)) == 0 and len(_marks(marks, MARK_BATCH)) == 0 and \
            np.any(nvtx["text"] == "perfgate/optimizer"):
        return None     # a capture from before the marks: steps.ITERATION_MARKERS reads its optimizer ranges
    backward = _range_ends(nvtx, BACKWARD)
    if len(backward):
        return Boundaries("backward", "perfgate's backward hook (no step ranges, no optimizer step: parameters "
                          "updated by hand?): one iteration per backward pass", backward["end"], backward["global_tid"])
    loads = _range_ends(nvtx, DATA_LOAD)
    if len(loads):
        return Boundaries("data_load", "perfgate's DataLoader hook (no step ranges, no optimizer step, no backward "
                          "pass): one iteration per DataLoader batch", loads["end"], loads["global_tid"])
    return None


def interludes(nvtx: Columns, start: np.ndarray, end: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Which periods [start, end) of a process hold an interlude range (evaluation, checkpoint) of
    that process: such a period is not a training iteration."""
    rows = nvtx.take(np.array([t in INTERLUDE_RANGES for t in nvtx["text"]], dtype=bool))
    hit = np.zeros(start.size, dtype=bool)
    for p in first_seen(rows["pid"]) if len(rows) else ():
        mine = rows.take(rows["pid"] == p)
        s, e = mine["start"], mine["end"]
        at = np.flatnonzero(pid == p)
        # overlap: the range starts before the period ends and ends after it starts
        hit[at] = ((s[None, :] < end[at, None]) & (e[None, :] > start[at, None])).any(axis=1)
    return hit


_DIGITS = re.compile(r"\d+")


def batch_sizes(nvtx: Columns, marks: Columns) -> Columns:
    """Each DataLoader batch (top-level ``perfgate/data_load`` range): ``end``, ``pid`` and
    ``size``, the last ``perfgate/batch`` mark of its thread before the range ended (-1: none)."""
    loads = _range_ends(nvtx, DATA_LOAD)
    sizes = np.full(len(loads), -1, dtype=np.int64)
    found = _marks(marks, MARK_BATCH).sorted_by("global_tid", "start")
    if len(loads) and len(found):
        value = np.array([int(v) if _DIGITS.fullmatch(str(v)) else -1 for v in found["value"]], dtype=np.int64)
        for thread in first_seen(found["global_tid"]):
            mine = np.flatnonzero(found["global_tid"] == thread)
            at = np.flatnonzero(loads["global_tid"] == thread)
            k = np.searchsorted(found["start"][mine], loads["end"][at], side="right") - 1
            ok = k >= 0
            sizes[at[ok]] = value[mine][k[ok]]
    return Columns({"end": loads["end"], "pid": loads["pid"], "size": sizes})


def samples_per_iteration(batches: Columns, start: np.ndarray, end: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Samples the DataLoader yielded in each period (start, end] of a process, -1 where a batch of
    that period has no known size (and 0 where it yielded none)."""
    out = np.zeros(start.size, dtype=np.int64)
    for p in first_seen(pid):
        at = np.flatnonzero(pid == p)
        mine = batches.take(batches["pid"] == p).sorted_by("end")
        t, size = mine["end"], mine["size"]
        lo = np.searchsorted(t, start[at], side="right")
        hi = np.searchsorted(t, end[at], side="right")
        total = np.r_[0, np.cumsum(np.maximum(size, 0))]
        unknown = np.r_[0, np.cumsum(size < 0)]
        out[at] = np.where(unknown[hi] - unknown[lo] > 0, -1, total[hi] - total[lo])
    return out


def loader_in_use(marks: Columns, nvtx: Columns) -> bool | None:
    """Whether the program iterated a DataLoader, as autostep's hooks saw it: True with their
    ``perfgate/loader`` marks or ``perfgate/data_load`` ranges (captures from before the marks have
    the ranges), unless a ``perfgate/input`` mark says the ranges are the program's own batch
    function's; False where the hooks ran (optimizer marks, or backward ranges: a loop that updates
    its parameters by hand) and made neither; None without them (no autostep)."""
    if len(_marks(marks, MARK_LOADER)):
        return True
    if len(_marks(marks, MARK_INPUT)):
        return False
    if np.any(nvtx["text"] == DATA_LOAD):
        return True
    if len(_marks(marks, MARK_OPTIMIZER_STEP)) or np.any(nvtx["text"] == BACKWARD):
        return False
    return None


def autostep_marked(marks: Columns) -> bool:
    """Whether autostep's hooks left marks in the capture (``perfgate/<name>:<value>``): hooks of
    that kind mark every DataLoader iterator the program makes (``perfgate/loader``), so where
    none is marked the program made none."""
    return any(isinstance(t, str) and t.startswith(PREFIX) and ":" in t for t in marks["text"])


def input_function(marks: Columns) -> str | None:
    """``<module>.<qualname>`` of the function that makes the program's batches, where autostep found
    one (its ``perfgate/input`` mark), else None."""
    found = _marks(marks, MARK_INPUT)
    return str(found["value"][0]) if len(found) else None


def loader_workers(marks: Columns, window_start: int, window_end: int) -> int | None:
    """``num_workers`` of the DataLoader iterator in use when the measured window began (the last
    one created before it; else the first created inside it); None without ``perfgate/loader`` marks."""
    found = _marks(marks, MARK_LOADER)
    t = found["start"]
    value = [int(v) for v in found["value"] if str(v).isdigit()]
    if len(value) != len(found) or not value:
        return None
    before = np.flatnonzero(t <= window_start)
    if before.size:
        return value[int(before[-1])]
    inside = np.flatnonzero(t <= window_end)
    return value[int(inside[0])] if inside.size else None
