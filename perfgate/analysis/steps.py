"""Iterations: which NVTX ranges mark training steps, warm-up, and which steps are measured.

A step lasts from the start of its step range to the start of the next step range of the same
process (the *iteration period*, as ``torch.profiler``'s ``ProfilerStep#N`` and nsys's
``nvtx_pace`` recipe count iterations), and, with CUDA traced, until the GPU work it launched has
ended (periods.completion_times); the last step range of each process has no next start and is
left out. The step range's own duration is kept as a reported metric. Where the trace has no
step range of the user's, the iterations end at events that mark the end of each iteration: nsys's
PyTorch annotation's optimizer steps, else what perfgate's autostep hooks recorded (loop.py).
A measured period that holds an evaluation or a checkpoint (autostep's ``perfgate/eval``,
``perfgate/checkpoint``) is an interlude, not an iteration: it is counted apart.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfgate.analysis.intervals import top_level_mask
from perfgate.analysis.loop import Boundaries, find_boundaries, interludes
from perfgate.errors import ConfigError, TraceError
from perfgate.records.autostep_ranges import PREFIX
from perfgate.trace.columns import Columns, descending_order, factorize, run_starts

if TYPE_CHECKING:
    from perfgate.records.steps import StepStats

# Names that common instrumentation gives one training iteration (matched case-insensitively
# against the whole NVTX message, without the domain).
DEFAULT_STEP_PATTERNS: tuple[str, ...] = (
    r"(?:train(?:ing)?[ _-]?)?step(?:[ _#:-]*\d+)?",   # step, train_step, training step, step 12
    r"step[ _#:-]*\d+[ _-]start",                       # Step 3 Start
    r"profilerstep#\d+",                                # torch.profiler's ProfilerStep#N
    r"iter(?:ation)?(?:[ _#:-]*\d+)?",                  # iteration, iter 7
    r"batch(?:[ _#:-]*\d+)?",                           # batch, batch 3
)
DEFAULT_STEP_REGEX = "(?i)(?:" + "|".join(DEFAULT_STEP_PATTERNS) + ")"

#: Prefix of the ranges that perfgate's own hooks emit in the profiled process (perfgate/capture/autostep/install.py).
AUTOSTEP_PREFIX = PREFIX

#: Step sources, in order of preference: the user's step ranges, then ranges that end once per
#: iteration (the optimizer step), each iteration lasting from the end of one to the end of the next:
#: nsys's PyTorch annotation, autostep's marks (loop.py), autostep's optimizer ranges of captures
#: made before the marks existed.
SOURCE_NVTX = "nvtx"
SOURCE_AUTOSTEP = "autostep"
NSYS_PYTORCH = ("nsys-pytorch", r"torch\.optim\.[\w.]*\.step")     # --pytorch=functions-trace (2024.x+)
ITERATION_MARKERS: tuple[tuple[str, str], ...] = (
    NSYS_PYTORCH,
    (SOURCE_AUTOSTEP, re.escape(AUTOSTEP_PREFIX) + r"optimizer"),     # before autostep's marks
)
SOURCE_DESCRIPTIONS = {
    SOURCE_NVTX: "the workload's step ranges",
    "nsys-pytorch": "nsys's PyTorch annotation (--pytorch): one iteration per optimizer step",
    SOURCE_AUTOSTEP: "perfgate's optimizer hook (no NVTX in the workload): one iteration per optimizer step",
}
#: The phase made of the time between one step range's end and the next one's start that no
#: other range on the step's thread covers (data wait and host work outside the step range).
BETWEEN_STEPS = "between_steps"

# a number set off by spaces (and an optional #:=- sign), by #:=- alone, or by one underscore after a
# letter or digit (``batch_7``); the underscores of ``__next__`` stay
_NUMBER = re.compile(r"(?:\s+[#_:=-]*\s*|[#:=-]+\s*|(?<=[A-Za-z0-9])_)\d+\b")
_SPACES = re.compile(r"\s+")


def fold_name(name: str) -> str:
    """Drop per-iteration numbering: ``forward 12`` -> ``forward``, ``Step 3 Start`` ->
    ``Step Start``, ``ProfilerStep#4`` -> ``ProfilerStep``. Digits inside a word (``layer1``,
    ``conv2d``) are kept: only numbers set off by a space, ``#``, ``_``, ``:``, ``=`` or ``-``."""
    folded = _SPACES.sub(" ", _NUMBER.sub("", name)).strip()
    return folded or name


