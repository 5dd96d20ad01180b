"""Interval arithmetic on numpy arrays of integer ns: unions, clipping, gaps, and per-group union
lengths. Pure and vectorized (sorting plus running maxima, no per-interval Python loops)."""
from __future__ import annotations

import numpy as np
import pandas as pd


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals [start, end) into disjoint sorted ones (touching intervals merge)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if starts.size == 0:
        return starts.copy(), ends.copy()
    order = np.argsort(starts, kind="stable")
    s, run_end = starts[order], ends[order]
    del order                             # peak memory: 8 B per interval
    np.maximum.accumulate(run_end, out=run_end)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], run_end[last]


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to [lo, hi]; those left empty are dropped."""
    s = np.maximum(np.asarray(starts, dtype=np.int64), lo)
    e = np.minimum(np.asarray(ends, dtype=np.int64), hi)
    keep = e > s
    return s[keep], e[keep]


def covered(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Length of [lo, hi] covered by the union of the intervals."""
    s, e = union(*clip(starts, ends, lo, hi))
    return int((e - s).sum())


def gaps(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of [lo, hi] that no interval covers (leading and trailing parts included)."""
    s, e = union(*clip(starts, ends, lo, hi))
    gap_s = np.r_[np.int64(lo), e]
    gap_e = np.r_[s, np.int64(hi)]
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def union_length_by_group(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct group code, the length of the union of its intervals.

    Returns (group codes, lengths), group codes sorted ascending."""
    groups = np.asarray(groups, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if groups.size == 0:
        return groups.copy(), np.zeros(0, dtype=np.int64)
    order = np.lexsort((starts, groups))
    g, s, e = groups[order], starts[order], ends[order]
    del order, groups, starts, ends       # the caller's arrays stay where it holds them
    group_start = np.empty(g.size, dtype=bool)
    group_start[0] = True
    group_start[1:] = g[1:] != g[:-1]
    run_end = _grouped_cummax(e, group_start)
    new = group_start.copy()
    new[1:] |= s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, g.size - 1]
    lengths = run_end[last] - s[first]
    seg_groups = g[first]
    codes, idx = np.unique(seg_groups, return_inverse=True)
    return codes, np.bincount(idx, weights=lengths, minlength=codes.size).astype(np.int64)


def _grouped_cummax(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Running maximum of ``values`` that restarts where ``group_start`` is True: one
    ``maximum.accumulate`` after lifting each group above all values of the groups before it."""
    if values.size == 0:
        return values.astype(np.int64)
    gid = np.cumsum(group_start, dtype=np.int64)
    gid -= 1
    base = int(values.min())
    span = int(values.max()) - base + 1
    if span * (int(gid[-1]) + 1) < 2**62:
        lift = gid
        lift *= span                      # in place: at 10^7 ops each temporary is 80 MB
        out = values - base
        out += lift
        np.maximum.accumulate(out, out=out)
        out -= lift
        out += base
        return out
    return pd.Series(values).groupby(gid).cummax().to_numpy(dtype=np.int64)


def group_sums(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct keys ascending, rows per key, exact integer sum of ``values`` per key)."""
    keys = np.asarray(keys)
    if keys.size == 0:
        return keys.copy(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    counts = np.diff(np.r_[first, k.size])
    sums = np.add.reduceat(np.asarray(values, dtype=np.int64)[order], first)
    return k[first], counts, sums
