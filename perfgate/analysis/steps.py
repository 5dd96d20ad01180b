"""Step ranges: which NVTX ranges are training steps, warm-up, per-step durations, summaries."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfgate.errors import ConfigError, TraceError
from perfgate.model import StepStats, Summary

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

_NUMBER = re.compile(r"[\s#_:=-]+\d+\b")
_SPACES = re.compile(r"\s+")


def fold_name(name: str) -> str:
    """Drop per-iteration numbering: ``forward 12`` -> ``forward``, ``Step 3 Start`` ->
    ``Step Start``, ``ProfilerStep#4`` -> ``ProfilerStep``. Digits inside a word (``layer1``,
    ``conv2d``) are kept: only numbers set off by a space, ``#``, ``_``, ``:``, ``=`` or ``-``."""
    folded = _SPACES.sub(" ", _NUMBER.sub("", name)).strip()
    return folded or name


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
    """The step ranges found in a trace: all of them and the measured ones (after warm-up)."""

    name: str                 # folded name of the chosen step range
    all_steps: pd.DataFrame   # nvtx rows of every step range, sorted by (pid, start)
    measured: pd.DataFrame    # the rows kept after warm-up
    warmup_skipped: int       # per process
    warnings: tuple[str, ...]


def top_level_mask(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray) -> np.ndarray:
    """True for intervals not contained in another interval of the same thread."""
    n = starts.size
    order = np.lexsort((-ends, starts, threads))
    s, e, t = starts[order], ends[order], threads[order]
    new_thread = np.empty(n, dtype=bool)
    if n:
        new_thread[0] = True
        new_thread[1:] = t[1:] != t[:-1]
    gid = np.cumsum(new_thread)
    prev_max = pd.Series(e).groupby(gid).cummax().groupby(gid).shift(1).to_numpy()
    top_sorted = new_thread | ~(e <= np.nan_to_num(prev_max, nan=-1))
    out = np.empty(n, dtype=bool)
    out[order] = top_sorted
    return out


def select_steps(nvtx: pd.DataFrame, pattern: str | None, warmup_steps: int, source: str) -> StepSelection:
    """Find the step ranges (top-most matching ranges per thread; the most frequent folded name
    when several remain) and drop the first ``warmup_steps`` of each process."""
    if warmup_steps < 0:
        raise ConfigError(f"warmup_steps must be >= 0, got {warmup_steps}")
    regex = compile_step_pattern(pattern)
    texts = nvtx["text"]
    unique = pd.unique(texts)
    matching = {t for t in unique if regex.fullmatch(t)}
    cand = nvtx[texts.isin(matching)]
    if cand.empty:
        raise TraceError(_no_steps_message(nvtx, pattern, source))
    top = cand[top_level_mask(cand["start"].to_numpy(), cand["end"].to_numpy(),
                              cand["global_tid"].to_numpy())]
    folded = top["text"].map(fold_name)
    name = folded.value_counts().index[0]
    steps = top[folded == name].sort_values(["pid", "start"], kind="stable")
    counts = steps.groupby("pid").size()
    skip = int(warmup_steps)
    warnings: list[str] = []
    fewest = int(counts.min())
    if fewest < skip + 2:
        reduced = max(0, fewest - 2)
        warnings.append(
            f"only {fewest} '{name}' steps in a process: skipping {reduced} warm-up steps instead of {skip}"
        )
        skip = reduced
    rank = steps.groupby("pid").cumcount()
    measured = steps[rank.to_numpy() >= skip]
    return StepSelection(name, steps, measured, skip, tuple(warnings))


def step_stats(sel: StepSelection, batch_size: int | None) -> StepStats:
    """Per-step durations (per process, concatenated in time order) and their summary."""
    m = sel.measured
    dur_ns = (m["end"] - m["start"]).to_numpy()
    durations_ms = tuple(float(x) for x in dur_ns / 1e6)
    samples_per_s = None
    if batch_size is not None and len(m):
        per_proc = m.assign(d=dur_ns).groupby("pid").agg(n=("d", "size"), total=("d", "sum"))
        samples_per_s = float((batch_size * per_proc["n"] / (per_proc["total"] / 1e9)).sum())
    return StepStats(
        range_name=sel.name,
        count=len(m),
        warmup_skipped=sel.warmup_skipped,
        durations_ms=durations_ms,
        summary_ms=summarize(dur_ns / 1e6),
        window_start_ns=int(m["start"].min()),
        window_end_ns=int(m["end"].max()),
        batch_size=batch_size,
        samples_per_s=samples_per_s,
    )


def _no_steps_message(nvtx: pd.DataFrame, pattern: str | None, source: str) -> str:
    common = nvtx["text"].map(fold_name).value_counts().head(8)
    listing = ", ".join(f"{n!r} ({c})" for n, c in common.items())
    which = "the default step patterns (step, train_step, iteration, batch N, Step N Start, ProfilerStep#N)" \
        if pattern is None else f"step_pattern {pattern!r}"
    return (f"{source}: no NVTX range matches {which}. Most frequent ranges: {listing}. "
            "Set the step pattern (--step-pattern / step_pattern) to the range that marks one iteration")
