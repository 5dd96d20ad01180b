"""Interval arithmetic on numpy arrays of integer ns: unions, clipping, gaps, and per-group union
lengths. Pure and vectorized (sorting plus running maxima, no per-interval Python loops)."""
from __future__ import annotations

import numpy as np

from perfgate.trace.columns import grouped_cummax, previous_max, run_starts

BLOCK = 1 << 20   # rows per block of per-row work: temporaries of 8 MB per int64 column
IN_PLACE_FROM = 4 * BLOCK   # window unions of this many intervals on: no permutation (memory)


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
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if hi <= lo:
        return starts[:0].copy(), ends[:0].copy()
    keep = (starts < hi) & (ends > lo) & (ends > starts)    # = max(start, lo) < min(end, hi)
    s = starts[keep]
    np.maximum(s, lo, out=s)
    e = ends[keep]
    del keep
    np.minimum(e, hi, out=e)
    return s, e


def window_union(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """``union(*clip(starts, ends, lo, hi))``, each temporary freed as soon as it is used. From
    ``IN_PLACE_FROM`` intervals on, without a permutation of them (peak memory: the two clipped
    columns, the input's own aside): starts and ends are sorted each on its own, in place. Every
    clipped interval has a positive length, so the k smallest ends belong to the k earliest starts
    wherever a new segment begins: interval i (by start) begins one exactly when i ends come
    before its start, and the segment before it ends at the i-th smallest end."""
    s, e = clip(starts, ends, lo, hi)
    if s.size == 0:
        return s, e
    if s.size < IN_PLACE_FROM:
        return union(s, e)
    s.sort(kind="stable")     # runs of sorted ops (one per table): merged, not sorted again
    e.sort(kind="stable")
    new = np.empty(s.size, dtype=bool)
    for at in range(0, s.size, BLOCK):
        part = s[at:at + BLOCK]
        np.equal(np.searchsorted(e, part, side="left"), np.arange(at, at + part.size), out=new[at:at + part.size])
    first = np.flatnonzero(new)
    del new
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], e[last]


def covered(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Length of [lo, hi] covered by the union of the intervals."""
    s, e = window_union(starts, ends, lo, hi)
    return int((e - s).sum())


def overlap_length(s: np.ndarray, e: np.ndarray, us: np.ndarray, ue: np.ndarray) -> int:
    """Total length of the intervals [s, e) (overlapping or not) inside the disjoint sorted union
    [us, ue) (:func:`union`)."""
    if s.size == 0 or us.size == 0:
        return 0
    prefix = np.r_[0, np.cumsum(ue - us)]

    def covered_before(t: np.ndarray) -> np.ndarray:   # union length in (-inf, t]
        i = np.searchsorted(us, t, side="right")       # segments starting at or before t
        full = prefix[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.minimum(t, ue[np.maximum(i - 1, 0)]) - us[np.maximum(i - 1, 0)], 0)
        return np.where(i > 0, full + np.maximum(last, 0), 0)

    return int((covered_before(e) - covered_before(s)).sum())


def gaps(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of [lo, hi] that no interval covers (leading and trailing parts included)."""
    return complement(*window_union(starts, ends, lo, hi), lo, hi)


def complement(us: np.ndarray, ue: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The parts of [lo, hi] outside the disjoint sorted intervals [us, ue) (all inside [lo, hi])."""
    gap_s = np.r_[np.int64(lo), ue]
    gap_e = np.r_[us, np.int64(hi)]
    keep = gap_e > gap_s
    return gap_s[keep], gap_e[keep]


def union_length_by_group(groups: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                          block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """For each distinct group code, the length of the union of its intervals; rows whose group
    is negative take no part.

    Returns (group codes, lengths), group codes sorted ascending. The rows are sorted by group
    once; the unions are then made ``block`` rows at a time (a group is never split), so the
    temporaries stay bounded however many rows there are."""
    groups = np.asarray(groups)
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    order = np.argsort(groups, kind="stable")
    at = int(np.count_nonzero(groups < 0))   # the skipped rows sort first
    codes: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    while at < order.size:
        stop = min(at + block, order.size)
        rows = order[at:stop]
        g = groups[rows].astype(np.int64)
        if stop < order.size:                 # the last group may go on: leave it to the next block
            cut = int(np.searchsorted(g, g[-1], side="left"))
            if cut == 0:                      # one group longer than the block: take it whole
                stop = at + int(np.searchsorted(groups[order[at:]], g[-1], side="right"))
                rows = order[at:stop]
                g = groups[rows].astype(np.int64)
            else:
                stop, rows, g = at + cut, rows[:cut], g[:cut]
        c, n = _union_lengths(g, starts[rows], ends[rows])
        codes.append(c)
        lengths.append(n)
        at = stop
    if not codes:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(codes), np.concatenate(lengths)


def _union_lengths(g: np.ndarray, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group of ``g`` (sorted ascending), the union length of its intervals [s, e)."""
    order = np.lexsort((s, g))
    g, s, e = g[order], s[order], e[order]
    del order
    group_start = run_starts(g)
    run_end = grouped_cummax(e, group_start)
    new = group_start.copy()
    new[1:] |= s[1:] > run_end[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, g.size - 1]
    seg_lengths = run_end[last] - s[first]
    return g[group_start], np.add.reduceat(seg_lengths, np.flatnonzero(group_start[first]))


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
