"""Phases: the NVTX ranges directly inside the measured steps (same thread), grouped by folded
name, with CPU time and two GPU times: PyTorch-correct process-time attribution (``gpu_ms``) and
nsys's thread projection (``gpu_thread_proj_ms``)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.analysis.intervals import union_length_by_group
from perfgate.analysis.steps import fold_name, top_level_mask
from perfgate.model import PhaseStats


def phase_instances(nvtx: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """NVTX rows that are direct children of a measured step on the step's thread, with
    ``phase`` (folded name) and ``step_index`` (position of the step in ``measured``)."""
    parts: list[pd.DataFrame] = []
    steps = measured.reset_index(drop=True)
    for tid, st in steps.groupby("global_tid", sort=False):
        rows = nvtx[nvtx["global_tid"] == tid].sort_values("start", kind="stable")
        starts = rows["start"].to_numpy()
        i = np.searchsorted(starts, st["start"].to_numpy(), side="left")
        j = np.searchsorted(starts, st["end"].to_numpy(), side="right")
        lengths = j - i
        if lengths.sum() == 0:
            continue
        step_pos = np.repeat(st.index.to_numpy(), lengths)
        offsets = np.repeat(i - np.r_[0, np.cumsum(lengths)[:-1]], lengths)
        idx = np.arange(lengths.sum()) + offsets
        cand = rows.iloc[idx].assign(step_index=step_pos)
        step_end = steps["end"].to_numpy()[step_pos]
        step_row = steps["row_id"].to_numpy()[step_pos]
        cand = cand[(cand["end"].to_numpy() <= step_end) & (cand["row_id"].to_numpy() != step_row)]
        parts.append(cand)
    if not parts:
        return nvtx.iloc[:0].assign(step_index=pd.Series(dtype="int64"), phase=pd.Series(dtype=object))
    cand = pd.concat(parts, ignore_index=True)
    direct = top_level_mask(cand["start"].to_numpy(), cand["end"].to_numpy(), cand["step_index"].to_numpy())
    inst = cand[direct].reset_index(drop=True)
    names = pd.unique(inst["name"])
    folded = {n: fold_name(n) for n in names}
    return inst.assign(phase=inst["name"].map(folded))


def attribute_gpu_time(instances: pd.DataFrame, launches: pd.DataFrame) -> np.ndarray:
    """GPU busy ns per phase instance: each GPU op goes to the phase instance of its process that
    was open (on any thread) when its launching API call started; per instance, the union of its
    ops' intervals on each device, summed over devices. Ops without a traced launch are skipped."""
    busy = np.zeros(len(instances), dtype=np.int64)
    ops = launches[launches["api_tid"] >= 0]
    if ops.empty or instances.empty:
        return busy
    op_inst: list[np.ndarray] = []
    op_rows: list[np.ndarray] = []
    ops_by_pid = dict(tuple(ops.groupby("pid", sort=False)))
    for pid, inst in instances.groupby("pid", sort=False):
        pops = ops_by_pid.get(pid)
        if pops is None:
            continue
        order = np.argsort(inst["start"].to_numpy(), kind="stable")
        s = inst["start"].to_numpy()[order]
        e = inst["end"].to_numpy()[order]
        pos = inst.index.to_numpy()[order]
        api = pops["api_start"].to_numpy()
        k = np.searchsorted(s, api, side="right") - 1
        ok = k >= 0
        ok[ok] = api[ok] <= e[k[ok]]
        op_inst.append(pos[k[ok]])
        op_rows.append(pops.index.to_numpy()[ok])
    if not op_inst:
        return busy
    inst_idx = np.concatenate(op_inst)
    rows = np.concatenate(op_rows)
    sel = launches.loc[rows]
    dev = sel["device_id"].to_numpy()
    dev_codes, dev_idx = np.unique(dev, return_inverse=True)
    group = inst_idx.astype(np.int64) * max(len(dev_codes), 1) + dev_idx
    codes, lengths = union_length_by_group(group, sel["start"].to_numpy(), sel["end"].to_numpy())
    np.add.at(busy, codes // max(len(dev_codes), 1), lengths)
    return busy


def phase_stats(instances: pd.DataFrame, measured_steps: int, total_step_ns: int,
                gpu_busy_ns: np.ndarray | None, projected: pd.DataFrame | None) -> dict[str, PhaseStats]:
    """Per folded phase name: CPU totals, share of step time, attributed and projected GPU time.
    Ordered by first appearance inside a step."""
    if instances.empty:
        return {}
    df = instances.assign(dur=instances["end"] - instances["start"])
    if gpu_busy_ns is not None:
        df = df.assign(gpu=gpu_busy_ns)
    proj_by_row: pd.Series | None = None
    if projected is not None:
        proj_by_row = (projected["proj_end"] - projected["proj_start"]).set_axis(projected["row_id"])
        df = df.assign(proj=df["row_id"].map(proj_by_row).fillna(0).astype("int64"))
    order = df.sort_values(["step_index", "start"]).drop_duplicates("phase")["phase"]
    out: dict[str, PhaseStats] = {}
    steps = max(measured_steps, 1)
    for name in order:
        g = df[df["phase"] == name]
        dur_ms = g["dur"].to_numpy() / 1e6
        total_ms = float(dur_ms.sum())
        gpu_ms = float(g["gpu"].sum()) / 1e6 if gpu_busy_ns is not None else None
        proj_ms = float(g["proj"].sum()) / 1e6 if proj_by_row is not None else None
        out[name] = PhaseStats(
            name=name,
            count=len(g),
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
