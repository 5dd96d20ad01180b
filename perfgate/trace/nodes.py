"""A job of several nodes, one nsys report each, read as one trace: the reports' clocks aligned on
their session start times, each process given its node and ranks, every table put together.

Clocks. Every timestamp of an export is in ns from its session's start, and
``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` is the wall clock (UTC) at that start, read from the
node's system clock. Node ``k``'s times are shifted by ``start_k - min(start)``: one time axis, zero
at the earliest session start. Within a report times come from one monotonic clock; across reports
the alignment is as good as the nodes' system clocks agree at their session starts (NTP: typically
well under a millisecond on one network, PTP: microseconds; on one machine: the same clock) plus
their drift during the run (a few ppm). Step times, per-rank numbers and the rank skew are
durations within one process and do not depend on it; the measured window of the job (GPU idle, the
energy window) spans the nodes and is off by as much.

Nodes and ranks. A process that perfgate's autostep hooks ran in marks ``perfgate/rank:R:L:G`` (the
RANK, LOCAL_RANK and GROUP_RANK torchrun gave it); a report whose processes say so is the node of
that GROUP_RANK (torchrun's c10d rendezvous numbers the nodes in its own order, not by
``--node-rank``). Without the marks the reports are the nodes in the order given, and a process's
rank is its place: node x processes per node + its place among its node's processes by pid (how
perfgate/analysis/ranks.py numbers the processes of one node).

Each process gets a pid of its own in the merged trace, ordered by node and rank: ``node << 16 |
(place + 1)``, set in the pid bits of every thread id too (perfgate/trace/gpu_ops.py's layout);
``Trace.processes`` maps it back. NVTX row ids, string ids and GPU device ids are made distinct per
node. The GPU ops keep their launching calls (joined per report); the CUDA API calls of a window
are each node's own of that window on its clock, added up (``JobTrace.gpu``)."""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from perfgate.errors import TraceError
from perfgate.records.autostep_ranges import MARK_RANK
from perfgate.records.ranks import NodeProcess
from perfgate.trace.columns import Columns
from perfgate.trace.api_calls import ApiCalls
from perfgate.trace.export import NO_ID, PID_BITS, Trace
from perfgate.trace.gpu_ops import GpuOps

MAX_NODES = 255
PLACE_BITS = 16                 # processes per node: 2^16 - 1
ROW_STRIDE = 1 << 40            # NVTX row ids of node k: k * ROW_STRIDE + its own
STRING_STRIDE = 1 << 23         # string ids of node k: k * STRING_STRIDE + its own (int32 columns)
DEVICE_STRIDE = 100             # GPU k of node n: device n * DEVICE_STRIDE + k


@dataclass(frozen=True, eq=False)
class JobTrace(Trace):
    """The merged Trace of a job's nodes (``merge_traces``). ``parts``: each node's own trace, its
    node, its clock offset and its pids' merged pids; ``gpu(window)`` adds up the nodes' API calls
    of the window (each on its own clock), the GPU ops were joined to their calls in the merge."""

    parts: tuple[tuple[Trace, int, int, dict[int, int]], ...] = ()

    def gpu(self, window: tuple[int, int] | None = None) -> tuple[GpuOps, ApiCalls | None]:
        key = ("api", window)
        if key not in self._cache:
            self._cache[key] = (self.ops, None if window is None else _node_calls(self.parts, window))
        return self._cache[key]


def clock_offsets(starts: Sequence[int | None], names: Sequence[str]) -> list[int]:
    """Each report's shift (ns) onto the job's time axis: its session start minus the earliest.
    TraceError naming the report without a session start time (it cannot be aligned)."""
    missing = [n for n, s in zip(names, starts) if s is None]
    if missing:
        raise TraceError(f"{', '.join(missing)}: no session start time (TARGET_INFO_SESSION_START_TIME): "
                         "the reports of a job's nodes cannot be aligned without it")
    first = min(int(s) for s in starts if s is not None)
    return [int(s) - first for s in starts if s is not None]


def reported_ranks(marks: Columns) -> dict[int, tuple[int, int, int]]:
    """``pid -> (RANK, LOCAL_RANK, GROUP_RANK)`` from the ``perfgate/rank:R:L:G`` marks (the first
    well-formed one of each process)."""
    out: dict[int, tuple[int, int, int]] = {}
    prefix = MARK_RANK + ":"
    for text, pid in zip(marks["text"].tolist(), marks["pid"].tolist()):
        if not isinstance(text, str) or not text.startswith(prefix) or int(pid) in out:
            continue
        parts = text[len(prefix):].split(":")
        if len(parts) == 3 and all(p.isdigit() for p in parts):
            out[int(pid)] = (int(parts[0]), int(parts[1]), int(parts[2]))
    return out


