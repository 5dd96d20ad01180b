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
from dataclasses import dataclass, field

from perfgate.analysis.comm import NCCL_KERNEL
from perfgate.records.diagnosis import Reason
from perfgate.records.model import Analysis, PhaseStats
from perfgate.records.ranks import CollectiveCalls, CommStats

Kernels = Mapping[str, Mapping[str, list[float]]]    # TraceFacts.kernels_by_phase

MIN_EXPOSED_MS = 0.1        # exposed growth (ms/step) below which it is no reason
MIN_SHARE_OF_STEP = 0.1     # ... nor below this share of the step-time change
LOST_OVERLAP = 0.10         # overlap share falling by this much (absolute) is named
MORE_KERNELS = 0.25         # NCCL kernels per step growing by this share (and by one at least)
ACCUMULATION_SLACK = 0.1    # runs of a phase per step (and collectives per run) equal within this share
#: the likely edit behind more collectives per step, where the records cannot tell which
EITHER_EDIT = "smaller DDP buckets (bucket_cap_mb), or gradients all-reduced at every micro-step (no_sync dropped)?"
#: what a collective the step did not make before may be, by collective
NEW_COLLECTIVE = {
    "all-gather": "values gathered from every rank (SyncBatchNorm's statistics, or parameters sharded across ranks: "
                  "FSDP, ZeRO)?",
    "reduce-scatter": "gradients reduced into shards (a model or optimizer sharded across ranks: FSDP, ZeRO)?",
    "all-reduce": "values averaged over the ranks where they were not (SyncBatchNorm, a metric or a loss, DDP itself)?",
    "broadcast": "values sent from one rank to all (DDP's buffers, or the program's own broadcast)?",
}
NEW_OTHER = "communication the program did not do before"

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
    base_runs: Mapping[str, float] = field(default_factory=dict)   # instances per step of each phase
    cur_runs: Mapping[str, float] = field(default_factory=dict)

    def new_ms(self) -> float:
        """NCCL time per step of the collectives the base made in no phase: a communication the
        step did not have before (SyncBatchNorm's all-gathers, a sharded model's), all of it the change's."""
        made = {name for (name, _), (count, _) in self.base_collectives.items() if count > 0}
        return sum(ms for (name, _), (_, ms) in self.cur_collectives.items() if name not in made)

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
    """More collectives per step: smaller DDP buckets, or an all-reduce at every micro-step
    (:func:`grown_collectives`)."""
    b, c = change.base.kernels_per_step, change.cur.kernels_per_step
    if c - b < max(1.0, MORE_KERNELS * b):
        return None
    return grown_collectives(f"NCCL kernels per step {b:.0f} -> {c:.0f}",
                             {k: v[0] for k, v in change.base_collectives.items()},
                             {k: v[0] for k, v in change.cur_collectives.items()}, change.base_runs, change.cur_runs)


