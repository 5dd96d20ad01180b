"""Iteration periods and their statistics: when each measured iteration was complete (host and
GPU), its period, and the step statistics the gate compares (``StepStats``).

The gated step time (``step_time_ms``) is the median, over every run of ``w`` consecutive measured
iterations of a process, of their mean period. ``w`` is about a fifth of the ``n`` measured
iterations, rounded down to whole cycles of length ``c`` (``run_length``): ``c`` is the shortest lag
at which the periods correlate with themselves (``cycle_length``; 1 without one). A median, so that
one slow iteration (a collection, a log write) moves it little (it is in ``w`` of the ``n - w + 1``
runs); of means of whole cycles, so that periods in bursts (DataLoader workers handing batches
over: 21 ms, 2 ms, 2 ms, 21 ms, ...) or at random between two levels give the iteration time,
where the median of the periods is one of the peaks. In simulations of 30 and 60 iterations it
kept the launch-to-launch spread of the mean for cycles of 2 to 8 and two random levels, where
the median's was 2 to 5 times larger (and its value a peak); steady periods with rare spikes are
where the median is steadier.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from perfgate.analysis.intervals import BLOCK, group_sums
from perfgate.analysis.loop import samples_per_iteration
from perfgate.records.steps import StepStats, Summary
from perfgate.trace.columns import Columns, grouped_cummax, run_starts

if TYPE_CHECKING:
    from perfgate.analysis.steps import StepSelection
    from perfgate.trace.gpu_ops import GpuOps

__all__ = ["completion_times", "cycle_length", "iteration_periods", "run_length", "step_stats", "summarize",
           "window_location"]

RUNS = 5            # a run is about a fifth of the measured iterations
MAX_CYCLE = 12      # the longest cycle of periods looked for
CYCLE_CORRELATION = 0.3


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


def cycle_length(periods: np.ndarray) -> int:
    """The shortest lag ``c`` from 2 to MAX_CYCLE (and a third of the periods) at which the periods'
    autocorrelation reaches CYCLE_CORRELATION, else 1. A wrong ``c`` costs little: it only rounds
    the run length to its multiples."""
    x = periods - periods.mean()
    energy = float((x * x).sum())
    if energy <= 0:
        return 1
    for c in range(2, min(MAX_CYCLE, periods.size // 3) + 1):
        if float((x[:-c] * x[c:]).sum()) >= CYCLE_CORRELATION * energy:
            return c
    return 1


def run_length(n: int, cycle: int = 1) -> int:
    """Iterations per run: about n / RUNS, whole cycles, at least one cycle (at most n, at least 1)."""
    return max(1, min(n, cycle * max(1, n // (RUNS * cycle))))


def window_location(period_ns: np.ndarray, pid: np.ndarray) -> tuple[float, str]:
    """The gated step time in ns (the module's docstring) and its name: per process, the means of
    every run of ``run_length`` consecutive periods; the median of all of them (NaN for none)."""
    means: list[np.ndarray] = []
    name = "median of periods"
    most = 0
    for p in np.unique(pid):
        v = period_ns[pid == p].astype(np.float64)
        cycle = cycle_length(v)
        w = run_length(v.size, cycle)
        c = np.r_[0.0, np.cumsum(v)]
        means.append((c[w:] - c[:-w]) / w)
        if v.size > most:      # the process with the most iterations names it
            most = v.size
            name = "median of periods" if w == 1 else f"median of {w}-iteration means" + \
                (f" (whole cycles of {cycle})" if cycle > 1 else "")
    every = np.concatenate(means) if means else np.zeros(0)
    return (float(np.median(every)) if every.size else float("nan")), name


def step_stats(sel: StepSelection, batch_size: int | None, period_ns: np.ndarray | None = None,
               batches: Columns | None = None) -> StepStats:
    """Per-step iteration periods (``period_ns``, default: host periods, from one step's start to
    the next's) and range durations (per process, concatenated in time order). Without
    ``batch_size``, the samples per iteration come from the DataLoader's ``batches``
    (loop.batch_sizes) where every batch of the measured iterations has a known size."""
    m = sel.measured
    if period_ns is None:
        period_ns = iteration_periods(sel, None)
    range_ns = m["end"] - m["start"]
    samples_per_s = None
    source = "given" if batch_size is not None else None
    if batch_size is not None and len(m):
        _, n, total = group_sums(m["pid"], period_ns)
        samples_per_s = float((batch_size * n / (total / 1e9)).sum())
    elif batches is not None and len(batches) and len(m):
        samples = samples_per_iteration(batches, m["start"], m["period_end"], m["pid"])
        if samples.size and (samples > 0).all():
            batch_size, source = int(np.median(samples)), "dataloader"
            _, _, took = group_sums(m["pid"], samples)
            _, _, total = group_sums(m["pid"], period_ns)
            samples_per_s = float((took / (total / 1e9)).sum())
    interlude_ms = sel.interlude_ns / 1e6
    location, name = window_location(period_ns, m["pid"])
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
        location_ms=location / 1e6 if len(m) else None,
        statistic=name,
        marker=sel.description,
        batch_source=source,
        interludes=int(interlude_ms.size),
        interlude_mean_ms=float(interlude_ms.mean()) if interlude_ms.size else None,
    )
