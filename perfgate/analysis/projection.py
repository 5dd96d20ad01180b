"""Thread projection of NVTX ranges onto the GPU, with ``nsys stats`` nvtx_gpu_proj semantics.

A GPU op (kernel, memcpy, memset; CUDA-graph launches are not part of nsys's projection) belongs
to a range when the API call that launched it lies entirely inside the range on the range's own
thread. The projected span is max(op end) - min(op start) over those ops; ranges that enclose no
op are dropped; only ranges that start and end on the same thread take part. Children are not
subtracted, so a kernel counts for every enclosing range.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from perfgate.trace.columns import Columns, first_seen
from perfgate.trace.export import NO_ID
from perfgate.trace.gpu_ops import KERNEL, MEMCPY, MEMSET, GpuOps

PROJECTED_KINDS = (KERNEL, MEMCPY, MEMSET)
COLUMNS = ["row_id", "name", "style", "pid", "start", "end", "proj_start", "proj_end", "gpu_ops"]


def project_ranges(nvtx: Columns, ops: GpuOps) -> Columns:
    """One row per range that encloses GPU work: ``row_id, name, style, pid, start, end,
    proj_start, proj_end, gpu_ops`` (gpu_ops = distinct launching calls, as nsys counts)."""
    ranges = nvtx.take(nvtx["end_global_tid"] == NO_ID)
    sel = np.flatnonzero((ops.api_tid >= 0) & np.isin(ops.kind, PROJECTED_KINDS))
    sel = sel[np.lexsort((ops.api_end[sel], ops.api_start[sel], ops.api_tid[sel]))]
    tids = ops.api_tid[sel]
    parts: list[Columns] = []
    r_tid = ranges["global_tid"]
    for tid in first_seen(r_tid):                                   # threads, not ranges
        a, b = np.searchsorted(tids, tid, side="left"), np.searchsorted(tids, tid, side="right")
        if b > a:
            part = _project_thread(ranges.take(r_tid == tid), ops, sel[a:b])
            if len(part):
                parts.append(part)
    if not parts:
        return Columns.empty_of(COLUMNS, {"name": object, "style": object})
    return Columns.concat(parts).select(COLUMNS)


def _project_thread(rng: Columns, ops: GpuOps, rows: np.ndarray) -> Columns:
    """``rows``: the thread's ops sorted by launching call (start, end). Each column of the ops is
    gathered when it is needed and freed after (peak memory: a few columns of the thread's ops)."""
    a_start = ops.api_start[rows]
    i = np.searchsorted(a_start, rng["start"], side="left")
    n = rows.size
    new_call = np.ones(n, dtype=np.int64)
    corr = ops.correlation_id[rows]
    new_call[1:] = (corr[1:] != corr[:-1]) | (a_start[1:] != a_start[:-1])
    del corr, a_start
    a_end_max = ops.api_end[rows]
    np.maximum.accumulate(a_end_max, out=a_end_max)  # equals api_end: calls don't nest
    j = np.searchsorted(a_end_max, rng["end"], side="right")
    del a_end_max
    has = j > i
    if not has.any():
        return Columns.empty_of(COLUMNS)
    i, j = i[has], j[has]
    bounds = np.empty(2 * i.size, dtype=np.int64)
    bounds[0::2], bounds[1::2] = i, j
    big = np.iinfo(np.int64).max
    proj_start = np.minimum.reduceat(_gathered(ops.start, rows, big), bounds)[0::2]
    proj_end = np.maximum.reduceat(_gathered(ops.end, rows, -big), bounds)[0::2]
    np.cumsum(new_call, out=new_call)
    cum = np.r_[0, new_call]
    n_calls = cum[j] - cum[i] + (cum[i + 1] - cum[i] == 0)
    return rng.take(has).assign(proj_start=proj_start, proj_end=proj_end, gpu_ops=n_calls)


def _gathered(column: np.ndarray, rows: np.ndarray, sentinel: int) -> np.ndarray:
    """``column[rows]`` followed by ``sentinel`` (so that a reduceat bound may equal len(rows))."""
    out = np.empty(rows.size + 1, dtype=np.int64)
    np.take(column, rows, out=out[:-1])
    out[-1] = sentinel
    return out


def projection_summary(projected: Columns) -> Any:
    """``nvtx_gpu_proj_sum``-style totals per (name, style): ``total_proj_ns, total_range_ns,
    instances, total_gpu_ops`` as a pandas frame (for the oracle tests; leading ':' of the default
    domain not added)."""
    p = projected.assign(proj=projected["proj_end"] - projected["proj_start"],
                         dur=projected["end"] - projected["start"]).frame()
    return p.groupby(["name", "style"]).agg(
        total_proj_ns=("proj", "sum"), total_range_ns=("dur", "sum"),
        instances=("proj", "size"), total_gpu_ops=("gpu_ops", "sum"),
    ).reset_index()
