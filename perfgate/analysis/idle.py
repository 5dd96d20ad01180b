"""GPU-idle share of the measured window, per GPU and overall, and the longest idle gaps."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.analysis import intervals
from perfgate.gpu_ops import GpuOps
from perfgate.model import GpuIdle, IdleGap


def device_label(device_id: int) -> str:
    return str(int(device_id))


def gpu_idle(ops: GpuOps, nvtx: pd.DataFrame, window_start_ns: int, window_end_ns: int,
             longest_gaps: int = 5) -> GpuIdle | None:
    """Idle = window time in which a GPU ran no kernel, memcpy, memset or graph (union of their
    intervals, so overlapping streams count once). Every device with GPU activity anywhere in the
    trace counts. None without GPU activity."""
    if len(ops) == 0:
        return None
    window = window_end_ns - window_start_ns
    per_device: dict[str, float] = {}
    gap_parts: list[tuple[np.ndarray, np.ndarray, int]] = []
    for dev in np.unique(ops.device_id):                            # devices, not ops
        mine = ops.device_id == dev
        s, e = ops.start[mine], ops.end[mine]
        busy = intervals.covered(s, e, window_start_ns, window_end_ns)
        per_device[device_label(dev)] = 1.0 - busy / window if window > 0 else 0.0
        gs, ge = intervals.gaps(s, e, window_start_ns, window_end_ns)
        gap_parts.append((gs, ge, int(dev)))
    fraction = float(np.mean(list(per_device.values())))  # = sum idle / (window * devices)
    gaps = _longest(gap_parts, ops, nvtx, longest_gaps)
    return GpuIdle(fraction=fraction, per_device=per_device, window_ms=window / 1e6, longest_gaps=gaps)


def _longest(parts: list[tuple[np.ndarray, np.ndarray, int]], ops: GpuOps,
             nvtx: pd.DataFrame, n: int) -> tuple[IdleGap, ...]:
    if n <= 0 or not parts:
        return ()
    starts = np.concatenate([p[0] for p in parts])
    ends = np.concatenate([p[1] for p in parts])
    devs = np.concatenate([np.full(p[0].size, p[2]) for p in parts])
    top = np.argsort(-(ends - starts), kind="stable")[:n]
    out: list[IdleGap] = []
    for k in top:
        pids = np.unique(ops.pid[ops.device_id == devs[k]])
        t = starts[k]
        mid = t + (ends[k] - t) // 2
        open_ = nvtx[(nvtx["start"] <= mid) & (nvtx["end"] > mid) & nvtx["pid"].isin(pids)]
        open_ = open_.sort_values(["start", "end"], ascending=[True, False])
        out.append(IdleGap(device=device_label(devs[k]), start_ns=int(t),
                           duration_ms=float(ends[k] - t) / 1e6,
                           cpu_ranges=tuple(open_["name"].str.removeprefix(":"))))
    return tuple(out)