def grown_collectives(numbers: str, base: Mapping[tuple[str, str], float], cur: Mapping[tuple[str, str], float],
                      base_runs: Mapping[str, float], cur_runs: Mapping[str, float]) -> str:
    """``numbers`` and the likely edit behind more collectives per step (``base``, ``cur``: per
    (collective, phase) per step). The phase that launches the collective that grew most tells
    which: where it runs N >= 2 times per step on both sides and its collectives grew N-fold,
    every run now communicates where only the last did (gradient accumulation without no_sync());
    where it runs as often as before and each run launches more collectives, the buckets are smaller.
    A collective the step did not make before (in no phase) is said first, as such, with what it may
    be (:data:`NEW_COLLECTIVE`); one other than all-reduce that grew, with no edit named (DDP's
    gradient sync is all-reduces)."""
    # a collective the step did not make before (in no phase) tells more than one that grew: it comes first
    made = {name for (name, _), n in base.items() if n > 0}
    grew = sorted(((k, base.get(k, 0.0), v) for k, v in cur.items()), key=lambda x: (x[0][0] in made, x[1] - x[2]))
    if not grew or grew[0][2] <= grew[0][1]:
        return f"{numbers}: {EITHER_EDIT}"
    (name, phase), bc, cc = grew[0]
    detail = f"{numbers} ({name} {bc:.0f} -> {cc:.0f} in {phase}"
    if name not in made:
        return f"{detail}: a collective the step did not make before): {NEW_COLLECTIVE.get(name, NEW_OTHER)}"
    if name != "all-reduce":      # DDP's gradient sync is all-reduces: no edit of it to name
        return f"{detail})"
    runs_b, runs_c = base_runs.get(phase) or 0.0, cur_runs.get(phase) or 0.0
    if bc <= 0 or runs_b <= 0 or abs(runs_c - runs_b) > ACCUMULATION_SLACK * runs_b:
        return f"{detail}): {EITHER_EDIT}"
    if runs_c >= 2 - ACCUMULATION_SLACK and abs(cc / bc - runs_c) <= ACCUMULATION_SLACK * runs_c:
        return (f"{detail}, which runs {runs_c:.0f} times per step: each {phase} now communicates, not only "
                f"the last): gradients all-reduced at every micro-step (no_sync() dropped from the accumulation?)")
    return f"{detail}, {cc / runs_c:.0f} per {phase} where it was {bc / runs_b:.0f}): smaller DDP buckets (bucket_cap_mb)?"


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
                base_kernels: Kernels | None = None, cur_kernels: Kernels | None = None,
                base_runs: Mapping[str, float] | None = None,
                cur_runs: Mapping[str, float] | None = None) -> Reason | None:
    """One reason from the rules of :data:`COMM_RULES` that fire, or None (also when a side has no
    communication). ``*_kernels``: TraceFacts.kernels_by_phase of each side, naming the collective
    and the phase it is launched in; ``*_runs``: instances per step of each phase (``runs_per_step``)."""
    if base is None or cur is None:
        return None
    change = CommChange(base, cur, step_delta_ms, exposed_growth(base, cur),
                        by_collective(base_kernels or {}), by_collective(cur_kernels or {}),
                        base_runs or {}, cur_runs or {})
    fired = [(rule, text) for rule in COMM_RULES if (text := rule.says(change)) is not None]
    if not fired:
        return None
    ids = [r.id for r, _ in fired]
    # a collective the step did not make before: an edit of the program's communication, credited
    # with the new kernels' time (exposed or not) where that is more than the exposed growth
    new_ms = change.new_ms() if "comm_kernels" in ids else 0.0
    return Reason("comm:" + "+".join(ids + (["comm_new"] if new_ms > 0 else [])), change.main()[1],
                  max(change.exposed_delta_ms, new_ms, 0.0), "; ".join(t for _, t in fired), fired[-1][0].cause)


def runs_per_step(phases: Mapping[str, PhaseStats], steps: int) -> dict[str, float]:
    """Instances per measured step of each phase (4 for a backward of 4 accumulated micro-batches)."""
    return {name: p.count / steps for name, p in phases.items()} if steps > 0 else {}


def collectives_changed(reason: Reason | None) -> bool:
    """Whether a communication reason says the collectives per step changed: an edit of the job's
    communication, after which the ranks wait for each other at more (or fewer) points per step."""
    return reason is not None and "comm_kernels" in reason.mechanism


def leads(reason: Reason, step_delta_ms: float) -> bool:
    """Whether a communication reason comes first: it accounts for enough of the step-time change,
    or it names a collective the step did not make before (the program's communication changed; a
    kernel swap it brings, other cuDNN algorithms around new batch-norm kernels, follows from it)."""
    return reason.ms >= max(MIN_EXPOSED_MS, MIN_SHARE_OF_STEP * step_delta_ms) or "comm_new" in reason.mechanism


#: Fewer collectives per step: the likely edits, where the records cannot tell which
FEWER_EDIT = "larger DDP buckets (bucket_cap_mb), or no_sync() around the accumulated micro-batches?"


