"""One pass over the CUDA API calls (``CUPTI_ACTIVITY_KIND_RUNTIME``, the largest table of an
export), streamed in chunks and never held whole: it joins each GPU op to the call that launched it
and aggregates the calls of a time window (``ApiCalls``).

The join is nsys's: same correlationId and globalPid == globalTid & ~0xFFFFFF (correlation ids are
unique only within a process); where a process repeats a correlation id, its first call counts.
"""
from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfgate.trace.columns import factorize, grouped_cummax
from perfgate.trace.database import stream, stream_integers
from perfgate.trace.gpu_ops import PID_BITS, PID_MASK, GpuOps
from perfgate.trace.read_ahead import CATALOG, RUNTIME_TABLE, call_columns

SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cuStreamSynchronize",
                        "cuCtxSynchronize"})
_VERSION_SUFFIX = re.compile(r"_v\d+$")
_ID_BITS = 39
FEW_THREADS = 8   # up to this many threads in a chunk, its union is made a thread at a time


def api_name(raw: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return _VERSION_SUFFIX.sub("", raw)


@dataclass(frozen=True)
class ApiCalls:
    """The CUDA API calls that start in the window [start_ns, end_ns].

    ``busy_ns``: per thread, the length of the union of those calls (ends cut at end_ns), summed
    over threads: a driver call nested in a runtime call counts once. ``count_by_name``: calls per
    name id; ``count_by_name_open`` / ``ns_by_name_open``: the same over [start_ns, end_ns) with
    their total duration. ``kept_*``: start, end and thread of the calls in [start_ns, end_ns)
    whose name id was asked for (the synchronizing calls)."""

    start_ns: int
    end_ns: int
    busy_ns: int = 0
    count_by_name: dict[int, int] = field(default_factory=dict)
    count_by_name_open: dict[int, int] = field(default_factory=dict)
    ns_by_name_open: dict[int, int] = field(default_factory=dict)
    kept_start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kept_end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kept_tid: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def op_keys(pid: np.ndarray, correlation_id: np.ndarray) -> np.ndarray:
    """One int64 per (process, correlation id): 24 pid bits above 39 id bits (the rest of the
    globalPid is compared separately)."""
    keys = pid.astype(np.int64) << _ID_BITS
    keys |= correlation_id.astype(np.int64) & ((1 << _ID_BITS) - 1)
    return keys


class _Join:
    """Launch columns of ``ops`` filled chunk by chunk from the calls in export order."""

    def __init__(self, ops: GpuOps) -> None:
        self.ops = ops
        keys = op_keys(ops.pid, ops.correlation_id)
        index = np.int32 if keys.size < 2**31 else np.int64       # peak memory: 4 B per op less
        self.order = np.argsort(keys, kind="stable").astype(index)
        self.keys = keys[self.order]
        del keys
        # ops sharing a key (a graph launch, ...): how many follow each first one
        first = np.flatnonzero(np.r_[True, self.keys[1:] != self.keys[:-1]]) if self.keys.size else self.keys
        self.run = np.zeros(self.keys.size, dtype=index)
        self.run[first] = np.diff(np.r_[first, self.keys.size])
        n = len(ops)
        self.decided = np.zeros(n, dtype=bool)
        self.api = [np.full(n, -1, dtype=np.int64) for _ in range(3)]

    def add(self, start: np.ndarray, end: np.ndarray, tid: np.ndarray, corr: np.ndarray) -> None:
        if self.keys.size == 0:
            return
        keys = op_keys((tid >> 24) & 0xFFFFFF, corr)
        lo = np.minimum(np.searchsorted(self.keys, keys, side="left"), self.keys.size - 1)
        rows = np.flatnonzero(self.keys[lo] == keys)
        if rows.size == 0:
            return
        hi = lo + self.run[lo]
        if not (np.diff(lo[rows]) > 0).all():                  # a repeated id: its first call
            _, first = np.unique(lo[rows], return_index=True)
            rows = rows[np.sort(first)]
        rows = rows[~self.decided[self.order[lo[rows]]]]         # decided by an earlier chunk
        counts = hi[rows] - lo[rows]
        starts = np.repeat(lo[rows] - np.r_[0, np.cumsum(counts)[:-1]], counts)
        ops = self.order[np.arange(counts.sum()) + starts]
        call = np.repeat(rows, counts)
        self.decided[ops] = True
        # the pid bits are equal (they are in the key): the rest of globalPid must be too
        match = self.ops.pid_rest[ops] == (tid[call] & PID_MASK & ~PID_BITS)
        ops, call = ops[match], call[match]
        for out, src in zip(self.api, (start, end, tid)):
            out[ops] = src[call]


class _Union:
    """Per-thread union length of calls streamed in per-thread start order; ``ordered`` turns
    False when a thread's calls come out of order (then the caller sorts them)."""

    def __init__(self) -> None:
        self.busy = 0
        self.ordered = True
        self.last_start: dict[int, int] = {}
        self.run_end: dict[int, int] = {}

    def add(self, tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        if tid.size == 0 or not self.ordered:
            return
        if (tid == tid[0]).all():                 # one thread: no grouping
            self._add_each(None, [int(tid[0])], start, end)
            return
        inv, thread_list = factorize(tid)
        threads = np.array(thread_list, dtype=np.int64)
        if threads.size <= FEW_THREADS:
            self._add_each(inv, thread_list, start, end)
            return
        inv = inv.astype(np.int16 if threads.size < 2**15 else np.int64)
        order = np.argsort(inv, kind="stable")    # radix sort; keeps each thread's export order
        g, s, e = inv[order], start[order], end[order]
        first = np.r_[True, g[1:] != g[:-1]]
        carry_start = np.array([self.last_start.get(int(t), np.iinfo(np.int64).min) for t in threads])
        carry_end = np.array([self.run_end.get(int(t), np.iinfo(np.int64).min) for t in threads])
        prev_start = np.where(first, carry_start[g], np.r_[s[:1], s[:-1]])
        if (s < prev_start).any():
            self.ordered = False
            return
        run = grouped_cummax(e, first)
        prev_end = np.where(first, carry_end[g], np.maximum(np.r_[run[:1], run[:-1]], carry_end[g]))
        self.busy += int(np.maximum(0, e - np.maximum(s, prev_end)).sum())
        last = np.r_[np.flatnonzero(first)[1:] - 1, g.size - 1]
        for t, ls, rm in zip(threads[g[last]].tolist(), s[last].tolist(),
                             np.maximum(run[last], carry_end[g[last]]).tolist()):
            self.last_start[t], self.run_end[t] = ls, rm


    def _add_each(self, inv: np.ndarray | None, threads: list[int], start: np.ndarray, end: np.ndarray) -> None:
        """``add`` a thread at a time (few threads: a selection per thread costs less than the
        sort by thread); ``inv``, each call's thread as a position in ``threads``, is None for one."""
        lowest = int(np.iinfo(np.int64).min)
        for k, t in enumerate(threads):
            mine = None if inv is None else inv == k
            s = start if mine is None else start[mine]
            e = end if mine is None else end[mine]
            if s[0] < self.last_start.get(t, lowest) or (s[1:] < s[:-1]).any():
                self.ordered = False
                return
            run = np.maximum.accumulate(e)
            np.maximum(run, self.run_end.get(t, lowest), out=run)    # ends of earlier chunks too
            before = np.empty_like(run)                                # the run's end before each call
            before[0] = self.run_end.get(t, lowest)
            before[1:] = run[:-1]
            self.busy += int(np.maximum(0, e - np.maximum(s, before)).sum())
            self.last_start[t], self.run_end[t] = int(s[-1]), int(run[-1])


def _calls(con: Any, columns: set[str], window: tuple[int, int] | None = None) -> Iterator[dict[str, np.ndarray]]:
    """The API calls in export order (``window``: only those starting in it, by thread and start)."""
    exprs = call_columns(columns)
    if window is None:
        return stream_integers(con, RUNTIME_TABLE, exprs)
    listed = ", ".join(f"{sql} AS {n}" for n, sql in exprs.items())
    return stream(con, f"SELECT {listed} FROM {CATALOG}.{RUNTIME_TABLE} "
                       f"WHERE start BETWEEN {window[0]} AND {window[1]} ORDER BY globalTid, start")


def scan_runtime(con: Any, columns: set[str], ops: GpuOps, window: tuple[int, int] | None,
                 keep_names: frozenset[int] = frozenset()) -> tuple[GpuOps, ApiCalls | None]:
    """``ops`` with their API-call columns, and the calls of ``window`` aggregated (None without a
    window). One pass over the table; a second, sorted one only if a thread's calls are not in
    start order in the export (nsys writes them in start order)."""
    join = _Join(ops)
    union = _Union()
    lo, hi = window if window is not None else (0, -1)
    closed: dict[int, int] = {}
    opened: dict[int, int] = {}
    opened_ns: dict[int, int] = {}
    kept: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    keep = np.array(sorted(keep_names), dtype=np.int64)
    for c in _calls(con, columns):
        join.add(c["start"], c["end"], c["tid"], c["corr"])
        if window is None:
            continue
        s = c["start"]
        inside = (s >= lo) & (s <= hi)
        if not inside.any():
            continue
        s, end, tid, name = s[inside], c["end"][inside], c["tid"][inside], c["name"][inside]
        union.add(tid, s, np.minimum(end, hi))
        open_ = s < hi
        every = bool(open_.all())                # all but calls starting at the window's end
        counts: dict[int, int] = {}
        _add_counts(counts, name, None)
        for acc in ((closed, opened) if every else (closed,)):
            for i, v in counts.items():
                acc[i] = acc.get(i, 0) + v
        if not every:
            _add_counts(opened, name[open_], None)
        _add_counts(opened_ns, name if every else name[open_], end - s if every else end[open_] - s[open_])
        k = open_ & np.isin(name, keep)
        if k.any():
            kept.append((s[k], end[k], tid[k]))
    launched = ops.with_calls(*join.api)
    if window is None:
        return launched, None
    if not union.ordered:
        union = _Union()
        for c in _calls(con, columns, (lo, hi)):
            union.add(c["tid"], c["start"], np.minimum(c["end"], hi))
    ks, ke, kt = ([np.concatenate(p) for p in zip(*kept)] if kept
                  else [np.zeros(0, dtype=np.int64) for _ in range(3)])
    return launched, ApiCalls(start_ns=lo, end_ns=hi, busy_ns=union.busy, count_by_name=closed,
                              count_by_name_open=opened, ns_by_name_open=opened_ns,
                              kept_start=ks, kept_end=ke, kept_tid=kt)


def _add_counts(acc: dict[int, int], names: np.ndarray, weights: np.ndarray | None) -> None:
    """acc[name] += number of rows (or their summed integer weights) per name."""
    if names.size == 0:
        return
    lo, hi = int(names.min()), int(names.max())
    if hi - lo < 1 << 20:                        # name ids are string ids: one bincount
        offset = names - lo
        counts = np.bincount(offset, minlength=hi - lo + 1)
        sums = counts if weights is None else _exact_bincount(offset, weights.astype(np.int64), hi - lo + 1)
        ids = np.flatnonzero(counts)
        for i, v in zip((ids + lo).tolist(), sums[ids].tolist()):
            acc[i] = acc.get(i, 0) + int(v)
        return
    uniq, codes = np.unique(names, return_inverse=True)
    sums = np.zeros(uniq.size, dtype=np.int64)
    np.add.at(sums, codes, np.ones(names.size, dtype=np.int64) if weights is None else weights.astype(np.int64))
    for i, v in zip(uniq.tolist(), sums.tolist()):
        acc[i] = acc.get(i, 0) + int(v)


def _exact_bincount(codes: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Integer sums of ``weights`` per code: a float bincount where every partial sum is exact
    (below 2**53), else np.add.at."""
    if weights.size == 0 or int(np.abs(weights).max()) * weights.size < 1 << 53:
        return np.bincount(codes, weights=weights, minlength=n).astype(np.int64)
    sums = np.zeros(n, dtype=np.int64)
    np.add.at(sums, codes, weights)
    return sums
