"""Thread projection of NVTX ranges onto the GPU, with ``nsys stats`` nvtx_gpu_proj semantics.

A GPU op (kernel, memcpy, memset; CUDA-graph launches are not part of nsys's projection) belongs
to a range when the API call that launched it lies entirely inside the range on the range's own
thread. The projected span is max(op end) - min(op start) over those ops; ranges that enclose no
op are dropped; only ranges that start and end on the same thread take part. Children are not
subtracted, so a kernel counts for every enclosing range.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

PROJECTED_KINDS = ("kernel", "memcpy", "memset")


def project_ranges(nvtx: pd.DataFrame, launches: pd.DataFrame) -> pd.DataFrame:
    """One row per range that encloses GPU work: ``row_id, name, style, pid, start, end,
    proj_start, proj_end, gpu_ops`` (gpu_ops = distinct launching calls, as nsys counts)."""
    ranges = nvtx[nvtx["end_global_tid"].isna()]
    ops = launches[(launches["api_tid"] >= 0) & launches["kind"].isin(PROJECTED_KINDS)]
    ops = ops.sort_values(["api_tid", "api_start", "api_end"], kind="stable")
    parts: list[pd.DataFrame] = []
    op_groups = dict(tuple(ops.groupby("api_tid", sort=False)))
    for tid, rng in ranges.groupby("global_tid", sort=False):
        thread_ops = op_groups.get(tid)
        if thread_ops is None:
            continue
        part = _project_thread(rng, thread_ops)
        if len(part):
            parts.append(part)
    cols = ["row_id", "name", "style", "pid", "start", "end", "proj_start", "proj_end", "gpu_ops"]
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
    return pd.concat(parts, ignore_index=True)[cols]


def _project_thread(rng: pd.DataFrame, ops: pd.DataFrame) -> pd.DataFrame:
    a_start = ops["api_start"].to_numpy()
    a_end_max = np.maximum.accumulate(ops["api_end"].to_numpy())  # equals api_end: calls don't nest
    g_start = ops["start"].to_numpy()
    g_end = ops["end"].to_numpy()
    corr = ops["correlation_id"].to_numpy()
    r_start = rng["start"].to_numpy()
    r_end = rng["end"].to_numpy()
    i = np.searchsorted(a_start, r_start, side="left")
    j = np.searchsorted(a_end_max, r_end, side="right")
    has = j > i
    if not has.any():
        return rng.iloc[:0].assign(proj_start=0, proj_end=0, gpu_ops=0)
    i, j = i[has], j[has]
    bounds = np.empty(2 * i.size, dtype=np.int64)
    bounds[0::2], bounds[1::2] = i, j
    n = g_start.size
    big = np.iinfo(np.int64).max
    proj_start = np.minimum.reduceat(np.r_[g_start, big], bounds)[0::2]
    proj_end = np.maximum.reduceat(np.r_[g_end, -big], bounds)[0::2]
    new_call = np.ones(n, dtype=np.int64)
    new_call[1:] = (corr[1:] != corr[:-1]) | (a_start[1:] != a_start[:-1])
    cum = np.r_[0, np.cumsum(new_call)]
    n_calls = cum[j] - cum[i] + (new_call[i] == 0)
    return rng[has].assign(proj_start=proj_start, proj_end=proj_end, gpu_ops=n_calls)


def projection_summary(projected: pd.DataFrame) -> pd.DataFrame:
    """``nvtx_gpu_proj_sum``-style totals per (name, style): ``total_proj_ns, total_range_ns,
    instances, total_gpu_ops``, indexed by name (leading ':' of the default domain not added)."""
    p = projected.assign(proj=projected["proj_end"] - projected["proj_start"],
                         dur=projected["end"] - projected["start"])
    return p.groupby(["name", "style"]).agg(
        total_proj_ns=("proj", "sum"), total_range_ns=("dur", "sum"),
        instances=("proj", "size"), total_gpu_ops=("gpu_ops", "sum"),
    ).reset_index()
