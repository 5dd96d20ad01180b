"""What the GPU and the CUDA API did during the measured steps: kernels, copies, syncs, memory."""
from __future__ import annotations

import numpy as np

from perfgate.analysis.intervals import group_sums
from perfgate.records.model import GpuWork, KernelStat
from perfgate.trace.api_calls import SYNC_CALLS, ApiCalls, api_name
from perfgate.trace.columns import Columns, descending_order, run_starts
from perfgate.trace.gpu_ops import GRAPH, KERNEL, MEMCPY, GpuOps

__all__ = ["gpu_work", "in_window", "peak_memory"]

COPY_HTOD = 1
MEM_PAGEABLE = 0


def in_window(ops: GpuOps, start_ns: int, end_ns: int) -> np.ndarray:
    """GPU ops launched inside the window: by the launching call's start, or by the op's own start
    when the launch was not traced."""
    t = ops.call_time()
    return (t >= start_ns) & (t <= end_ns)


def gpu_work(ops: GpuOps, api: ApiCalls, strings: dict[int, str], memory_events: Columns | None,
             start_ns: int, end_ns: int, steps: int, top_kernels: int = 10) -> GpuWork:
    """Per-step GPU work in the window [start_ns, end_ns] over ``steps`` measured steps; ``api``
    holds the API calls of that window."""
    n = max(steps, 1)
    inside = in_window(ops, start_ns, end_ns)
    kernels = inside & (ops.kind == KERNEL)
    kdur = ops.end[kernels] - ops.start[kernels]
    ids, counts, totals = group_sums(ops.name_id[kernels], kdur)
    top = tuple(KernelStat(name=strings.get(int(ids[k]), f"<kernel {int(ids[k])}>"), count=int(counts[k]),
                           total_ms=float(totals[k]) / 1e6)
                for k in descending_order(totals)[:top_kernels])
    copies = inside & (ops.kind == MEMCPY)
    h2d = copies & (ops.copy_kind == COPY_HTOD)
    pageable = h2d & (ops.src_kind == MEM_PAGEABLE)   # what pin_memory fixes: device-bound copies
    sync_ids = {i for i in api.count_by_name if api_name(strings.get(int(i), "")) in SYNC_CALLS}
    syncs = sum(api.count_by_name[i] for i in sync_ids)
    return GpuWork(
        kernels_per_step=int(kernels.sum()) / n,
        kernel_ms_per_step=float(kdur.sum()) / 1e6 / n,
        top_kernels=top,
        cuda_api_ms_per_step=float(api.busy_ns) / 1e6 / n,
        h2d_bytes_per_step=float(np.maximum(ops.bytes[h2d], 0).sum()) / n,
        h2d_ms_per_step=float((ops.end[h2d] - ops.start[h2d]).sum()) / 1e6 / n,
        pageable_copies=int(pageable.sum()),
        sync_calls_per_step=syncs / n,
        peak_memory_bytes=peak_memory(memory_events),
        graph_launches_per_step=int((inside & (ops.kind == GRAPH)).sum()) / n,
    )


def peak_memory(events: Columns | None) -> int | None:
    """Largest allocated total on one (process, device), from CUDA_GPU_MEMORY_USAGE_EVENTS."""
    if events is None or events.empty:
        return None
    ev = events.sorted_by("global_pid", "device_id", "start")       # each (process, device) in time order
    signed = np.where(ev["op"] == 0, 1, -1) * ev["bytes"].astype(np.int64)
    total = np.cumsum(signed)
    first = np.flatnonzero(run_starts(ev["global_pid"]) | run_starts(ev["device_id"]))
    # the running total of each (process, device): the overall one less its value before the group
    before = np.repeat(total[first] - signed[first], np.diff(np.r_[first, total.size]))
    return int(max((total - before).max(), 0))
