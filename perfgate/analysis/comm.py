"""Communication on the GPU: NCCL kernels per rank, the share of their time that compute kernels on
the same GPU overlap, and the rest (exposed communication), per measured step.

A kernel is communication when its name is an NCCL kernel's (``ncclKernel_*``, ``ncclDevKernel_*``:
what nsys's ``nccl_gpu_overlap_trace`` recipe and HTA's kernel classification call communication);
every other kernel is compute (copies and memsets are neither, as in HTA's overlap). Per rank (a
process, in process-id order as in perfgate/analysis/ranks.py) and GPU:

- communication time = |union of its NCCL kernels launched in the rank's measured window|
  (from its first measured step's start to its last one's end, by the launching call's start);
- overlapped = |that union ∩ union of the compute kernels of every process on the same GPU|;
- exposed = communication − overlapped; overlap share = overlapped / communication.

Per-step values divide by the rank's measured steps; the job's values are sums over ranks divided
by the sum of their steps (the mean over ranks when they measured as many steps), and its overlap
share is Σ overlapped / Σ communication (HTA's ``get_comm_comp_overlap`` ratio). Nothing (None)
without an NCCL kernel in the window. Sorting: each rank's NCCL kernels once; per GPU the compute
kernels are first reduced to those that meet a communication interval (a binary search per kernel),
and only those are sorted.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from perfgate.analysis import intervals
from perfgate.records.ranks import CommStats, RankComm
from perfgate.trace.columns import Columns
from perfgate.trace.gpu_ops import KERNEL, GpuOps

#: An NCCL kernel's name (shortName or demangled: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
#: ``void ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)``).
NCCL_KERNEL = re.compile(r"(?:^|[\s*&:])nccl(?:Dev)?Kernel")


def nccl_name_ids(strings: Mapping[int, str]) -> np.ndarray:
    """The string ids that name an NCCL kernel."""
    return np.array(sorted(i for i, s in strings.items() if "ccl" in s and NCCL_KERNEL.search(s)),
                    dtype=np.int64)


def _meeting(starts: np.ndarray, ends: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Which intervals [starts, ends) meet the disjoint sorted intervals [us, ue)."""
    i = np.searchsorted(ue, starts, side="right")               # the first one ending after the start
    hit = i < us.size
    hit[hit] = us[i[hit]] < ends[hit]
    return hit


def comm_stats(ops: GpuOps, strings: Mapping[int, str], measured: Columns) -> CommStats | None:
    """Communication per rank of the measured steps (``pid``, ``start``, ``period_end`` of each);
    None when no NCCL kernel was launched in them."""
    ids = nccl_name_ids(strings)
    if ids.size == 0 or len(ops) == 0 or measured.empty:
        return None
    is_nccl = (ops.kind == KERNEL) & np.isin(ops.name_id, ids)
    nccl = np.flatnonzero(is_nccl)
    if nccl.size == 0:
        return None
    is_compute = (ops.kind == KERNEL) & ~is_nccl
    launched = ops.call_time(nccl)
    pids, where, steps_of = np.unique(measured["pid"], return_inverse=True, return_counts=True)
    lo_of = np.full(pids.size, np.iinfo(np.int64).max, dtype=np.int64)
    hi_of = np.full(pids.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(lo_of, where, measured["start"])
    np.maximum.at(hi_of, where, measured["period_end"])
    compute_by_device: dict[int, np.ndarray] = {}      # per GPU: its compute kernels (indices)
    ranks: list[RankComm] = []
    totals: list[tuple[int, int, int, int]] = []     # kernels, comm ns, overlapped ns, steps
    for rank, (pid, lo, hi, n_steps) in enumerate(zip(pids.tolist(), lo_of.tolist(), hi_of.tolist(),
                                                      steps_of.tolist())):
        mine = nccl[(ops.pid[nccl] == pid) & (launched >= lo) & (launched <= hi)]
        comm_ns = overlap_ns = 0
        devices = np.unique(ops.device_id[mine])
        for dev in devices:
            on = mine[ops.device_id[mine] == dev]
            cs, ce = intervals.union(ops.start[on], ops.end[on])
            if int(dev) not in compute_by_device:
                compute_by_device[int(dev)] = np.flatnonzero(is_compute & (ops.device_id == dev))
            compute = compute_by_device[int(dev)]
            near = compute[_meeting(ops.start[compute], ops.end[compute], cs, ce)]
            comm_ns += int((ce - cs).sum())
            overlap_ns += intervals.overlap_length(cs, ce, *intervals.union(ops.start[near], ops.end[near]))
        steps = max(n_steps, 1)
        totals.append((mine.size, comm_ns, overlap_ns, steps))
        ranks.append(RankComm(rank=rank, pid=int(pid), devices=tuple(str(int(d)) for d in devices),
                              kernels_per_step=mine.size / steps, comm_ms=comm_ns / 1e6 / steps,
                              exposed_ms=(comm_ns - overlap_ns) / 1e6 / steps))
    kernels, comm, overlapped, steps = (sum(t[i] for t in totals) for i in range(4))
    if kernels == 0:
        return None
    return CommStats(kernels_per_step=kernels / steps, comm_ms=comm / 1e6 / steps,
                     exposed_ms=(comm - overlapped) / 1e6 / steps,
                     overlap_fraction=overlapped / comm if comm > 0 else None, ranks=tuple(ranks))
