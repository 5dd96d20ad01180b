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

NCCL's calls (:func:`collective_calls`) come from NCCL's own NVTX ranges (domain ``NCCL``, e.g.
``NCCL:ncclAllReduce``), which nsys records with ``--trace=nvtx`` alone: every launch has them, the
timing launches included, where only the CUDA-traced profile launch has kernels. A call belongs to
its rank's measured window by its start, and to the phase instance of its process that contains its
start, whichever thread made it (DDP all-reduces from autograd's thread, inside ``backward``).

Per-step values divide by the rank's measured steps; the job's values are sums over ranks divided
by the sum of their steps (the mean over ranks when they measured as many steps), and its overlap
share is Σ overlapped / Σ communication (HTA's ``get_comm_comp_overlap`` ratio). Nothing (None)
without an NCCL kernel in the window. Sorting: each rank's NCCL kernels once; per GPU the compute
kernels are first reduced to those that meet a communication interval (a binary search per kernel),
and only those are sorted.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

import numpy as np

from perfgate.analysis import intervals
from perfgate.records.ranks import CollectiveCalls, CollectiveCount, CommStats, RankComm
from perfgate.trace.columns import Columns
from perfgate.trace.gpu_ops import KERNEL, GpuOps

#: An NCCL kernel's name (shortName or demangled: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
#: ``void ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)``).
NCCL_KERNEL = re.compile(r"(?:^|[\s*&:])nccl(?:Dev)?Kernel")
#: NCCL's NVTX range of a call that communicates (``NCCL:ncclAllReduce``, ``NCCL:ncclSend``): not the
#: communicator's set-up and teardown (``ncclCommInitRankConfig``, ``ncclCommDestroy``), nor group markers.
NCCL_CALL = re.compile(r"NCCL:nccl(?!Comm|Group)([A-Z][A-Za-z]*)")


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


def collective_calls(nvtx: Columns, measured: Columns, instances: Columns,
                     range_names: Iterable[str]) -> CollectiveCalls | None:
    """NCCL's calls per step and rank in the measured steps (``pid``, ``start``, ``period_end`` of
    each), by call and by the phase instance (``pid``, ``phase``, ``start``, ``end``) that contains
    each call's start; None without a call in them. ``range_names``: the trace's distinct NVTX
    names (``Analysis.ranges``), so that a trace without NCCL's ranges costs no pass over its rows."""
    calls = {name: m.group(1) for name in range_names if (m := NCCL_CALL.fullmatch(name))}
    if not calls or measured.empty:
        return None
    names = nvtx["name"]
    rows = np.flatnonzero(np.logical_or.reduce([names == name for name in calls]))
    starts, pids_of = nvtx["start"][rows], nvtx["pid"][rows]
    pids, where, steps_of = np.unique(measured["pid"], return_inverse=True, return_counts=True)
    counts: dict[tuple[str, str | None], int] = {}
    for k, pid in enumerate(pids.tolist()):
        mine = where == k
        lo, hi = int(measured["start"][mine].min()), int(measured["period_end"][mine].max())
        picked = (pids_of == pid) & (starts >= lo) & (starts < hi)
        for name, phase in zip(names[rows[picked]].tolist(), _phase_at(instances, pid, starts[picked])):
            key = (calls[name], phase)
            counts[key] = counts.get(key, 0) + 1
    steps, total = int(steps_of.sum()), sum(counts.values())
    if total == 0 or steps == 0:
        return None
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1] or ""))
    return CollectiveCalls(per_step=total / steps,
                           counts=tuple(CollectiveCount(call, phase, n / steps) for (call, phase), n in ordered))


def _phase_at(instances: Columns, pid: int, times: np.ndarray) -> list[str | None]:
    """The phase of the process ``pid`` whose instance contains each of ``times`` (None: none does).
    A step's phase instances do not overlap, so the one starting last at or before a time is the only
    candidate."""
    if instances.empty or times.size == 0:
        return [None] * times.size
    mine = np.flatnonzero(instances["pid"] == pid)
    mine = mine[np.argsort(instances["start"][mine], kind="stable")]
    starts, ends = instances["start"][mine], instances["end"][mine]
    i = np.searchsorted(starts, times, side="right") - 1
    inside = (i >= 0) & (ends[np.maximum(i, 0)] > times)
    phase = instances["phase"][mine]
    return [str(phase[j]) if ok else None for j, ok in zip(i.tolist(), inside.tolist())]
