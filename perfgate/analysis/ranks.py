"""Per-rank numbers of a multi-process job (torchrun, one process per rank): each process's median
iteration period, its phases' CPU time per step, and the skew between ranks per step.

A process's rank is its place in the order of process ids: torchrun starts the local ranks of a
node in order, so on one node this is the ``RANK`` each process was given. Nothing here when fewer
than two processes have measured steps (a single-process analysis is unchanged)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.model import RankStats


def rank_stats(measured: pd.DataFrame, period_ns: np.ndarray,
               instances: pd.DataFrame) -> tuple[tuple[RankStats, ...], float | None]:
    """(per-rank stats, rank skew in ms) from the measured steps (sorted by pid, start), their
    iteration periods and the phase instances (``pid``, ``phase``, ``start``, ``end``)."""
    pids = np.unique(measured["pid"].to_numpy())
    if pids.size < 2:
        return (), None
    step_pid = measured["pid"].to_numpy()
    inst_dur = (instances["end"] - instances["start"]).to_numpy() if len(instances) else np.zeros(0)
    ranks: list[RankStats] = []
    periods: list[np.ndarray] = []
    for rank, pid in enumerate(pids):
        mine = period_ns[step_pid == pid] / 1e6
        periods.append(mine)
        own = (instances["pid"].to_numpy() == pid) if len(instances) else np.zeros(0, dtype=bool)
        per_phase = pd.Series(inst_dur[own]).groupby(instances["phase"].to_numpy()[own], sort=False).sum()
        ranks.append(RankStats(rank=rank, pid=int(pid), steps=int(mine.size),
                               step_time_ms=float(np.median(mine)),
                               phase_cpu_ms={str(n): float(v) / 1e6 / max(mine.size, 1)
                                             for n, v in per_phase.items()}))
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
