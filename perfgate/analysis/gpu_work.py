"""What the GPU and the CUDA API did during the measured steps: kernels, copies, syncs, memory."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfgate.analysis.intervals import union_length_by_group
from perfgate.model import GpuWork, KernelStat

SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cuStreamSynchronize",
                        "cuCtxSynchronize"})
COPY_HTOD = 1
MEM_PAGEABLE = 0
_VERSION_SUFFIX = re.compile(r"_v\d+$")


def api_name(raw: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return _VERSION_SUFFIX.sub("", raw)


def in_window(launches: pd.DataFrame, start_ns: int, end_ns: int) -> pd.Series:
    """GPU ops launched inside the window: by the launching call's start, or by the op's own start
    when the launch was not traced."""
    t = launches["api_start"].where(launches["api_start"] >= 0, launches["start"])
    return (t >= start_ns) & (t <= end_ns)


def gpu_work(launches: pd.DataFrame, runtime: pd.DataFrame, strings: dict[int, str],
             memory_events: pd.DataFrame | None, start_ns: int, end_ns: int, steps: int,
             top_kernels: int = 10) -> GpuWork:
    """Per-step GPU work in the window [start_ns, end_ns] over ``steps`` measured steps."""
    n = max(steps, 1)
    ops = launches[in_window(launches, start_ns, end_ns)]
    kernels = ops[ops["kind"] == "kernel"]
    kdur = kernels["end"] - kernels["start"]
    by_name = (kernels.assign(dur=kdur).groupby("name_id")
               .agg(count=("dur", "size"), total=("dur", "sum")).sort_values("total", ascending=False))
    top = tuple(KernelStat(name=strings.get(int(i), f"<kernel {int(i)}>"), count=int(r["count"]),
                           total_ms=float(r["total"]) / 1e6)
                for i, r in by_name.head(top_kernels).iterrows())
    copies = ops[ops["kind"] == "memcpy"]
    h2d = copies[copies["copy_kind"] == COPY_HTOD]
    pageable = copies[(copies["src_kind"] == MEM_PAGEABLE) | (copies["dst_kind"] == MEM_PAGEABLE)]
    calls = runtime[(runtime["start"] >= start_ns) & (runtime["start"] <= end_ns)]
    # time inside the CUDA API per thread (nested runtime/driver calls counted once)
    _, api_ns = union_length_by_group(calls["global_tid"].to_numpy(), calls["start"].to_numpy(),
                                      np.minimum(calls["end"].to_numpy(), end_ns))
    ids = pd.unique(calls["name_id"])
    sync_ids = [i for i in ids if api_name(strings.get(int(i), "")) in SYNC_CALLS]
    syncs = int(calls["name_id"].isin(sync_ids).sum())
    return GpuWork(
        kernels_per_step=len(kernels) / n,
        kernel_ms_per_step=float(kdur.sum()) / 1e6 / n,
        top_kernels=top,
        cuda_api_ms_per_step=float(api_ns.sum()) / 1e6 / n,
        h2d_bytes_per_step=float(h2d["bytes"].clip(lower=0).sum()) / n,
        h2d_ms_per_step=float((h2d["end"] - h2d["start"]).sum()) / 1e6 / n,
        pageable_copies=len(pageable),
        sync_calls_per_step=syncs / n,
        peak_memory_bytes=peak_memory(memory_events),
    )


def peak_memory(events: pd.DataFrame | None) -> int | None:
    """Largest allocated total on one (process, device), from CUDA_GPU_MEMORY_USAGE_EVENTS."""
    if events is None or events.empty:
        return None
    ev = events.sort_values("start", kind="stable")
    signed = np.where(ev["op"].to_numpy() == 0, 1, -1) * ev["bytes"].to_numpy()
    live = pd.Series(signed).groupby([ev["global_pid"].to_numpy(), ev["device_id"].to_numpy()]).cumsum()
    return int(max(live.max(), 0))