#: The phase that ranges of nsys's PyTorch annotation (``--pytorch=functions-trace``, names seen on
#: nsys 2025.3.1 with torch 2.11) stand for, when they are direct children of an iteration.
NSYS_PYTORCH_PHASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"torch\.utils\.data\.dataloader\._\w*DataLoaderIter\.__next__"), "data_load"),
    (re.compile(r"torch\.Tensor\.to"), "h2d"),
    (re.compile(r"torch\.nn\.modules\.Module\.__call__|torch\.nn\.functional\.\w+"), "forward"),
    (re.compile(r"torch\.autograd\.backward"), "backward"),
    (re.compile(r"torch\.optim\.[\w.]*\.(?:step|zero_grad)"), "optimizer"),
)


def phase_name(name: str) -> str:
    """A phase's name: folded, without the prefix of perfgate's own hook ranges
    (``perfgate/data_load`` -> ``data_load``), nsys's PyTorch function ranges by what they do
    (``torch.autograd.backward`` -> ``backward``)."""
    if name.startswith("torch."):
        for pattern, phase in NSYS_PYTORCH_PHASES:
            if pattern.fullmatch(name):
                return phase
    return fold_name(name.removeprefix(AUTOSTEP_PREFIX))


def compile_step_pattern(pattern: str | None) -> re.Pattern[str]:
    """The step regex (``None``: the defaults). A user pattern must match the whole range name."""
    try:
        return re.compile(DEFAULT_STEP_REGEX if pattern is None else pattern)
    except re.error as exc:
        raise ConfigError(f"step_pattern {pattern!r} is not a valid regular expression: {exc}") from exc


@dataclass(frozen=True, eq=False)
class StepSelection:
    """The steps found in a trace: all of them and the measured ones (after warm-up, with a next
    step). ``measured`` has the nvtx columns plus ``period_end`` (the next step's start);
    ``measured_at``: the position of each measured step in ``all_steps``."""

    name: str                 # folded name of the step range (or of the iteration marker)
    source: str               # SOURCE_NVTX or a marker source ("autostep", "nsys-pytorch")
    all_steps: Columns        # rows of every step, sorted by (pid, start)
    measured: Columns         # the measured steps, with ``period_end``
    warmup_skipped: int       # per process
    warnings: tuple[str, ...]
    measured_at: np.ndarray
    description: str = ""     # which marker ends an iteration, and why (SOURCE_DESCRIPTIONS' words)
    interlude_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # interludes' host periods

    @property
    def window(self) -> tuple[int, int]:
        """Host time of the measured steps: the first one's start to the last period's end."""
        return int(self.measured["start"].min()), int(self.measured["period_end"].max())


def _top_level(rows: Columns) -> Columns:
    return rows.take(top_level_mask(rows["start"], rows["end"], rows["global_tid"]))


def _named(nvtx: Columns, wanted: Callable[[str], bool]) -> np.ndarray:
    """Which rows' message ``wanted`` accepts: one call per distinct message."""
    codes, texts = factorize(nvtx["text"])
    return np.array([wanted(t) for t in texts] + [False], dtype=bool)[codes]


def _top_level_named(nvtx: Columns, wanted: Callable[[str], bool], own: bool = False) -> Columns:
    """Top-most ranges per thread among those whose message ``wanted`` accepts (perfgate's own hook
    ranges only with ``own``), sorted by (pid, start)."""
    rows = nvtx.take(_named(nvtx, lambda t: (own or not t.startswith(AUTOSTEP_PREFIX)) and wanted(t)))
    return _top_level(rows).sorted_by("pid", "start")


def _most_frequent(values: np.ndarray) -> list[tuple[str, int]]:
    """(value, count) pairs, most frequent first, ties ordered as pandas' ``value_counts`` orders
    them (counts in first-seen order, then its descending sort)."""
    codes, distinct = factorize(values)
    counts = np.bincount(codes, minlength=len(distinct))
    return [(distinct[k], int(counts[k])) for k in descending_order(counts)]


def _folded(texts: np.ndarray) -> np.ndarray:
    """``fold_name`` of each message, folded once per distinct message."""
    codes, distinct = factorize(texts)
    return np.array([fold_name(t) for t in distinct] + [""], dtype=object)[codes]


def user_step_ranges(nvtx: Columns, pattern: str | None) -> tuple[str, Columns] | None:
    """The user's step ranges: top-most matching ranges per thread, the most frequent folded name
    when several remain; None when no range matches. perfgate's own hook ranges count only for a
    ``step_pattern`` the user gave (``perfgate/backward``), never for the default names."""
    regex = compile_step_pattern(pattern)
    top = _top_level_named(nvtx, lambda t: bool(regex.fullmatch(t)), own=pattern is not None)
    if top.empty:
        return None
    folded = _folded(top["text"])
    name = _most_frequent(folded)[0][0]
    return name, top.take(folded == name)