def node_order(reported: Sequence[dict[int, tuple[int, int, int]]]) -> list[int]:
    """Each report's node: the one GROUP_RANK its processes reported where every report has one and
    no two share it (ranked, so the nodes are 0..N-1), else its place in the order given."""
    groups = [{g for _, _, g in r.values()} for r in reported]
    if all(len(g) == 1 for g in groups) and len({min(g) for g in groups}) == len(groups):
        by_group = sorted(range(len(groups)), key=lambda k: min(groups[k]))
        return [by_group.index(k) for k in range(len(groups))]
    return list(range(len(reported)))


def node_processes(node: int, pids: np.ndarray, reported: dict[int, tuple[int, int, int]]) -> dict[int, NodeProcess]:
    """The merged pid of each process of one node (``node << 16 | place + 1``), ordered by the
    LOCAL_RANK reported, then by pid (torchrun's agent and unmarked processes after the ranks)."""
    key = sorted((reported[p][1] if p in reported else 1 << 20, p) for p in {int(x) for x in pids})
    if len(key) >= 1 << PLACE_BITS:
        raise TraceError(f"node {node}: {len(key)} processes, more than a merged trace holds")
    out = {}
    for place, (_, pid) in enumerate(key):
        rank = reported.get(pid)
        out[node << PLACE_BITS | (place + 1)] = NodeProcess(
            node=node, pid=pid, rank=rank[0] if rank else None, local_rank=rank[1] if rank else None)
    return out


def _new_pids(old: np.ndarray, mapping: dict[int, int], unknown: int = 0) -> np.ndarray:
    """Each pid's merged pid (``unknown`` for a pid the mapping does not have)."""
    keys = np.array(sorted(mapping), dtype=np.int64)
    values = np.array([mapping[k] for k in sorted(mapping)], dtype=np.int64)
    old = old.astype(np.int64)
    if not keys.size:
        return np.full(old.shape, unknown, dtype=np.int64)
    at = np.minimum(np.searchsorted(keys, old), keys.size - 1)
    return np.where(keys[at] == old, values[at], unknown)


