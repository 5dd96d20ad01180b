"""Phases: the NVTX ranges directly inside the measured iterations (same thread), grouped by folded
name, and ``between_steps`` (the time between step ranges that no range covers), with CPU time and two GPU times: PyTorch-correct process-time attribution (``gpu_ms``) and
nsys's thread projection (``gpu_thread_proj_ms``)."""
from __future__ import annotations

import numpy as np

from perfgate.analysis.intervals import BLOCK, top_level_mask, union_length_by_group
from perfgate.analysis.steps import BETWEEN_STEPS, phase_name
from perfgate.records.model import PhaseStats
from perfgate.trace.columns import Columns, factorize, first_seen, previous_max, run_starts
from perfgate.trace.gpu_ops import GpuOps


INSTANCE_COLUMNS = ("row_id", "start", "end", "global_tid", "pid")
#: A library's own ranges, never a phase of the step: NCCL's (domain ``NCCL``) are its calls, which
#: perfgate.analysis.comm counts; a DDP step without ranges of its own (autostep's periods) had its
#: broadcasts and all-reduces as phases ``NCCL:ncclBroadcast``, ``NCCL:ncclAllReduce`` (timm's train.py)
LIBRARY_RANGES = ("NCCL:",)


def phase_instances(nvtx: Columns, measured: Columns) -> Columns:
    """The phases of each measured iteration: the ``INSTANCE_COLUMNS`` of their ranges, with
    ``phase`` (name) and ``step_index`` (position of the step in ``measured``): NVTX ranges on the step's thread that are direct children of the
    iteration, i.e. inside the step range or between its end and the next step's start
    (``period_end``; the range's end when that column is absent), plus ``between_steps`` pieces:
    the parts of that gap no such range covers (synthetic rows, ``row_id`` -1)."""
    steps = measured if "period_end" in measured else measured.assign(period_end=measured["end"])
    # candidate rows as positions into ``nvtx``; the columns are copied once, for the instances kept
    n_tid, n_start, n_end, n_row = (nvtx[c] for c in ("global_tid", "start", "end", "row_id"))
    s_tid = steps["global_tid"]
    found_pos: list[np.ndarray] = []
    found_step: list[np.ndarray] = []
    for tid in first_seen(s_tid):                                   # threads, not steps
        mine = np.flatnonzero(s_tid == tid)
        pos = np.flatnonzero(n_tid == tid)
        pos = pos[np.argsort(n_start[pos], kind="stable")]          # the thread's ranges by start
        starts = n_start[pos]
        i = np.searchsorted(starts, steps["start"][mine], side="left")
        j = np.searchsorted(starts, steps["period_end"][mine], side="right")
        lengths = j - i
        if lengths.sum() == 0:
            continue
        step_pos = np.repeat(mine, lengths)
        offsets = np.repeat(i - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
        cand = pos[np.arange(lengths.sum()) + offsets]
        limit = steps["period_end"][step_pos]
        step_row = steps["row_id"][step_pos]
        keep = (n_end[cand] <= limit) & (n_row[cand] != step_row)
        # a range that straddles the step range's end is not a phase of the step
        range_end = steps["end"][step_pos]
        keep &= (n_end[cand] <= range_end) | (n_start[cand] >= range_end)
        found_pos.append(cand[keep])
        found_step.append(step_pos[keep])
    if found_pos:
        cand, step_index = np.concatenate(found_pos), np.concatenate(found_step)
        direct = top_level_mask(n_start[cand], n_end[cand], step_index)
        rows = cand[direct]
        del cand
        # only the columns the instances are used for: at 10^6 ranges each column is 8 MB
        codes, names = factorize(nvtx["name"][rows])
        library = np.array([str(n).startswith(LIBRARY_RANGES) for n in names], dtype=bool)[codes]
        rows, codes, step_index = rows[~library], codes[~library], step_index[direct][~library]
        inst = Columns({**{c: nvtx[c][rows] for c in INSTANCE_COLUMNS}, "step_index": step_index,
                        "phase": np.array([phase_name(n) for n in names] + [None], dtype=object)[codes]})
    else:
        inst = Columns({**{c: nvtx[c][:0] for c in INSTANCE_COLUMNS},
                        "step_index": np.zeros(0, dtype=np.int64), "phase": np.zeros(0, dtype=object)})
    between = between_steps_pieces(steps, inst)
    if between.empty:
        return inst
    return Columns.concat([inst, between]).sorted_by("step_index", "start")


def steps_key(steps: Columns) -> tuple[bytes, ...]:
    """What ``phase_instances(nvtx, steps)`` depends on in ``steps``, as a hashable key: equal
    keys, equal instances (the facts reuse the analysis's when their iterations are the same)."""
    ends = steps["period_end"] if "period_end" in steps else steps["end"]
    return tuple(np.ascontiguousarray(c, dtype=np.int64).tobytes()
                 for c in (steps["row_id"], steps["start"], steps["end"], ends, steps["global_tid"]))


def between_steps_pieces(steps: Columns, inst: Columns) -> Columns:
    """Per iteration, the stretches of [step range end, period end) that no phase instance of
    that iteration covers, as rows of phase ``between_steps`` on the step's thread."""
    lo = steps["end"]
    hi = steps["period_end"]
    n = len(steps)
    if n == 0 or not (hi > lo).any():
        return inst.take(np.zeros(0, dtype=np.int64))
    in_gap = inst["start"] >= lo[inst["step_index"]]
    g = inst.take(in_gap).sorted_by("step_index", "start")
    gi = g["step_index"]
    gs, ge = g["start"], g["end"]
    # cursor before each gap instance: max(step range end, ends of earlier instances of its step)
    first = run_starts(gi)
    prev_end = previous_max(ge, first)
    cursor = np.where(first, lo[gi], np.maximum(lo[gi], np.nan_to_num(prev_end, nan=-1))).astype(np.int64)
    piece_s = [cursor]
    piece_e = [np.minimum(gs, hi[gi])]
    piece_i = [gi]
    # the stretch after the last gap instance of each step (or the whole gap without any)
    last_end = lo.copy()
    if gi.size:
        np.maximum.at(last_end, gi, ge)
    piece_s.append(last_end)
    piece_e.append(hi)
    piece_i.append(np.arange(n))
    s = np.concatenate(piece_s)
    e = np.concatenate(piece_e)
    k = np.concatenate(piece_i)
    ok = e > s
    s, e, k = s[ok], e[ok], k[ok]
    return Columns({
        "row_id": np.full(s.size, -1, dtype=np.int64), "start": s, "end": e,
        "global_tid": steps["global_tid"][k], "pid": steps["pid"][k],
        "step_index": k, "phase": np.full(s.size, BETWEEN_STEPS, dtype=object),
    })


def open_instance(instances: Columns, pid: np.ndarray, t: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """Per event (process ``pid``, time ``t``): the row position in ``instances`` of the phase
    instance of that process open at ``t`` (on any thread; the one that started last when several
    are), -1 when none is. Events are looked up ``block`` at a time (bounded temporaries); int32
    positions where the instances are fewer than 2**31 (4 bytes per event less)."""
    inst = np.full(t.size, -1, dtype=np.int32 if len(instances) < 2**31 else np.int64)
    if t.size == 0 or instances.empty:
        return inst
    ipid = instances["pid"]
    order = np.lexsort((instances["start"], ipid))                  # by process, then start
    s = instances["start"][order]
    e = instances["end"][order]
    p = ipid[order]
    procs = np.unique(p)
    for at in range(0, t.size, block):
        tb, pb, out = t[at:at + block], pid[at:at + block], inst[at:at + block]
        if procs.size == 1:                                         # one process: no row selection
            k = np.searchsorted(s, tb, side="right") - 1
            ok = (k >= 0) & (pb == procs[0])
            ok[ok] = tb[ok] <= e[k[ok]]
            out[ok] = order[k[ok]]
            continue
        for one in procs:                                           # processes, not steps or rows
            a, b = np.searchsorted(p, one, side="left"), np.searchsorted(p, one, side="right")
            mine = np.flatnonzero(pb == one)
            tm = tb[mine]
            k = np.searchsorted(s[a:b], tm, side="right") - 1
            ok = k >= 0
            ok[ok] = tm[ok] <= e[a:b][k[ok]]
            out[mine[ok]] = order[k[ok] + a]
    return inst


def attribute_gpu_time(instances: Columns, ops: GpuOps, block: int = BLOCK) -> np.ndarray:
    """GPU busy ns per phase instance: each GPU op goes to the phase instance of its process that
    was open (on any thread) when its launching API call started; per instance, the union of its
    ops' intervals on each device, summed over devices. Ops without a traced launch are skipped."""
    busy = np.zeros(len(instances), dtype=np.int64)
    if instances.empty or not (ops.api_tid >= 0).any():
        return busy
    # one group per (instance, device), -1 for the ops of no instance; made in place, by blocks
    group = open_instance(instances, ops.pid, ops.api_start, block)
    dev_codes = np.unique(ops.device_id)
    ndev = max(dev_codes.size, 1)
    if len(instances) * ndev >= 2**31:
        group = group.astype(np.int64)
    for at in range(0, group.size, block):
        g = group[at:at + block]
        hit = (g >= 0) & (ops.api_tid[at:at + block] >= 0)
        g[~hit] = -1
        g[hit] = g[hit] * ndev + np.searchsorted(dev_codes, ops.device_id[at:at + block][hit])
    codes, lengths = union_length_by_group(group, ops.start, ops.end, block)
    del group
    np.add.at(busy, codes // ndev, lengths)
    return busy


def phase_stats(instances: Columns, measured_steps: int, total_step_ns: int,
                gpu_busy_ns: np.ndarray | None, projected: Columns | None) -> dict[str, PhaseStats]:
    """Per folded phase name: CPU totals, share of step time, attributed and projected GPU time.
    Ordered by first appearance inside a step."""
    if instances.empty:
        return {}
    dur = instances["end"] - instances["start"]
    proj: np.ndarray | None = None
    if projected is not None:
        proj = _by_row_id(projected["row_id"], projected["proj_end"] - projected["proj_start"], instances["row_id"])
    # each phase's rows by one code per row, not by comparing every row's name once per phase
    codes, names = factorize(instances["phase"])
    code_of = {name: code for code, name in enumerate(names)}
    by_time = np.lexsort((instances["start"], instances["step_index"]))
    order = [names[c] for c in first_seen(codes[by_time])]
    out: dict[str, PhaseStats] = {}
    steps = max(measured_steps, 1)
    for name in order:
        rows = codes == code_of[name]
        dur_ms = dur[rows] / 1e6
        total_ms = float(dur_ms.sum())
        gpu_ms = float(gpu_busy_ns[rows].sum()) / 1e6 if gpu_busy_ns is not None else None
        proj_ms = float(proj[rows].sum()) / 1e6 if proj is not None else None
        out[name] = PhaseStats(
            name=name,
            count=int(np.count_nonzero(rows)),
            cpu_total_ms=total_ms,
            cpu_median_ms=float(np.median(dur_ms)),
            cpu_mean_ms=float(dur_ms.mean()),
            cpu_per_step_ms=total_ms / steps,
            share_of_step=(total_ms * 1e6 / total_step_ns) if total_step_ns > 0 else 0.0,
            gpu_ms=gpu_ms,
            gpu_per_step_ms=None if gpu_ms is None else gpu_ms / steps,
            gpu_thread_proj_ms=proj_ms,
        )
    return out


def _by_row_id(row_id: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``values`` of the rows with the ``wanted`` row ids (row ids distinct), 0 where none has it."""
    order = np.argsort(row_id, kind="stable")
    ids = row_id[order]
    at = np.minimum(np.searchsorted(ids, wanted), max(ids.size - 1, 0))
    out = np.zeros(wanted.size, dtype=np.int64)
    if ids.size:
        hit = ids[at] == wanted
        out[hit] = values[order][at[hit]]
    return out