def marker_steps(nvtx: Columns, marker: str) -> Columns:
    """Iterations from ranges that end once per iteration: on each thread, one step from the end of
    one marker range to the end of the next (the first marker only opens the first step). The rows
    are synthetic (``row_id`` negative, ``text``/``name`` the marker's folded name)."""
    regex = re.compile(marker)
    cand = nvtx.take(_named(nvtx, lambda t: bool(regex.fullmatch(t))))
    if cand.empty:
        return cand
    top = _top_level(cand).sorted_by("global_tid", "end")
    tid = top["global_tid"]
    same = tid[1:] == tid[:-1]
    ends = top["end"]
    steps = top.take(np.flatnonzero(same) + 1).assign(start=ends[:-1][same])
    label = fold_name(str(top["text"][0]))
    steps = steps.assign(text=label, name=label, row_id=-np.arange(1, len(steps) + 1, dtype=np.int64))
    return steps.sorted_by("pid", "start")


def boundary_steps(b: Boundaries) -> Columns:
    """Step rows between consecutive boundaries of a thread (the first only opens the first step),
    with the NVTX columns (synthetic: ``row_id`` negative, ``text``/``name`` the marker's label)."""
    order = np.lexsort((b.time, b.global_tid))
    t, tid = b.time[order].astype(np.int64), b.global_tid[order].astype(np.int64)
    same = np.flatnonzero(tid[1:] == tid[:-1])
    n = same.size
    rows = Columns({
        "row_id": -np.arange(1, n + 1, dtype=np.int64), "start": t[same], "end": t[same + 1],
        "unterminated": np.zeros(n, dtype=bool), "text": np.full(n, b.label, dtype=object),
        "name": np.full(n, b.label, dtype=object), "style": np.full(n, "StartEnd", dtype=object),
        "global_tid": tid[same + 1], "end_global_tid": np.full(n, -1, dtype=np.int64),
        "domain_id": np.full(n, -1, dtype=np.int64), "pid": (tid[same + 1] >> 24) & 0xFFFFFF,
    })
    return rows.sorted_by("pid", "start")


def find_steps(nvtx: Columns, pattern: str | None, source: str,
               marks: Columns | None = None) -> tuple[str, str, Columns, str]:
    """(name, source, step rows, description): the user's step ranges, else the first marker
    source present (nsys's PyTorch annotation, autostep's marks, autostep's optimizer ranges)."""
    found = user_step_ranges(nvtx, pattern)
    if found is not None:
        return found[0], SOURCE_NVTX, found[1], SOURCE_DESCRIPTIONS[SOURCE_NVTX]
    if pattern is None:
        pytorch = marker_steps(nvtx, NSYS_PYTORCH[1])
        if len(pytorch):
            return str(pytorch["text"][0]), NSYS_PYTORCH[0], pytorch, SOURCE_DESCRIPTIONS[NSYS_PYTORCH[0]]
        boundaries = find_boundaries(nvtx, marks) if marks is not None else None
        if boundaries is not None:
            steps = boundary_steps(boundaries)
            if len(steps):
                return boundaries.label, SOURCE_AUTOSTEP, steps, boundaries.description
        for label, marker in ITERATION_MARKERS[1:]:
            steps = marker_steps(nvtx, marker)
            if len(steps):
                return str(steps["text"][0]), label, steps, SOURCE_DESCRIPTIONS[label]
    raise TraceError(_no_steps_message(nvtx, pattern, source))


def with_period_end(steps: Columns) -> Columns:
    """``steps`` (sorted by pid, start) with ``period_end``: the next step's start in the same
    process, -1 for the last one."""
    pid = steps["pid"]
    start = steps["start"]
    nxt = np.full(len(steps), -1, dtype=np.int64)
    if len(steps) > 1:
        same = pid[1:] == pid[:-1]
        nxt[:-1] = np.where(same, start[1:], -1)
    return steps.assign(period_end=nxt)


