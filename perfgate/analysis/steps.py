"""Iterations: which NVTX ranges mark training steps, warm-up, the iteration period of each
measured step, and summaries.

A step lasts from the start of its step range to the start of the next step range of the same
process (the *iteration period*, as ``torch.profiler``'s ``ProfilerStep#N`` and nsys's
``nvtx_pace`` recipe count iterations), and, with CUDA traced, until the GPU work it launched has
ended (:func:`completion_times`); the last step range of each process has no next start and is
left out. The step range's own duration is kept as a reported metric. Where the trace has no
step range of the user's, the iterations are found from ranges that mark the end of each
iteration (see ``ITERATION_MARKERS``).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfgate.analysis.intervals import BLOCK, group_sums
from perfgate.columns import Columns, descending_order, factorize, grouped_cummax, previous_max, run_starts
from perfgate.errors import ConfigError, TraceError
from perfgate.model import StepStats, Summary

if TYPE_CHECKING:
    from perfgate.gpu_ops import GpuOps

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

#: Prefix of the ranges that perfgate's own hooks emit in the profiled process (perfgate/autostep.py).
AUTOSTEP_PREFIX = "perfgate/"

#: Step sources, in order of preference: the user's step ranges, then ranges that end once per
#: iteration (the optimizer step), each iteration lasting from the end of one to the end of the next.
SOURCE_NVTX = "nvtx"
ITERATION_MARKERS: tuple[tuple[str, str], ...] = (
    # nsys --pytorch=functions-trace (Nsight Systems 2024.x+): the optimizer's step function
    ("nsys-pytorch", r"torch\.optim\.[\w.]*\.step"),
    # perfgate's own hook (global optimizer step hooks), installed through the environment
    ("autostep", re.escape(AUTOSTEP_PREFIX) + r"optimizer"),
)
SOURCE_DESCRIPTIONS = {
    SOURCE_NVTX: "the workload's step ranges",
    "nsys-pytorch": "nsys's PyTorch annotation (--pytorch): one iteration per optimizer step",
    "autostep": "perfgate's optimizer hook (no NVTX in the workload): one iteration per optimizer step",
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


def summarize(values: np.ndarray | list[float]) -> Summary:
    """count, mean, median, sample stdev (ddof=1), p10/p90 (linear), min, max."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        nan = float("nan")
        return Summary(0, nan, nan, 0.0, nan, nan, nan, nan)
    p10, median, p90 = np.percentile(v, [10, 50, 90])
    return Summary(
        count=int(v.size), mean=float(v.mean()), median=float(median),
        stdev=float(v.std(ddof=1)) if v.size > 1 else 0.0,
        p10=float(p10), p90=float(p90), min=float(v.min()), max=float(v.max()),
    )


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

    @property
    def window(self) -> tuple[int, int]:
        """Host time of the measured steps: the first one's start to the last period's end."""
        return int(self.measured["start"].min()), int(self.measured["period_end"].max())


