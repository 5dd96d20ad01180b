"""Reasons that are differences: what changed between the baseline's trace and the current one,
where in the step it was launched, and how many milliseconds per step of the step-time change it
accounts for. Read from the TraceFacts of both sides (``kernels_by_phase``, ``syncs_by_phase``,
copies, float64 kernels); a condition that holds on both sides is never a reason.

The milliseconds a difference accounts for: on a GPU-bound step (GPU idle under
``HOST_BOUND_IDLE`` of the step) the GPU time its kernels added; on a host-bound step (the host
launches or waits, the GPU idles) the larger of that and the host time of the phase where it
happens, since the step then lasts as long as the host's work. New synchronizations account for
the GPU idle time that grew, less what data loading explains.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from perfgate.analysis.kernel_names import shortened
from perfgate.diagnosis.mechanisms import Families, Replacement, families_from_names, merged, replacements
from perfgate.diagnosis.machine import unguessed
from perfgate.records.diagnosis import Reason
from perfgate.records.ranks import RankStats, rank_name

MIN_MS = 0.05               # ms/step below which a difference is not a reason
MIN_PER_STEP = 0.5          # kernel launches (or calls) per step below which a count change is noise
LAUNCH_HOST_MS = 0.1        # the most host time one more kernel launch costs (an op's dispatch and launch)
HOST_BOUND_IDLE = 0.2       # GPU idle share of the step above which the host sets the pace
SHOWN_NAMES = 3
OPTIMIZER_PHASE = re.compile(r"optim", re.IGNORECASE)
FUSED_OPTIMIZER_KERNEL = re.compile(r"multi_tensor_apply|fused_adam|fused_sgd|_fused_", re.IGNORECASE)
MODEL_PHASE = re.compile(r"forward|backward|loss", re.IGNORECASE)
# when the model's phases change together, the reason that says most about what changed leads
MECHANISM_ORDER = ("dtype", "kernels_added", "kernel_launches", "kernels_longer")

Kernels = Mapping[str, Mapping[str, list[float]]]
FamilyTables = Mapping[str, Families]


def totals(kernels: Mapping[str, list[float]]) -> tuple[float, float]:
    return sum(v[0] for v in kernels.values()), sum(v[1] for v in kernels.values())


def _per_step(count: float) -> str:
    """A count per step as text: whole numbers from 1 up, one decimal below (0.5 is not "+0")."""
    return f"{count:+.0f}/step" if abs(count) >= 1 else f"{count:+.1f}/step"


def _names(items: list[tuple[str, float, float]]) -> str:
    short = shortened(name for name, _, _ in items[:SHOWN_NAMES])
    shown = ", ".join(f"{short[name]} {_per_step(count)}" for name, count, _ in items[:SHOWN_NAMES])
    return shown + (f" and {len(items) - SHOWN_NAMES} more" if len(items) > SHOWN_NAMES else "")


def kernel_reason(where: str, base: Mapping[str, list[float]], cur: Mapping[str, list[float]],
                  host_ms: float, host_bound: bool, fp64_added: float) -> Reason | None:
    """What changed among the kernels launched in ``where``: kernels that appeared, more launches
    of the same ones, or the same launches running longer."""
    (nb, mb), (nc, mc) = totals(base), totals(cur)
    gpu_ms = mc - mb
    # a host-bound step's host time is the kernel change's as far as its added launches can cost
    # it: kernels that replace others one for one (cuDNN picking another algorithm) cost nothing more
    ms = max(gpu_ms, min(host_ms, (nc - nb) * LAUNCH_HOST_MS)) if host_bound else gpu_ms
    if ms < MIN_MS:
        return None
    zero = [0.0, 0.0]
    appeared = sorted(((n, v[0], v[1]) for n, v in cur.items()
                       if v[0] >= MIN_PER_STEP and base.get(n, zero)[0] < MIN_PER_STEP / 10), key=lambda x: -x[2])
    gone = sorted(((n, -v[0], v[1]) for n, v in base.items()
                   if v[0] >= MIN_PER_STEP and cur.get(n, zero)[0] < MIN_PER_STEP / 10), key=lambda x: -x[2])
    more = sorted(((n, v[0] - base.get(n, zero)[0], v[1] - base.get(n, zero)[1]) for n, v in cur.items()
                   if v[0] - base.get(n, zero)[0] >= MIN_PER_STEP), key=lambda x: -x[1])
    added = nc - nb
    if fp64_added >= max(MIN_PER_STEP, 0.5 * added) and (appeared or more):
        text = (f"float64 kernels appeared in {where} (+{fp64_added:.0f}/step: "
                f"{_names(appeared or more)}): a round trip through double?")
        return Reason("dtype", where, ms, text, "float64 round trip")
    if added >= max(MIN_PER_STEP * 4, 0.05 * nb) and OPTIMIZER_PHASE.search(where) and any(
            FUSED_OPTIMIZER_KERNEL.search(n) for n, _, _ in gone):
        text = (f"+{added:.0f} kernel launches/step in {where} ({_names(more)}; gone: {_names(gone)}): "
                "the optimizer's fused/foreach implementation is no longer used?")
        return Reason("kernel_launches", where, ms, text, "optimizer implementation")
    if appeared:
        text = f"new kernels in {where}: {_names(appeared)} ({gpu_ms:+.2f} ms/step GPU time)"
        return Reason("kernels_added", where, ms, text, None)
    if added >= max(MIN_PER_STEP, 0.02 * nb):
        text = (f"+{added:.0f} kernel launches/step in {where}, the same kernels more often "
                f"({_names(more)}; {gpu_ms:+.2f} ms/step GPU time): more layers or calls?")
        return Reason("kernel_launches", where, ms, text, None)
    if gpu_ms >= max(MIN_MS, 0.03 * mb):
        longer = sorted(((n, v[1] - base.get(n, zero)[1]) for n, v in cur.items()), key=lambda x: -x[1])
        short = shortened(n for n, _ in longer[:SHOWN_NAMES])
        top = ", ".join(f"{short[n]} {d:+.2f} ms" for n, d in longer[:SHOWN_NAMES] if d > 0)
        text = (f"kernels in {where} run longer at the same launches: {gpu_ms:+.2f} ms/step GPU time "
                f"({top}): larger shapes?")
        return Reason("kernels_longer", where, ms, text, None)
    return None


def differences(base_kernels: Kernels, cur_kernels: Kernels, base_syncs: Mapping[str, float],
                cur_syncs: Mapping[str, float], host_ms: Mapping[str, float], host_bound: bool,
                idle_delta_ms: float, data_ms: float, d2h_added: float, fp64_added: float,
                skip: frozenset[str] = frozenset(), base_families: FamilyTables | None = None,
                cur_families: FamilyTables | None = None) -> list[Reason]:
    """The reasons, largest first. ``host_ms``: host-time delta (ms/step) per place (phase, or the
    step's own code); ``data_ms``: what data loading accounts for; ``skip``: places whose kernel
    changes another reason already names (a precision or compile change); ``*_families``: the
    kernels by place and family (TraceFacts.kernels_by_family; from the names when absent), which
    turn a kernel change into the mechanism that changed (perfgate.diagnosis.mechanisms)."""
    out: list[Reason] = []
    fp64_left = fp64_added
    for where in dict.fromkeys([*base_kernels, *cur_kernels]):
        if where in skip:
            continue
        r = kernel_reason(where, base_kernels.get(where, {}), cur_kernels.get(where, {}),
                          host_ms.get(where, 0.0), host_bound, fp64_left)
        if r is not None:
            if r.mechanism == "dtype":
                fp64_left = 0.0
            out.append(r)
    out = _merge_model_phases(out)
    out = _told_as_replacements(out, base_kernels, cur_kernels, base_families or {}, cur_families or {})
    added = {w: cur_syncs.get(w, 0.0) - base_syncs.get(w, 0.0) for w in dict.fromkeys([*base_syncs, *cur_syncs])}
    added = {w: a for w, a in added.items() if a >= MIN_PER_STEP}
    if added:
        waiting = max(0.0, idle_delta_ms - max(data_ms, 0.0))
        total = sum(added.values())
        for where, count in sorted(added.items(), key=lambda kv: -kv[1]):
            ms = max(waiting * count / total, host_ms.get(where, 0.0) if host_bound else 0.0)
            if ms < MIN_MS:
                continue
            copy = (f", with +{d2h_added:.0f} device-to-host copies/step: a .item()/.cpu() of a GPU tensor?"
                    if d2h_added >= MIN_PER_STEP else ": a blocking copy (non_blocking dropped) or a .item()?")
            out.append(Reason("syncs", where, ms,
                              f"new host-GPU synchronizations in {where}: +{count:.0f}/step; the GPU idles "
                              f"{idle_delta_ms:+.2f} ms/step more{copy}", None))
    return sorted(out, key=lambda r: -r.ms)


def family_tables(families: FamilyTables, kernels: Kernels, place: str) -> Families:
    return families[place] if place in families else families_from_names(kernels.get(place, {}), place)


def _told_as_replacements(reasons: list[Reason], base_kernels: Kernels, cur_kernels: Kernels,
                          base_families: FamilyTables, cur_families: FamilyTables) -> list[Reason]:
    """Each kernel reason whose kernels changed family (an attention path, a precision, compile,
    CUDA graphs, the optimizer's implementation, cuDNN's kernels, a library kernel written by
    hand), told as that replacement, with the kernels that disappeared beside those that appeared.
    The model's phases are looked at together, as their reason is one."""
    out = []
    for r in reasons:
        if r.where is None or r.mechanism not in MECHANISM_ORDER:
            out.append(r)
            continue
        places = [w for w in dict.fromkeys([*base_kernels, *cur_kernels]) if MODEL_PHASE.search(w)] \
            if MODEL_PHASE.search(r.where) else [r.where]
        stories = replacements(merged([family_tables(base_families, base_kernels, w) for w in places]),
                               merged([family_tables(cur_families, cur_kernels, w) for w in places]))
        if not stories:
            out.append(r)
            continue
        story, others = stories[0], stories[1:]
        gpu = {w: totals(cur_kernels.get(w, {}))[1] - totals(base_kernels.get(w, {}))[1] for w in places}
        shown = [w for w in places if abs(gpu[w]) >= 0.005]
        also = "".join(f"; also {o.summary}" for o in others)
        out.append(Reason(f"replaced:{story.kind}", r.where, r.ms,
                          f"{story.text} ({shortened_evidence(story.evidence(), story)}; {sum(gpu.values()):+.2f} ms/step GPU "
                          f"time in {', '.join(shown or places)}){also}", story.cause))
    return out


def shortened_evidence(evidence: str, story: Replacement) -> str:
    """The evidence with long kernel names shortened as every table shows them."""
    short = shortened(n for n, _, _ in (*story.gone[:SHOWN_NAMES], *story.new[:SHOWN_NAMES]))
    for name, s in sorted(short.items(), key=lambda kv: -len(kv[0])):
        evidence = evidence.replace(f"{name} ", f"{s} ")
    return evidence


def _merge_model_phases(reasons: list[Reason]) -> list[Reason]:
    """One reason for the kernel changes of the model's own phases (forward, loss, backward): an
    edit of the model changes them together (dropout adds kernels to forward and launches to
    backward), and their milliseconds add up. The most telling mechanism leads the text."""
    model = [r for r in reasons if r.where is not None and MODEL_PHASE.search(r.where)
             and r.mechanism in MECHANISM_ORDER]
    if len(model) < 2:
        return reasons
    lead = min(model, key=lambda r: (MECHANISM_ORDER.index(r.mechanism), -r.ms))
    # the others are evidence of the lead's change: their own guesses ("more layers?") are dropped
    others = "; ".join(unguessed(r.text) for r in model if r is not lead)
    merged = Reason(lead.mechanism, lead.where, sum(r.ms for r in model), f"{lead.text}; also {others}",
                    lead.cause)
    return [r for r in reasons if r not in model] + [merged]


# a phase in which DDP's ranks wait for each other (the gradient all-reduce ends in backward): its
# growth on the ranks that wait is the straggler's delay, not their own
COLLECTIVE_PHASE = re.compile(r"backward|all_?reduce|allgather|reduce_scatter|barrier|sync|comm", re.IGNORECASE)
STRAGGLER_RATIO = 2.0        # the slow rank's phase grew at least this many times more than any other's
MOVED_WAIT = 0.5             # another rank's same phase shrank by this share of the growth: the wait moved
STRAGGLER_SHARE = 0.5        # a straggler's delay is most of the job's step growth (every rank waits for it)


def _phase_deltas(base: Sequence[RankStats], cur: Sequence[RankStats]) -> dict[str, dict[int, float]]:
    """For each phase of the current ranks (in their order), each rank's change of its CPU time per
    step (ms)."""
    return {phase: {c.rank: c.phase_cpu_ms.get(phase, 0.0) - b.phase_cpu_ms.get(phase, 0.0) for b, c in zip(base, cur)}
            for phase in dict.fromkeys(p for c in cur for p in c.phase_cpu_ms)}


def _wait_moved(grew: float, shrank: float) -> bool:
    """A phase that grew ``grew`` ms/step on one rank and changed ``shrank`` on another: the ranks' wait
    moved between them where the other shrank by at least ``MOVED_WAIT`` of the growth."""
    return shrank <= -MOVED_WAIT * grew


def straggler_reason(base: Sequence[RankStats], cur: Sequence[RankStats], step_delta: float) -> Reason | None:
    """One rank whose phase CPU time per step grew much more than the same phase on every other rank
    (a straggler the other ranks wait for), named with the others' change. Phases where ranks wait
    for each other are looked at last: the waiting ranks' time grows there."""
    if len(base) < 2 or len(base) != len(cur):
        return None
    node = {c.rank: c.node for c in cur}      # a job of several nodes names each rank's node too
    deltas = _phase_deltas(base, cur)
    candidates = sorted((bool(COLLECTIVE_PHASE.search(phase)), -d, rank, phase)
                        for phase, by_rank in deltas.items() for rank, d in by_rank.items())
    for waits, neg, rank, phase in candidates:
        delta = -neg
        if delta < max(MIN_MS, STRAGGLER_SHARE * step_delta):
            continue
        others = {r: d for r, d in deltas[phase].items() if r != rank}
        if delta < STRAGGLER_RATIO * max(max(others.values()), 0.0) + MIN_MS:
            continue
        if _wait_moved(delta, min(others.values())):   # moved_waits says so: no rank is slower
            continue
        if len(others) == 1:
            (other, od), = others.items()
            them = f"{rank_name(other, node[other])} {od:+.1f} ms/step"
        else:
            them = f"the other ranks at most {max(others.values()):+.1f} ms/step"
        return Reason("straggler", phase, delta,
                      f"{rank_name(rank, node[rank])} {phase} {delta:+.1f} ms/step ({them}): one slow rank holds "
                      "every step of the job back", "straggler rank")
    return None


def moved_waits(base: Sequence[RankStats], cur: Sequence[RankStats], step_delta: float) -> list[str]:
    """Phases that grew on one rank and shrank on another by at least ``MOVED_WAIT`` of that growth.
    Ranks that meet at every step's collectives wait for each other, each in whatever phase it is
    in: when all of them get slower (each rank's input pipeline), the wait can land on one rank's
    data loading and leave another's, which is no slow rank. The notes say where it moved; the
    phase's change over all ranks is the job's."""
    if len(base) < 2 or len(base) != len(cur):
        return []
    node = {c.rank: c.node for c in cur}
    notes = []
    for phase, deltas in _phase_deltas(base, cur).items():
        grew = max(deltas, key=lambda r: deltas[r])
        shrank = min(deltas, key=lambda r: deltas[r])
        if deltas[grew] >= max(MIN_MS, 0.1 * abs(step_delta)) and _wait_moved(deltas[grew], deltas[shrank]):
            mean = sum(deltas.values()) / len(deltas)
            notes.append(f"{phase} grew on {rank_name(grew, node[grew])} ({deltas[grew]:+.1f} ms/step) and shrank on "
                         f"{rank_name(shrank, node[shrank])} ({deltas[shrank]:+.1f}): the ranks wait for each other, "
                         f"and the wait moved between them; over all ranks {phase} {mean:+.1f} ms/step (no slow rank)")
    return notes