def select_steps(nvtx: Columns, pattern: str | None, skip_steps: int, source: str,
                 marks: Columns | None = None) -> StepSelection:
    """Find the steps and drop the first ``skip_steps`` of each process; the measured steps are
    the remaining ones that have a next step (their period ends at its start), but for interludes
    (periods holding an evaluation or a checkpoint), when they are fewer than a third of them."""
    if skip_steps < 0:
        raise ConfigError(f"skip_steps must be >= 0, got {skip_steps}")
    name, origin, steps, description = find_steps(nvtx, pattern, source, marks)
    steps = with_period_end(steps)
    pid = steps["pid"]                                   # sorted: each process's steps are a run
    first = np.flatnonzero(run_starts(pid))
    per_process = np.diff(np.r_[first, pid.size])
    count = np.repeat(per_process, per_process)          # the steps of each row's process
    skip = int(skip_steps)
    warnings: list[str] = []
    fewest = int(per_process.min())
    if fewest < skip + 2:
        reduced = max(0, fewest - 2)
        warnings.append(
            f"only {fewest} '{name}' steps in a process: skipping {reduced} warm-up steps instead of {skip}"
        )
        skip = reduced
    rank = np.arange(pid.size) - np.repeat(first, per_process)
    kept = rank >= skip
    at = np.flatnonzero(kept & (steps["period_end"] >= 0))
    lonely = np.flatnonzero(kept & (count == 1))
    measured = steps.take(at)
    if lonely.size:   # a process with a single step: its range is all there is
        warnings.append(f"{lonely.size} process(es) with a single '{name}' step: measured as the range's duration")
        alone = steps.take(lonely)
        both = Columns.concat([measured, alone.assign(period_end=alone["end"])])
        order = np.lexsort((both["start"], both["pid"]))
        measured, at = both.take(order), np.r_[at, lonely][order]
    apart = interludes(nvtx, measured["start"], measured["period_end"], measured["pid"])
    interlude_ns = np.zeros(0, dtype=np.int64)
    if apart.any() and 3 * np.count_nonzero(apart) < apart.size:
        interlude_ns = (measured["period_end"] - measured["start"])[apart]
        measured, at = measured.take(~apart), at[~apart]
    elif apart.any():
        warnings.append(f"{np.count_nonzero(apart)} of {apart.size} measured '{name}' periods hold an evaluation "
                        "or a checkpoint: too many to be interludes, they are measured as iterations")
    return StepSelection(name, origin, steps, measured, skip, tuple(warnings), at, description, interlude_ns)


def measured_iterations(nvtx: Columns, steps: StepStats, marks: Columns | None = None) -> Columns:
    """The measured steps of an analysis, found again in its trace (same source, same window, the
    interludes left out)."""
    if steps.source == SOURCE_NVTX:
        rows = _top_level_named(nvtx, lambda t: fold_name(t) == steps.range_name, own=True)
    else:
        try:
            rows = find_steps(nvtx, None, "", marks)[2]
        except TraceError:
            rows = nvtx.take(np.zeros(0, dtype=np.int64))
    rows = with_period_end(rows)
    rows = rows.assign(period_end=np.where(rows["period_end"] >= 0, rows["period_end"], rows["end"]))
    rows = rows.take((rows["start"] >= steps.window_start_ns) & (rows["period_end"] <= steps.window_end_ns))
    if steps.interludes:
        rows = rows.take(~interludes(nvtx, rows["start"], rows["period_end"], rows["pid"]))
    return rows


def step_pattern_for(text: str) -> str:
    """A ``step_pattern`` that matches the range ``text`` and its numbered siblings (``batch 7`` ->
    ``batch \\d+``): the text escaped, each number that ``fold_name`` drops matched by ``\\d+``."""
    out, at = [], 0
    for m in _NUMBER.finditer(text):
        digits = re.search(r"\d+$", m.group(0))
        assert digits is not None
        cut = m.start() + digits.start()
        out.append(_escape(text[at:cut]) + r"\d+")
        at = m.end()
    return "".join(out) + _escape(text[at:])


_SPECIAL = re.compile(r"([.^$*+?{}\[\]\\|()])")


def _escape(text: str) -> str:
    """``text`` as a regular expression that matches it alone (only the special characters escaped)."""
    return _SPECIAL.sub(r"\\\1", text)


def _no_steps_message(nvtx: Columns, pattern: str | None, source: str) -> str:
    texts = nvtx["text"]
    codes, distinct = factorize(_folded(texts))
    example = {distinct[c]: texts[i] for i, c in reversed(list(enumerate(codes)))}   # first text of each name
    common = _most_frequent(_folded(texts))[:8]
    # each with the step_pattern that selects it, as a TOML string (what pyproject.toml takes)
    listing = ", ".join(f"{n!r} ({c}; step_pattern = {json.dumps(step_pattern_for(str(example[n])))})" for n, c in common)
    if pattern is None:
        which = ("the default step patterns (step, train_step, iteration, batch N, Step N Start, ProfilerStep#N), "
                 "nor an optimizer-step range of nsys's PyTorch annotation, nor perfgate's autostep events "
                 "(was the capture made with autostep off, or does the workload use no torch.optim optimizer, "
                 "no backward pass and no DataLoader?)")
    else:
        which = f"step_pattern {pattern!r}"
    return (f"{source}: no NVTX range matches {which}. Most frequent ranges: {listing}. "
            "Name the range that marks one iteration: step_pattern in [tool.perfgate.workloads.<name>] for the "
            "gate (perfgate run, pytest --perfgate), --step-pattern for perfgate analyze and compare; it is a "
            "regular expression that must match the whole range name")
