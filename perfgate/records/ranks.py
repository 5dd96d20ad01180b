"""The records of a multi-process job (torchrun, DDP): per-rank step statistics, NCCL
communication and NCCL's calls per step, written into the analysis record by ``Analysis.to_dict`` and read back by
``Analysis.from_dict`` (perfgate.records.model). Records layer: imports nothing of perfgate."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankStats:
    """One process of a multi-process job (perfgate/analysis/ranks.py). ``rank``: the order in which
    the processes started (torchrun starts local ranks in order: on one node, the RANK); in a job of
    several nodes (one report each: perfgate/trace/nodes.py) the global rank, with its ``node``
    (torchrun's GROUP_RANK) and ``local_rank``, None on one node."""

    rank: int
    pid: int
    steps: int                        # measured steps of this process
    step_time_ms: float               # median iteration period of its measured steps
    phase_cpu_ms: dict[str, float]    # CPU time per step of each phase on this process
    node: int | None = None           # the node of a multi-node job (its report's place)
    local_rank: int | None = None     # the rank on its node


@dataclass(frozen=True)
class NodeProcess:
    """A process of one node's report in a job of several (perfgate/trace/nodes.py): its node, its
    pid there, and its ranks (as the process reported them, else by place: node x processes per
    node + place among the node's processes by pid)."""

    node: int
    pid: int                          # the pid on its node
    rank: int | None                  # global rank (None: a process that is no rank, torchrun's agent)
    local_rank: int | None


def rank_name(rank: int, node: int | None = None) -> str:
    """``rank 3``, or ``node 1 rank 3`` in a job of several nodes: how every report names a rank."""
    return f"rank {rank}" if node is None else f"node {node} rank {rank}"


@dataclass(frozen=True)
class RankComm:
    """One rank's NCCL kernels in its measured steps, per step (perfgate/analysis/comm.py)."""

    rank: int
    pid: int
    devices: tuple[str, ...]
    kernels_per_step: float
    comm_ms: float                    # |union of its NCCL kernels|
    exposed_ms: float                 # of which no compute kernel ran on the same GPU


@dataclass(frozen=True)
class CommStats:
    """The job's NCCL communication per step and rank (perfgate/analysis/comm.py)."""

    kernels_per_step: float
    comm_ms: float
    exposed_ms: float
    overlap_fraction: float | None    # overlapped / communication time (None: no length)
    ranks: tuple[RankComm, ...]



@dataclass(frozen=True)
class CollectiveCount:
    """One NCCL call and the phase it was made in, per step and rank (perfgate/analysis/comm.py)."""

    call: str                         # NCCL's name: AllReduce, Broadcast, AllGather, Send, ...
    phase: str | None                 # the step's phase it was made in (None: in no phase)
    per_step: float


@dataclass(frozen=True)
class CollectiveCalls:
    """The job's NCCL calls (collectives, sends and receives) per step and rank, counted from
    NCCL's own NVTX ranges: in every launch, the timing launches' NVTX-only traces included."""

    per_step: float
    counts: tuple[CollectiveCount, ...]   # by call and phase, the most frequent first
