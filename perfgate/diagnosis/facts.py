"""TraceFacts: the few things the rules need that an Analysis does not keep, read from the raw
events of a Trace (per measured step unless named otherwise). Stored in ``Diagnosis.to_dict()
["facts"]`` so that a baseline that keeps the diagnosis keeps them too."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perfgate.analysis import intervals
from perfgate.analysis.gpu_work import in_window
from perfgate.analysis.launches import join_launches
from perfgate.analysis.phases import phase_instances
from perfgate.analysis.steps import measured_iterations
from perfgate.diagnosis.evidence import H2D_PHASE, OUTSIDE_PHASES, kernel_class_counts, kernel_class_ms
from perfgate.model import Analysis, KernelStat

if TYPE_CHECKING:
    from perfgate.trace import Trace


@dataclass(frozen=True)
class TraceFacts:
    steps: int                                         # measured steps the facts are divided by
    gpu_ops: int = 0                                   # kernels + copies + memsets in the window
    kernels_per_step: float = 0.0
    kernel_ms_by_class: dict[str, float] = field(default_factory=dict)    # per step
    kernel_count_by_class: dict[str, float] = field(default_factory=dict)  # per step
    median_kernel_us: float | None = None
    h2d_copies_per_step: float = 0.0
    h2d_copy_ms_per_step: float = 0.0
    h2d_pageable_per_step: float = 0.0
    h2d_on_compute_stream_fraction: float | None = None  # H2D copy time on a stream that runs kernels
    h2d_overlap_fraction: float | None = None            # H2D copy time overlapping kernels (same GPU)
    sync_calls_per_step: float = 0.0
    sync_ms_per_step: float = 0.0
    h2d_syncs_per_step: float = 0.0                    # sync calls made inside the h2d phase
    sync_memcpy_per_step: float = 0.0                  # cudaMemcpy (no Async) calls
    idle_ms_per_step: float | None = None
    idle_by_phase_ms: dict[str, float] = field(default_factory=dict)  # innermost phase open on the CPU
    kernel_set_changes: int = 0                        # steps whose kernel-name set differs from the usual one
    cpu_only_steps: int = 0                            # measured steps with no GPU op at all (GPU runs)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceFacts:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def facts_from_mapping(value: Any) -> TraceFacts | None:
    """TraceFacts out of an ``Analysis.to_dict()``-like mapping that carries a diagnosis."""
    if isinstance(value, TraceFacts):
        return value
    if not isinstance(value, Mapping):
        return None
    diag = value.get("diagnosis")
    raw = diag.get("facts") if isinstance(diag, Mapping) else value.get("facts")
    if isinstance(raw, Mapping) and "steps" in raw:
        return TraceFacts.from_dict(raw)
    return None


# ----------------------------------------------------------------------------- from a Trace

SYNC_APIS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize", "cuStreamSynchronize",
                       "cuCtxSynchronize"})
SYNC_MEMCPY_RE = re.compile(r"^(cudaMemcpy|cuMemcpy)(?!.*Async)")
API_VERSION_RE = re.compile(r"_v\d+$")
H2D_COPY_KIND = 1
PAGEABLE_MEMORY_KIND = 0


def api_name(raw: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return API_VERSION_RE.sub("", raw)


def _overlap_ns(s: np.ndarray, e: np.ndarray, us: np.ndarray, ue: np.ndarray) -> int:
    """Length of the intervals [s, e) inside the disjoint sorted union [us, ue)."""
    if s.size == 0 or us.size == 0:
        return 0
    prefix = np.r_[0, np.cumsum(ue - us)]

    def covered_before(t: np.ndarray) -> np.ndarray:   # union length in (-inf, t]
        i = np.searchsorted(us, t, side="right")       # segments starting at or before t
        full = prefix[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.minimum(t, ue[np.maximum(i - 1, 0)]) - us[np.maximum(i - 1, 0)], 0)
        return np.where(i > 0, full + np.maximum(last, 0), 0)

    return int((covered_before(e) - covered_before(s)).sum())


def _pids(frame: pd.DataFrame) -> np.ndarray:
    """Process ids of a frame's rows (its ``pid`` column, else decoded from ``global_tid``)."""
    if "pid" in frame.columns:
        return frame["pid"].to_numpy()
    return (frame["global_tid"].to_numpy() >> 24) & 0xFFFFFF


