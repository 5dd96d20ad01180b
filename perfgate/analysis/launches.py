"""GPU operations joined to the CUDA API call that launched them."""
from __future__ import annotations

import numpy as np
import pandas as pd


def join_launches(gpu_ops: pd.DataFrame, runtime: pd.DataFrame) -> pd.DataFrame:
    """``gpu_ops`` with the launching call's ``api_start, api_end, api_tid`` (-1 when the call
    was not traced). The join is nsys's: same correlationId and globalPid == globalTid & ~0xFFFFFF
    (correlation ids are unique only within a process)."""
    # one int64 key per (process, correlation id): the 40 hw/vm/pid bits above 23 bits of id
    # would overflow, so key on pid (24 bits) and the id (39 bits) and check the full globalPid
    calls_key = _key(runtime["global_pid"].to_numpy(), runtime["correlation_id"].to_numpy())
    ops_key = _key(gpu_ops["global_pid"].to_numpy(), gpu_ops["correlation_id"].to_numpy())
    index = pd.Index(calls_key)
    if not index.is_unique:  # a correlation id belongs to one call per process; keep the first
        first = ~index.duplicated()
        runtime, index = runtime[first], index[first]
    pos = index.get_indexer(ops_key)
    found = pos >= 0
    found[found] = runtime["global_pid"].to_numpy()[pos[found]] == gpu_ops["global_pid"].to_numpy()[found]
    out = gpu_ops.copy()
    for col, src in (("api_start", "start"), ("api_end", "end"), ("api_tid", "global_tid")):
        values = np.full(len(out), -1, dtype=np.int64)
        values[found] = runtime[src].to_numpy()[pos[found]]
        out[col] = values
    return out


def _key(global_pid: np.ndarray, correlation_id: np.ndarray) -> np.ndarray:
    return (((global_pid >> 24) & 0xFFFFFF) << 39) | (correlation_id & ((1 << 39) - 1))
