"""Per-rank numbers of a multi-process job (torchrun, one process per rank): each process's median
iteration period, its phases' CPU time per step, and the skew between ranks per step.

A process's rank is its place in the order of process ids: torchrun starts the local ranks of a
node in order, so on one node this is the ``RANK`` each process was given. Nothing here when fewer
than two processes have measured steps (a single-process analysis is unchanged)."""
from __future__ import annotations

import numpy as np

from perfgate.analysis.intervals import group_sums
from perfgate.records.ranks import RankStats
from perfgate.trace.columns import Columns, factorize


def rank_stats(measured: Columns, period_ns: np.ndarray,
               instances: Columns) -> tuple[tuple[RankStats, ...], float | None]:
    """(per-rank stats, rank skew in ms) from the measured steps (sorted by pid, start), their
    iteration periods and the phase instances (``pid``, ``phase``, ``start``, ``end``)."""
    pids = np.unique(measured["pid"])
    if pids.size < 2:
        return (), None
    step_pid = measured["pid"]
    inst_dur = instances["end"] - instances["start"]
    inst_pid = instances["pid"]
    ranks: list[RankStats] = []
    periods: list[np.ndarray] = []
    for rank, pid in enumerate(pids):
        mine = period_ns[step_pid == pid] / 1e6
        periods.append(mine)
        own = inst_pid == pid
        codes, phases = factorize(instances["phase"][own])           # in first-seen order
        _, _, per_phase = group_sums(codes, inst_dur[own])          # every code has an instance
        ranks.append(RankStats(rank=rank, pid=int(pid), steps=int(mine.size),
                               step_time_ms=float(np.median(mine)),
                               phase_cpu_ms={str(n): float(v) / 1e6 / max(mine.size, 1)
                                             for n, v in zip(phases, per_phase.tolist())}))
    return tuple(ranks), skew_ms(periods)


def skew_ms(periods: list[np.ndarray]) -> float:
    """Median over step positions of (slowest - fastest rank's period): the k-th measured step of
    each rank is one step of the job (DDP keeps ranks in step); positions beyond the rank with the
    fewest steps are left out."""
    n = min(p.size for p in periods)
    if n == 0:
        return 0.0
    stacked = np.stack([p[:n] for p in periods])
    return float(np.median(stacked.max(axis=0) - stacked.min(axis=0)))