def _with_pid(tid: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Thread ids with their pid bits replaced (NO_ID and -1 kept)."""
    out = (tid & ~PID_BITS) | (pid.astype(np.int64) << 24)
    return np.where(tid < 0, tid, out)


def _shift(values: np.ndarray, by: int) -> np.ndarray:
    return np.where(values >= 0, values + by, values)


def merge_traces(traces: Sequence[Trace]) -> Trace:
    """One Trace of a job's nodes (the module's docstring says how). One trace is returned as is."""
    if len(traces) == 1:
        return traces[0]
    if len(traces) > MAX_NODES:
        raise TraceError(f"{len(traces)} reports: at most {MAX_NODES} nodes are merged")
    names = [str(t.path) for t in traces]
    offsets = clock_offsets([t.session_start_utc_ns for t in traces], names)
    reported = [reported_ranks(t.marks) for t in traces]
    nodes = node_order(reported)
    order = sorted(range(len(traces)), key=nodes.__getitem__)
    nvtx, marks, ops, processes, parts = [], [], [], {}, []
    strings: dict[int, str] = {}
    for k in order:
        t, node, off = traces[k], nodes[k], offsets[k]
        joined = t.gpu()[0] if len(t.ops) else None
        pids = np.concatenate([t.nvtx["pid"], t.marks["pid"], joined.pid if joined is not None else []])
        mine = node_processes(node, pids, reported[k])
        processes.update(mine)
        to_new = {p.pid: new for new, p in mine.items()}
        parts.append((t, node, off, to_new))
        pid = _new_pids(t.nvtx["pid"], to_new)
        nvtx.append(t.nvtx.assign(
            row_id=t.nvtx["row_id"] + node * ROW_STRIDE, start=t.nvtx["start"] + off, end=t.nvtx["end"] + off,
            pid=pid, global_tid=_with_pid(t.nvtx["global_tid"], pid),
            end_global_tid=np.where(t.nvtx["end_global_tid"] == NO_ID, NO_ID,
                                    _with_pid(t.nvtx["end_global_tid"], pid))))
        mark_pid = _new_pids(t.marks["pid"], to_new)
        marks.append(t.marks.assign(start=t.marks["start"] + off, pid=mark_pid,
                                    global_tid=_with_pid(t.marks["global_tid"], mark_pid)))
        strings.update({i + node * STRING_STRIDE: v for i, v in t.strings.items()})
        if joined is not None:
            ops.append(_node_ops(joined, node, off, to_new))
    merged_ops = _concat_ops(ops) if ops else None
    shifts = ", ".join(f"node {nodes[k]} {offsets[k] / 1e6:+.1f} ms" for k in order)
    note = (f"{len(traces)} nodes, one report each ({', '.join(names[k] for k in order)}), aligned on their "
            f"session start times: {shifts} (as close as the nodes' clocks agree)")
    cache = {} if merged_ops is None else {"ops": merged_ops, "launched": merged_ops}
    first = traces[order[0]]
    kept = {f.name: getattr(first, f.name) for f in fields(Trace)}
    return JobTrace(**{**kept, "nvtx": Columns.concat(nvtx), "marks": Columns.concat(marks).sorted_by("start"),
                       "strings": strings, "tables": frozenset(), "columns": {}, "capacity": {},
                       "session_start_utc_ns": min(t.session_start_utc_ns or 0 for t in traces),
                       "processes": processes, "notes": (note,), "_con": None, "_cache": cache},
                    parts=tuple(parts))


def _node_calls(parts: Sequence[tuple[Trace, int, int, dict[int, int]]], window: tuple[int, int]) -> ApiCalls:
    """The API calls of ``window`` (on the job's axis): each node's of its own window, added up,
    their name ids and kept calls' times and thread ids the merged trace's."""
    lo, hi = window
    counts: list[dict[int, int]] = [{}, {}, {}]
    busy, kept = 0, []
    for t, node, off, to_new in parts:
        api = t.gpu((lo - off, hi - off))[1] if len(t.ops) else None
        if api is None:
            continue
        busy += api.busy_ns
        for total, own in zip(counts, (api.count_by_name, api.count_by_name_open, api.ns_by_name_open)):
            for i, v in own.items():
                total[i + node * STRING_STRIDE] = total.get(i + node * STRING_STRIDE, 0) + v
        pid = _new_pids((api.kept_tid >> 24) & 0xFFFFFF, to_new, node << PLACE_BITS)
        kept.append((api.kept_start + off, api.kept_end + off, _with_pid(api.kept_tid, pid)))
    starts, ends, tids = (np.concatenate([k[i] for k in kept]) if kept else np.zeros(0, dtype=np.int64)
                          for i in range(3))
    return ApiCalls(start_ns=lo, end_ns=hi, busy_ns=busy, count_by_name=counts[0], count_by_name_open=counts[1],
                    ns_by_name_open=counts[2], kept_start=starts, kept_end=ends, kept_tid=tids)


def _node_ops(ops: GpuOps, node: int, off: int, to_new: dict[int, int]) -> GpuOps:
    """One node's GPU ops (launching calls joined) on the job's axis, with merged pids, ids."""
    pid = _new_pids(ops.pid, to_new)
    return replace(ops, start=ops.start + off, end=ops.end + off, pid=pid.astype(np.int32),
                   pid_rest=np.broadcast_to(ops.pid_rest, ops.pid.shape).copy(),
                   device_id=(ops.device_id + node * DEVICE_STRIDE).astype(ops.device_id.dtype),
                   name_id=np.where(ops.name_id >= 0, ops.name_id + node * STRING_STRIDE, -1).astype(np.int32),
                   api_start=_shift(ops.api_start, off), api_end=_shift(ops.api_end, off),
                   api_tid=_with_pid(np.asarray(ops.api_tid, dtype=np.int64), pid))


def _concat_ops(parts: list[GpuOps]) -> GpuOps:
    return GpuOps(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(GpuOps)})


def job_reports(folder: Path) -> list[Path]:
    """The reports of a job in ``folder``, one per node: its SQLite exports, else its ``.nsys-rep``
    files, by name, numbers in it by value (``node_2`` before ``node_10``). TraceError when it
    holds neither."""
    for suffix in (".sqlite", ".nsys-rep"):
        found = sorted((p for p in folder.iterdir() if p.suffix == suffix and p.is_file()), key=_by_number)
        if found:
            return found
    raise TraceError(f"{folder}: a folder holding no nsys report (.sqlite or .nsys-rep, one per node of a job)")


def _by_number(path: Path) -> list[tuple[int, int | str]]:
    return [(1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", path.name)]


def load_job(paths: Sequence[str | Path]) -> Trace:
    """The SQLite exports of a job's nodes (one or more), read and merged into one Trace."""
    from perfgate.trace.export import load_trace

    return merge_traces([load_trace(p) for p in paths])