def _idle_by_phase(ops: pd.DataFrame, phases: pd.DataFrame, lo: int, hi: int) -> tuple[float, dict[str, float]]:
    """Idle ns summed over devices, and by the phase open on the CPU (OUTSIDE_PHASES if none)."""
    total = 0
    by_phase: dict[str, float] = {}
    phase_pid = _pids(phases)
    for _, dev_ops in ops.groupby("device_id", sort=True):
        gs, ge = intervals.gaps(dev_ops["start"].to_numpy(), dev_ops["end"].to_numpy(), lo, hi)
        idle = int((ge - gs).sum())
        total += idle
        inside = 0
        # only the phases of the processes that use this GPU: in a multi-process (DDP) trace every
        # rank's phases are open at once, and each GPU's idle time belongs to its own rank's phase
        mine = phases[np.isin(phase_pid, pd.unique(_pids(dev_ops)))] if len(phases) else phases
        for name, rows in mine.groupby("phase", sort=True):
            us, ue = intervals.union(rows["start"].to_numpy(), rows["end"].to_numpy())
            ns = _overlap_ns(gs, ge, us, ue)
            by_phase[name] = by_phase.get(name, 0.0) + ns
            inside += ns
        by_phase[OUTSIDE_PHASES] = by_phase.get(OUTSIDE_PHASES, 0.0) + max(0, idle - inside)
    return float(total), by_phase


def _kernel_set_changes(kernels: pd.DataFrame, steps: pd.DataFrame) -> tuple[int, int]:
    """(steps whose kernel-name set differs from the most common one, steps launching nothing).
    A kernel belongs to the iteration of its process in which its launch started."""
    if len(steps) < 3:
        return 0, 0
    t = np.where(kernels["api_start"].to_numpy() >= 0, kernels["api_start"].to_numpy(),
                 kernels["start"].to_numpy())
    names = kernels["name_id"].to_numpy()
    kpid = kernels["pid"].to_numpy()
    end_col = "period_end" if "period_end" in steps.columns else "end"
    sets: list[frozenset[int]] = []
    for pid, st in steps.groupby("pid", sort=False):
        mine = kpid == pid
        kt, kn = t[mine], names[mine]
        order = np.argsort(kt, kind="stable")
        kt, kn = kt[order], kn[order]
        lo = np.searchsorted(kt, st["start"].to_numpy(), side="left")
        hi = np.searchsorted(kt, st[end_col].to_numpy(), side="left")
        sets.extend(frozenset(kn[a:b].tolist()) for a, b in zip(lo, hi))
    counts: dict[frozenset[int], int] = {}
    for ks in sets:
        counts[ks] = counts.get(ks, 0) + 1
    usual = max(counts, key=lambda k: counts[k])
    return sum(1 for ks in sets if ks != usual), sum(1 for ks in sets if not ks)


