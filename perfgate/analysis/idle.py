"""GPU-idle share of the measured window, per GPU and overall, and the longest idle gaps."""
from __future__ import annotations

import numpy as np

from perfgate.analysis import intervals
from perfgate.analysis.intervals import BLOCK
from perfgate.records.model import GpuIdle, IdleGap
from perfgate.trace.columns import Columns
from perfgate.trace.gpu_ops import GpuOps


def device_label(device_id: int) -> str:
    return str(int(device_id))


def busy_intervals(ops: GpuOps, window_start_ns: int, window_end_ns: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per device with GPU activity anywhere in the trace: the union of its kernels, memcpys,
    memsets and graphs cut to the window, as disjoint sorted (starts, ends)."""
    devices = np.unique(ops.device_id)
    if devices.size == 1:          # no per-device copy of the columns
        return {int(devices[0]): intervals.window_union(ops.start, ops.end, window_start_ns, window_end_ns)}
    out = {}
    for dev in devices:                                             # devices, not ops
        mine = ops.device_id == dev
        out[int(dev)] = intervals.window_union(ops.start[mine], ops.end[mine], window_start_ns, window_end_ns)
    return out


def gpu_idle(ops: GpuOps, nvtx: Columns, window_start_ns: int, window_end_ns: int,
             longest_gaps: int = 5, busy: dict[int, tuple[np.ndarray, np.ndarray]] | None = None) -> GpuIdle | None:
    """Idle = window time in which a GPU ran no kernel, memcpy, memset or graph (union of their
    intervals, so overlapping streams count once). Every device with GPU activity anywhere in the
    trace counts. None without GPU activity. ``busy``: ``busy_intervals`` of the same window, when
    made before."""
    if len(ops) == 0:
        return None
    window = window_end_ns - window_start_ns
    if busy is None:
        busy = busy_intervals(ops, window_start_ns, window_end_ns)
    per_device: dict[str, float] = {}
    for dev, (us, ue) in busy.items():
        covered = int((ue - us).sum())
        per_device[device_label(dev)] = 1.0 - covered / window if window > 0 else 0.0
    fraction = float(np.mean(list(per_device.values())))  # = sum idle / (window * devices)
    gaps = _longest(busy, window_start_ns, window_end_ns, ops, nvtx, longest_gaps)
    return GpuIdle(fraction=fraction, per_device=per_device, window_ms=window / 1e6, longest_gaps=gaps)


def _top_gaps(us: np.ndarray, ue: np.ndarray, lo: int, hi: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The gaps of [lo, hi] outside the busy intervals [us, ue) that can be among the ``n`` longest
    (ties at the n-th length included), as (starts, ends) in time order, without making every gap:
    gap k runs from ``ue[k - 1]`` (``lo`` for the first) to ``us[k]`` (``hi`` for the last)."""
    length = np.empty(us.size + 1, dtype=np.int64)
    if us.size:
        length[0] = us[0] - lo
        np.subtract(us[1:], ue[:-1], out=length[1:-1])
        length[-1] = hi - ue[-1]
    else:
        length[0] = hi - lo
    if length.size > n:
        cut = np.partition(length, length.size - n)[length.size - n]
        k = np.flatnonzero((length >= cut) & (length > 0))
    else:
        k = np.flatnonzero(length > 0)
    del length
    starts = np.full(k.size, lo, dtype=np.int64)
    after = k > 0
    starts[after] = ue[k[after] - 1]
    ends = np.full(k.size, hi, dtype=np.int64)
    before = k < us.size
    ends[before] = us[k[before]]
    return starts, ends


def _device_processes(ops: GpuOps) -> np.ndarray:
    """The distinct (device, process) pairs of the ops as ``device << 32 | pid``: one pass over the
    ops, a block at a time, not one per gap."""
    parts = [np.unique((ops.device_id[at:at + BLOCK].astype(np.int64) << 32) | ops.pid[at:at + BLOCK])
             for at in range(0, len(ops), BLOCK)]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def _longest(busy: dict[int, tuple[np.ndarray, np.ndarray]], lo: int, hi: int, ops: GpuOps,
             nvtx: Columns, n: int) -> tuple[IdleGap, ...]:
    """The ``n`` longest idle gaps over all devices (device order, then time order on ties), with
    the NVTX ranges open on the CPU at each gap's middle in the processes using that device."""
    if n <= 0 or not busy:
        return ()
    parts = [(*_top_gaps(us, ue, lo, hi, n), dev) for dev, (us, ue) in busy.items()]
    starts = np.concatenate([p[0] for p in parts])
    ends = np.concatenate([p[1] for p in parts])
    devs = np.concatenate([np.full(p[0].size, p[2]) for p in parts])
    top = np.argsort(-(ends - starts), kind="stable")[:n]
    pairs = _device_processes(ops)
    out: list[IdleGap] = []
    for k in top:
        pids = np.unique(pairs[(pairs >> 32) == devs[k]] & 0xFFFFFFFF)
        t = starts[k]
        mid = t + (ends[k] - t) // 2
        open_ = nvtx.take((nvtx["start"] <= mid) & (nvtx["end"] > mid) & np.isin(nvtx["pid"], pids))
        open_ = open_.take(np.lexsort((-open_["end"], open_["start"])))
        out.append(IdleGap(device=device_label(devs[k]), start_ns=int(t),
                           duration_ms=float(ends[k] - t) / 1e6,
                           cpu_ranges=tuple(n.removeprefix(":") for n in open_["name"])))
    return tuple(out)
