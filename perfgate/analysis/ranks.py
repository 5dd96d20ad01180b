"""Per-rank numbers of a multi-process job (torchrun, one process per rank): each process's median
iteration period, its phases' CPU time per step, and the skew between ranks per step.

A process's rank is its place in the order of process ids: torchrun starts the local ranks of a
node in order, so on one node this is the ``RANK`` each process was given. In a job of several
nodes merged into one trace (perfgate/trace/nodes.py) each process also has its node and local rank,
and its global rank is the one it reported, else its place in the order of the merged pids (node,
then local rank). Nothing here when fewer than two processes have measured steps (a single-process
analysis is unchanged)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from perfgate.analysis.intervals import group_sums
from perfgate.records.ranks import CommStats, NodeProcess, RankStats
from perfgate.trace.columns import Columns, factorize


def rank_stats(measured: Columns, period_ns: np.ndarray, instances: Columns,
               processes: Mapping[int, NodeProcess] | None = None) -> tuple[tuple[RankStats, ...], float | None]:
    """(per-rank stats, rank skew in ms) from the measured steps (sorted by pid, start), their
    iteration periods and the phase instances (``pid``, ``phase``, ``start``, ``end``);
    ``processes``: a multi-node trace's processes by merged pid (``Trace.processes``)."""
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
    if processes:
        ranks = node_ranks(ranks, processes)
    return tuple(ranks), skew_ms(periods)


def node_ranks(ranks: list[RankStats], processes: Mapping[int, NodeProcess]) -> list[RankStats]:
    """The ranks of a multi-node job (in merged-pid order) with their node, local rank, global
    rank (as reported, else their place) and the pid on their node."""
    out = []
    local: dict[int, int] = {}
    for place, r in enumerate(ranks):
        p = processes.get(r.pid)
        if p is None:
            out.append(r)
            continue
        nth = local[p.node] = local.get(p.node, -1) + 1
        out.append(replace(r, rank=p.rank if p.rank is not None else place, pid=p.pid, node=p.node,
                           local_rank=p.local_rank if p.local_rank is not None else nth))
    return out


def node_spread_ms(measured: Columns, processes: Mapping[int, NodeProcess]) -> float | None:
    """How far apart the nodes of a job run on the aligned time axis: the median over step
    positions of the spread between nodes of their ranks' mean k-th measured step start, in ms.
    DDP keeps the ranks in step (each waits for the others' gradients), so this is about the error
    of the clocks' alignment (perfgate/trace/nodes.py) plus the ranks' own spread. None for one node."""
    by_node: dict[int, list[np.ndarray]] = {}
    for pid in np.unique(measured["pid"]).tolist():
        p = processes.get(int(pid))
        if p is not None:
            by_node.setdefault(p.node, []).append(measured["start"][measured["pid"] == pid])
    n = min((s.size for starts in by_node.values() for s in starts), default=0)
    if len(by_node) < 2 or n == 0:
        return None
    means = np.stack([np.mean([s[:n] for s in starts], axis=0) for starts in by_node.values()])
    return float(np.median(means.max(axis=0) - means.min(axis=0))) / 1e6


def relabeled_comm(comm: CommStats | None, ranks: tuple[RankStats, ...]) -> CommStats | None:
    """``comm`` with each rank's number and pid those of ``ranks`` (the same processes, in the same
    order: both number the measured processes by pid)."""
    if comm is None or len(comm.ranks) != len(ranks):
        return comm
    return replace(comm, ranks=tuple(replace(c, rank=r.rank, pid=r.pid) for c, r in zip(comm.ranks, ranks)))


def skew_ms(periods: list[np.ndarray]) -> float:
    """Median over step positions of (slowest - fastest rank's period): the k-th measured step of
    each rank is one step of the job (DDP keeps ranks in step); positions beyond the rank with the
    fewest steps are left out."""
    n = min(p.size for p in periods)
    if n == 0:
        return 0.0
    stacked = np.stack([p[:n] for p in periods])
    return float(np.median(stacked.max(axis=0) - stacked.min(axis=0)))
