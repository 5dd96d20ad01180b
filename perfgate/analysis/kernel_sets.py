"""Kernel-set changes between measured iterations: which steps launch a set of kernel names other
than the usual one (a recompilation, a changed code path). Sort-once array work: the (step, kernel
name) pairs of all steps are made and compared as arrays, never step by step."""
from __future__ import annotations

import numpy as np

from perfgate.trace.columns import Columns, first_seen


def kernel_set_changes(t: np.ndarray, kpid: np.ndarray, kname: np.ndarray, steps: Columns) -> tuple[int, int]:
    """(steps whose kernel-name set differs from the most common one, steps launching nothing).
    A kernel belongs to the iteration of its process in which its launch started. Sort-once: the
    (step, kernel name) pairs of all steps are sorted and compared as arrays."""
    if len(steps) < 3:
        return 0, 0
    end_col = "period_end" if "period_end" in steps else "end"
    step_pid = steps["pid"]
    pid_order = first_seen(step_pid)             # steps grouped by process, first-seen order
    step_rows = np.concatenate([np.flatnonzero(step_pid == p) for p in pid_order])
    st_start = steps["start"][step_rows]
    st_end = steps[end_col][step_rows]
    st_pid = step_pid[step_rows]
    # kernels sorted by (process, launch time); each step is a slice [lo, hi) of them
    korder = np.lexsort((t, kpid))
    kpid, kt, kname = kpid[korder].astype(np.int64), t[korder], kname[korder]
    del korder                                   # peak memory: 8 B per kernel
    base = np.searchsorted(kpid, st_pid, side="left")
    top = np.searchsorted(kpid, st_pid, side="right")
    lo = np.empty(len(step_rows), dtype=np.int64)
    hi = np.empty(len(step_rows), dtype=np.int64)
    for p in pid_order:                          # processes, not steps
        m = st_pid == p
        a, b = base[m][0], top[m][0]
        lo[m] = a + np.searchsorted(kt[a:b], st_start[m], side="left")
        hi[m] = a + np.searchsorted(kt[a:b], st_end[m], side="left")
    sizes = np.maximum(hi - lo, 0)
    at = np.repeat(lo - np.r_[0, np.cumsum(sizes)[:-1]], sizes)
    at += np.arange(at.size)
    names = kname[at]
    del at, kpid, kt, kname
    # each step's set: its distinct names, sorted; a set is identified by (size, hash) and
    # confirmed element by element against the most common one
    codes, code_idx = _dense_codes(names)
    del names
    step_of = np.repeat(np.arange(sizes.size), sizes)
    step_of *= max(codes.size, 1)
    step_of += code_idx
    flat = _distinct(step_of, sizes.size * max(codes.size, 1))   # distinct (step, name) pairs, sorted
    del step_of
    pairs = np.stack([flat // max(codes.size, 1), codes[flat % max(codes.size, 1)]], axis=1) \
        if flat.size else np.zeros((0, 2), dtype=np.int64)
    code_idx = flat % max(codes.size, 1)
    set_size = np.bincount(pairs[:, 0], minlength=sizes.size)
    weights = _weights(codes.size)
    h = np.zeros((sizes.size, 2), dtype=np.int64)
    if flat.size:                                # pairs are sorted by step: one sum per step's run
        first = np.flatnonzero(np.r_[True, pairs[1:, 0] != pairs[:-1, 0]])
        h[pairs[first, 0]] = np.add.reduceat(weights[code_idx], first, axis=0)
    keys = np.stack([set_size, h[:, 0], h[:, 1]], axis=1)
    uniq, seen_at, inverse, counts = np.unique(keys, axis=0, return_index=True, return_inverse=True,
                                                  return_counts=True)
    best = np.flatnonzero(counts == counts.max())
    usual = best[np.argmin(seen_at[best])]    # ties: the set seen first, as a dict would keep
    same = inverse.reshape(-1) == usual
    rep = np.flatnonzero(same)[0]
    rep_names = pairs[pairs[:, 0] == rep, 1]
    cand = np.flatnonzero(same)
    if rep_names.size and cand.size > 1:          # confirm equal sets element by element
        starts = np.searchsorted(pairs[:, 0], cand)
        rows = starts[:, None] + np.arange(rep_names.size)
        same[cand] = (pairs[rows, 1] == rep_names).all(axis=1)
    return int((~same).sum()), int((set_size == 0).sum())


def _weights(n: int) -> np.ndarray:
    """Two pseudo-random weights in [1, 2**62) per name code, the same every run: SplitMix64 of
    the code (numpy.random is not imported for them: 10 ms of a command's start)."""
    with np.errstate(over="ignore"):
        z = (np.arange(1, 2 * n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return ((z >> np.uint64(2)) | np.uint64(1)).astype(np.int64).reshape(n, 2)


def _dense_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_inverse=True)`` of small non-negative-or--1 integer ids (string
    ids) in one pass, without sorting."""
    if values.size == 0 or values.min() < -1 or values.max() >= 1 << 24:
        return np.unique(values, return_inverse=True)
    present = np.zeros(int(values.max()) + 2, dtype=bool)
    present[values + 1] = True
    rank = np.cumsum(present) - 1
    return np.flatnonzero(present) - 1, rank[values + 1]


def _distinct(keys: np.ndarray, bound: int) -> np.ndarray:
    """``np.unique(keys)`` of integers in [0, bound): through a bitmap when that is small."""
    if bound > 1 << 27:
        return np.unique(keys)
    seen = np.zeros(bound, dtype=bool)
    seen[keys] = True
    return np.flatnonzero(seen)