def top_level_mask(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """True for intervals not contained in another interval of the same thread."""
    order = np.lexsort((-ends, starts, threads))
    e = ends[order]
    new_thread = run_starts(threads[order])
    prev_max = previous_max(e, new_thread)
    top_sorted = new_thread | ~(e <= np.nan_to_num(prev_max, nan=-1))
    out = np.empty(starts.size, dtype=bool)
    out[order] = top_sorted
    return out


def _top_level(rows: Columns) -> Columns:
    return rows.take(top_level_mask(rows["start"], rows["end"], rows["global_tid"]))


def _named(nvtx: Columns, wanted: Callable[[str], bool]) -> np.ndarray:
    """Which rows' message ``wanted`` accepts: one call per distinct message."""
    codes, texts = factorize(nvtx["text"])
    return np.array([wanted(t) for t in texts] + [False], dtype=bool)[codes]


def _top_level_named(nvtx: Columns, wanted: Callable[[str], bool]) -> Columns:
    """Top-most ranges per thread among those whose message ``wanted`` accepts (never perfgate's own
    hook ranges), sorted by (pid, start)."""
    rows = nvtx.take(_named(nvtx, lambda t: not t.startswith(AUTOSTEP_PREFIX) and wanted(t)))
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
    when several remain; None when no range matches. perfgate's own hook ranges never count."""
    regex = compile_step_pattern(pattern)
    top = _top_level_named(nvtx, lambda t: bool(regex.fullmatch(t)))
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


def find_steps(nvtx: Columns, pattern: str | None, source: str) -> tuple[str, str, Columns]:
    """(name, source, step rows): the user's step ranges, else the first marker source present."""
    found = user_step_ranges(nvtx, pattern)
    if found is not None:
        return found[0], SOURCE_NVTX, found[1]
    if pattern is None:
        for label, marker in ITERATION_MARKERS:
            steps = marker_steps(nvtx, marker)
            if len(steps):
                return str(steps["text"][0]), label, steps
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


def select_steps(nvtx: Columns, pattern: str | None, skip_steps: int, source: str) -> StepSelection:
    """Find the steps and drop the first ``skip_steps`` of each process; the measured steps are
    the remaining ones that have a next step (their period ends at its start)."""
    if skip_steps < 0:
        raise ConfigError(f"skip_steps must be >= 0, got {skip_steps}")
    name, origin, steps = find_steps(nvtx, pattern, source)
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
    return StepSelection(name, origin, steps, measured, skip, tuple(warnings), at)


def measured_iterations(nvtx: Columns, steps: StepStats) -> Columns:
    """The measured steps of an analysis, found again in its trace (same source, same window)."""
    if steps.source == SOURCE_NVTX:
        rows = _top_level_named(nvtx, lambda t: fold_name(t) == steps.range_name)
    else:
        marker = dict(ITERATION_MARKERS).get(steps.source)
        rows = marker_steps(nvtx, marker) if marker is not None else nvtx.take(np.zeros(0, dtype=np.int64))
    rows = with_period_end(rows)
    rows = rows.assign(period_end=np.where(rows["period_end"] >= 0, rows["period_end"], rows["end"]))
    return rows.take((rows["start"] >= steps.window_start_ns) & (rows["period_end"] <= steps.window_end_ns))


def completion_times(sel: StepSelection, launches: GpuOps | None) -> tuple[np.ndarray, np.ndarray]:
    """(done before, done) per measured step: when the iteration before it, and the iteration itself,
    were complete. An iteration is complete when the host has reached the next step's start *and*
    the GPU work it launched has finished, at the earliest when the one before it was complete. A
    loop that never waits for the GPU runs ahead of it by up to the launch queue's depth; its host
    periods are then shorter than its iterations while the queue fills, and its last iterations'
    GPU work runs after the host window ends. Without GPU launches, ``done`` is the period end."""
    steps = sel.all_steps
    host_end = np.where(steps["period_end"] >= 0, steps["period_end"], steps["end"])
    done = host_end.astype(np.int64)
    if launches is not None and len(launches) and len(steps):
        # each op to the last step of its process that started at or before its launch; the key is
        # (process rank, time), the time in ns below 2**50 (13 days); ops a block at a time
        step_pid = steps["pid"]
        ranks = np.unique(step_pid)
        step_key = np.searchsorted(ranks, step_pid).astype(np.int64) * (1 << 50) + steps["start"]
        order = np.argsort(step_key, kind="stable")
        sorted_key = step_key[order]
        for at in range(0, len(launches), BLOCK):
            part = slice(at, at + BLOCK)
            traced = launches.api_start[part] >= 0
            op_pid, op_launch = launches.pid[part][traced], launches.api_start[part][traced]
            op_rank = _rank_of(ranks, op_pid)
            mine = op_rank >= 0
            op_key = op_rank[mine].astype(np.int64) * (1 << 50) + op_launch[mine]
            pos = np.searchsorted(sorted_key, op_key, side="right") - 1
            ok = pos >= 0
            idx = order[pos[ok]]
            launched = op_launch[mine][ok]
            same = (step_pid[idx] == op_pid[mine][ok]) & (launched < host_end[idx])
            np.maximum.at(done, idx[same], launches.end[part][traced][mine][ok][same])
    # never before the previous iteration of the same process (steps are sorted by pid, start)
    pid = steps["pid"]
    new_process = run_starts(pid)
    done = grouped_cummax(done, new_process)
    before = np.where(~new_process, np.r_[0, done[:-1]], steps["start"])
    return before[sel.measured_at], done[sel.measured_at]


def _rank_of(ranks: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Each pid's position in the sorted ``ranks``, -1 for a pid not among them."""
    if ranks.size == 1:                                   # one process: no search
        return np.where(pid == ranks[0], 0, -1)
    at = np.minimum(np.searchsorted(ranks, pid), ranks.size - 1)
    return np.where(ranks[at] == pid, at, -1)


def iteration_periods(sel: StepSelection, launches: GpuOps | None) -> np.ndarray:
    """Per measured step, ns from the previous iteration's completion to its own
    (:func:`completion_times`)."""
    before, done = completion_times(sel, launches)
    return done - before


def step_stats(sel: StepSelection, batch_size: int | None, period_ns: np.ndarray | None = None) -> StepStats:
    """Per-step iteration periods (``period_ns``, default: host periods, from one step's start to
    the next's) and range durations (per process, concatenated in time order)."""
    m = sel.measured
    if period_ns is None:
        period_ns = iteration_periods(sel, None)
    range_ns = m["end"] - m["start"]
    samples_per_s = None
    if batch_size is not None and len(m):
        _, n, total = group_sums(m["pid"], period_ns)
        samples_per_s = float((batch_size * n / (total / 1e9)).sum())
    return StepStats(
        range_name=sel.name,
        count=len(m),
        warmup_skipped=sel.warmup_skipped,
        durations_ms=tuple(float(x) for x in period_ns / 1e6),
        summary_ms=summarize(period_ns / 1e6),
        window_start_ns=sel.window[0],
        window_end_ns=sel.window[1],
        batch_size=batch_size,
        samples_per_s=samples_per_s,
        source=sel.source,
        range_durations_ms=tuple(float(x) for x in range_ns / 1e6),
        range_summary_ms=summarize(range_ns / 1e6),
    )


def _no_steps_message(nvtx: Columns, pattern: str | None, source: str) -> str:
    common = _most_frequent(_folded(nvtx["text"]))[:8]
    listing = ", ".join(f"{n!r} ({c})" for n, c in common)
    if pattern is None:
        which = ("the default step patterns (step, train_step, iteration, batch N, Step N Start, ProfilerStep#N), "
                 "nor an optimizer-step range of nsys's PyTorch annotation or of perfgate's hook "
                 "(autostep: was the capture made with autostep off, or does the workload use no torch.optim optimizer?)")
    else:
        which = f"step_pattern {pattern!r}"
    return (f"{source}: no NVTX range matches {which}. Most frequent ranges: {listing}. "
            "Name the range that marks one iteration: step_pattern in [tool.perfgate.workloads.<name>] for the "
            "gate (perfgate run, pytest --perfgate), --step-pattern for perfgate analyze and compare")
