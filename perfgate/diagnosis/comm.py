"""Reasons from communication (NCCL kernels, perfgate/analysis/comm.py) when a multi-GPU job's step
time regresses: communication that compute no longer hides, and more collectives per step. Each is a
record of :data:`COMM_RULES` (an id, a test of the change, the words it says); the ones that fire make
one reason, exposure first, the likely edit last.

Exposed communication grows on every rank when communication itself changed. A straggler makes the
other ranks' NCCL kernels wait for it (an NCCL kernel runs until every rank has joined), which grows
their exposed time but not the straggler's own: the change counted is therefore the smallest growth
over the ranks (the rank that waits least), so a straggler is not taken for a communication change.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from perfgate.analysis.comm import NCCL_KERNEL
from perfgate.diagnosis.records import Reason
from perfgate.model import CommStats

Kernels = Mapping[str, Mapping[str, list[float]]]    # TraceFacts.kernels_by_phase

MIN_EXPOSED_MS = 0.1        # exposed growth (ms/step) below which it is no reason
MIN_SHARE_OF_STEP = 0.1     # ... nor below this share of the step-time change
LOST_OVERLAP = 0.10         # overlap share falling by this much (absolute) is named
MORE_KERNELS = 0.25         # NCCL kernels per step growing by this share (and by one at least)
_COLLECTIVE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+?)(?:_|\(|$)")
_WORDS = {"AllReduce": "all-reduce", "AllGather": "all-gather", "ReduceScatter": "reduce-scatter",
          "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "send/recv"}


def collective(kernel: str) -> str:
    """``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``all-reduce``."""
    m = _COLLECTIVE.search(kernel)
    return "communication" if m is None else _WORDS.get(m.group(1), m.group(1))


def by_collective(kernels: Kernels) -> dict[tuple[str, str], list[float]]:
    """(collective, phase it is launched in) -> [kernels, ms] per step, from TraceFacts."""
    out: dict[tuple[str, str], list[float]] = {}
    for phase, named in kernels.items():
        for name, (count, ms) in named.items():
            if NCCL_KERNEL.search(name):
                v = out.setdefault((collective(name), phase), [0.0, 0.0])
                v[0] += count
                v[1] += ms
    return out


def without_communication(kernels: Kernels) -> dict[str, dict[str, list[float]]]:
    """TraceFacts.kernels_by_phase without NCCL kernels: their changes are this module's to name
    (a kernel-launch difference would guess "more layers?" for a smaller bucket size)."""
    return {phase: {n: v for n, v in named.items() if not NCCL_KERNEL.search(n)}
            for phase, named in kernels.items()}


@dataclass(frozen=True)
class CommChange:
    """What the rules read: both sides' communication, the exposed growth of the rank that waits
    least, and per collective and phase the NCCL kernels of each side (empty without facts)."""

    base: CommStats
    cur: CommStats
    step_delta_ms: float
    exposed_delta_ms: float
    base_collectives: dict[tuple[str, str], list[float]]
    cur_collectives: dict[tuple[str, str], list[float]]

    def main(self) -> tuple[str, str | None]:
        """The collective that takes most of the current side's NCCL time, and its phase."""
        if not self.cur_collectives:
            return "communication", None
        (name, phase), _ = max(self.cur_collectives.items(), key=lambda kv: kv[1][1])
        return name, phase


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value * 100:.0f} %"


def exposed(change: CommChange) -> str | None:
    """Communication that compute no longer hides: exposed NCCL time grew on every rank."""
    if change.exposed_delta_ms < max(MIN_EXPOSED_MS, MIN_SHARE_OF_STEP * change.step_delta_ms):
        return None
    b, c = change.base.overlap_fraction, change.cur.overlap_fraction
    name, phase = change.main()
    numbers = (f"exposed communication {change.exposed_delta_ms:+.1f} ms/step, "
               f"overlap {_pct(b)} -> {_pct(c)}")
    if b is not None and c is not None and b - c >= LOST_OVERLAP:
        how = "no longer overlaps" if c < b / 2 else "overlaps less with"
        return f"{name} {how} {phase or 'compute'}: {numbers}"
    return (f"{name} takes longer: {numbers}, NCCL time {change.base.comm_ms:.1f} -> "
            f"{change.cur.comm_ms:.1f} ms/step")


def more_kernels(change: CommChange) -> str | None:
    """More collectives per step: smaller DDP buckets, or an all-reduce at every micro-step."""
    b, c = change.base.kernels_per_step, change.cur.kernels_per_step
    if c - b < max(1.0, MORE_KERNELS * b):
        return None
    grew = sorted(((k, change.base_collectives.get(k, [0.0, 0.0])[0], v[0])
                   for k, v in change.cur_collectives.items()), key=lambda x: x[1] - x[2])
    detail = "".join(f" ({name} {bc:.0f} -> {cc:.0f} in {phase})" for (name, phase), bc, cc in grew[:1] if cc > bc)
    return (f"NCCL kernels per step {b:.0f} -> {c:.0f}{detail}: smaller DDP buckets (bucket_cap_mb), or "
            "gradients all-reduced at every micro-step (no_sync dropped)?")


@dataclass(frozen=True)
class CommRule:
    id: str
    says: Callable[[CommChange], str | None]
    cause: str


#: In the order their words are joined: the effect on the step, then the likely edit.
COMM_RULES: tuple[CommRule, ...] = (
    CommRule("comm_exposed", exposed, "communication overlap"),
    CommRule("comm_kernels", more_kernels, "collectives per step"),
)


def exposed_growth(base: CommStats, cur: CommStats) -> float:
    """The smallest growth of exposed communication (ms/step) over the ranks of both sides (the job's
    when the sides have different ranks)."""
    if len(base.ranks) != len(cur.ranks) or not cur.ranks:
        return cur.exposed_ms - base.exposed_ms
    return min(c.exposed_ms - b.exposed_ms for b, c in zip(base.ranks, cur.ranks))


def comm_reason(base: CommStats | None, cur: CommStats | None, step_delta_ms: float,
                base_kernels: Kernels | None = None, cur_kernels: Kernels | None = None) -> Reason | None:
    """One reason from the rules of :data:`COMM_RULES` that fire, or None (also when a side has no
    communication). ``*_kernels``: TraceFacts.kernels_by_phase of each side, naming the collective
    and the phase it is launched in."""
    if base is None or cur is None:
        return None
    change = CommChange(base, cur, step_delta_ms, exposed_growth(base, cur),
                        by_collective(base_kernels or {}), by_collective(cur_kernels or {}))
    fired = [(rule, text) for rule in COMM_RULES if (text := rule.says(change)) is not None]
    if not fired:
        return None
    return Reason("comm:" + "+".join(r.id for r, _ in fired), change.main()[1],
                  max(change.exposed_delta_ms, 0.0), "; ".join(t for _, t in fired), fired[-1][0].cause)


def leads(reason: Reason, step_delta_ms: float) -> bool:
    """Whether a communication reason accounts for enough of the step-time change to come first."""
    return reason.ms >= max(MIN_EXPOSED_MS, MIN_SHARE_OF_STEP * step_delta_ms)