def _calls(calls: CollectiveCalls) -> dict[tuple[str, str], float]:
    """(collective, phase) -> calls per step, in the words of :func:`collective`."""
    out: dict[tuple[str, str], float] = {}
    for c in calls.counts:
        key = (_WORDS.get(c.call, c.call), c.phase or "no phase")
        out[key] = out.get(key, 0.0) + c.per_step
    return out


def exposed_text(base: Analysis, cur: Analysis) -> str | None:
    """Exposed NCCL time per step and rank on both sides (CUDA-traced launches), with the NCCL time
    and the overlap beside it; None where a side has no NCCL kernels."""
    if base.comm is None or cur.comm is None:
        return None
    b, c = base.comm, cur.comm
    return (f"exposed NCCL time per step and rank {b.exposed_ms:.1f} -> {c.exposed_ms:.1f} ms (NCCL time "
            f"{b.comm_ms:.1f} -> {c.comm_ms:.1f} ms, overlap {_pct(b.overlap_fraction)} -> {_pct(c.overlap_fraction)})")


def collectives_text(base: Analysis, cur: Analysis) -> str | None:
    """What changed in NCCL's calls per step (its NVTX ranges: every launch has them), said whatever
    the verdict once the gate found ``collectives_per_step`` beyond its tolerance: the collectives
    per step and rank, the one that moved most and the phase it is made in, and the likely edit
    (:func:`grown_collectives`). None where a side has no calls or the count did not move."""
    if base.collectives is None or cur.collectives is None:
        return None
    b, c = base.collectives.per_step, cur.collectives.per_step
    numbers = f"NCCL calls per step and rank {b:.0f} -> {c:.0f}"
    before, after = _calls(base.collectives), _calls(cur.collectives)
    base_runs, cur_runs = runs_per_step(base.phases, base.steps.count), runs_per_step(cur.phases, cur.steps.count)
    if c > b:
        return grown_collectives(numbers, before, after, base_runs, cur_runs)
    if c < b:
        return fewer_collectives(numbers, before, after, base_runs, cur_runs)
    return None


def fewer_collectives(numbers: str, base: Mapping[tuple[str, str], float], cur: Mapping[tuple[str, str], float],
                      base_runs: Mapping[str, float], cur_runs: Mapping[str, float]) -> str:
    """:func:`grown_collectives` the other way: the collective that fell most, and where its phase
    runs N >= 2 times per step and it fell N-fold, only the last run communicates now (no_sync()
    around the accumulation); where each run makes fewer, the buckets are larger."""
    kept = {name for (name, _), n in cur.items() if n > 0}
    fell = sorted(((k, v, cur.get(k, 0.0)) for k, v in base.items()), key=lambda x: (x[0][0] in kept, x[2] - x[1]))
    (name, phase), bc, cc = fell[0]
    detail = f"{numbers} ({name} {bc:.0f} -> {cc:.0f} in {phase}"
    if name not in kept:
        return f"{detail}: a collective the step no longer makes)"
    if name != "all-reduce":
        return f"{detail})"
    runs_b, runs_c = base_runs.get(phase) or 0.0, cur_runs.get(phase) or 0.0
    if runs_b <= 0 or abs(runs_c - runs_b) > ACCUMULATION_SLACK * runs_b:
        return f"{detail}): {FEWER_EDIT}"
    if runs_b >= 2 - ACCUMULATION_SLACK and abs(bc / cc - runs_b) <= ACCUMULATION_SLACK * runs_b:
        return (f"{detail}, which runs {runs_b:.0f} times per step: only the last {phase} communicates now): "
                "gradients all-reduced once per step (no_sync() around the accumulated micro-batches?)")
    return f"{detail}, {cc / runs_c:.0f} per {phase} where it was {bc / runs_b:.0f}): larger DDP buckets (bucket_cap_mb)?"