def trace_facts(trace: Trace, analysis: Analysis) -> TraceFacts:
    """TraceFacts of the measured window of ``analysis``, read from the raw events of ``trace``."""
    n = max(analysis.steps.count, 1)
    lo, hi = analysis.steps.window_start_ns, analysis.steps.window_end_ns
    ops = trace.gpu_ops
    ops = ops[(ops["start"] < hi) & (ops["end"] > lo)]
    if ops.empty:
        return TraceFacts(steps=n)
    ops = ops.assign(start=ops["start"].clip(lower=lo), end=ops["end"].clip(upper=hi))
    # kernels and copies are the analysis's: launched in the window (a loop that runs ahead of the
    # GPU launches work that runs after the window); idle is about ops overlapping it
    launched = join_launches(trace.gpu_ops, trace.runtime)
    launched = launched[in_window(launched, lo, hi).to_numpy()]
    kernels = launched[launched["kind"] == "kernel"]
    names = {int(i): trace.string(i) for i in pd.unique(kernels["name_id"])}
    dur_ms = (kernels["end"] - kernels["start"]).to_numpy() / 1e6
    by_name = pd.DataFrame({"name_id": kernels["name_id"].to_numpy(), "ms": dur_ms}).groupby("name_id")["ms"]
    stats = tuple(KernelStat(name=names[int(i)], count=int(c), total_ms=float(t))
                  for i, c, t in zip(by_name.size().index, by_name.size(), by_name.sum()))
    class_ms = {k: v / n for k, v in kernel_class_ms(stats).items()}
    class_counts = {k: v / n for k, v in kernel_class_counts(stats).items()}

    copies = launched[(launched["kind"] == "memcpy") & (launched["copy_kind"] == H2D_COPY_KIND)]
    cs, ce = copies["start"].to_numpy(), copies["end"].to_numpy()
    copy_ns = int((ce - cs).sum())
    overlap_ns, on_compute_ns = 0, 0
    for dev, dev_copies in copies.groupby("device_id", sort=False):
        dev_kernels = kernels[kernels["device_id"] == dev]
        us, ue = intervals.union(dev_kernels["start"].to_numpy(), dev_kernels["end"].to_numpy())
        overlap_ns += _overlap_ns(dev_copies["start"].to_numpy(), dev_copies["end"].to_numpy(), us, ue)
        compute_streams = set(dev_kernels["stream_id"].tolist())
        on = dev_copies[dev_copies["stream_id"].isin(compute_streams)]
        on_compute_ns += int((on["end"] - on["start"]).sum())

    rt = trace.runtime
    rt = rt[(rt["start"] >= lo) & (rt["start"] < hi)]
    rt_names = {int(i): api_name(trace.string(i)) for i in pd.unique(rt["name_id"])}
    rt_name = rt["name_id"].map(rt_names)
    syncs = rt[rt_name.isin(SYNC_APIS).to_numpy()]
    sync_memcpy = rt[rt_name.map(lambda s: bool(SYNC_MEMCPY_RE.match(s))).to_numpy(dtype=bool)] \
        if len(rt) else rt

    steps = measured_iterations(trace.nvtx, analysis.steps)
    phases = phase_instances(trace.nvtx, steps) if len(steps) else steps.assign(phase=[])
    h2d = phases[phases["phase"] == H2D_PHASE] if len(phases) else phases
    h2d_syncs = 0
    for tid, ranges in h2d.groupby("global_tid", sort=False):
        t = np.sort(syncs.loc[syncs["global_tid"] == tid, "start"].to_numpy())
        i = np.searchsorted(t, ranges["start"].to_numpy(), side="left")
        j = np.searchsorted(t, ranges["end"].to_numpy(), side="right")
        h2d_syncs += int((j - i).sum())
    idle_ns, idle_phase_ns = _idle_by_phase(ops, phases, lo, hi)
    ndev = max(ops["device_id"].nunique(), 1)
    changes, empty_steps = _kernel_set_changes(kernels, steps)
    return TraceFacts(
        steps=n, gpu_ops=len(ops),
        # the analysis's count (ops launched in the window), not ops overlapping it: one definition
        kernels_per_step=analysis.gpu.kernels_per_step if analysis.gpu is not None else len(kernels) / n,
        kernel_ms_by_class=class_ms, kernel_count_by_class=class_counts,
        median_kernel_us=float(np.median(dur_ms) * 1000) if dur_ms.size else None,
        h2d_copies_per_step=len(copies) / n, h2d_copy_ms_per_step=copy_ns / 1e6 / n,
        h2d_pageable_per_step=float((copies["src_kind"] == PAGEABLE_MEMORY_KIND).sum()) / n,
        h2d_on_compute_stream_fraction=on_compute_ns / copy_ns if copy_ns else None,
        h2d_overlap_fraction=overlap_ns / copy_ns if copy_ns else None,
        sync_calls_per_step=len(syncs) / n,
        sync_ms_per_step=float((syncs["end"] - syncs["start"]).sum()) / 1e6 / n,
        h2d_syncs_per_step=h2d_syncs / n, sync_memcpy_per_step=len(sync_memcpy) / n,
        idle_ms_per_step=idle_ns / 1e6 / n / ndev,
        idle_by_phase_ms={k: v / 1e6 / n / ndev for k, v in idle_phase_ns.items()},
        kernel_set_changes=changes, cpu_only_steps=empty_steps,
    )
