"""Whether a comparison spans different machine states: ``machine_difference`` of a baseline's
launches and the current ones, read from each launch's ``machine_state`` (perfgate.capture.
machine_meter) and ``gpu_clocks`` (perfgate.capture.gpu_monitor). Pure: the gate words its verdict
with it; the verdict does not change.

A side's figure is the mean over its launches that measured it (the most, for processes on the
GPUs; how many launches, for a throttled GPU). Two figures are called different only when they are
apart both by an amount that can slow a step (each threshold below says which) and by a factor
(``RATIO``): 0.30 of a core against 0.02 is a change, 3.1 against 2.8 of 32 is not.
"""
from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from perfgate.records.launch import Launch
from perfgate.records.machine_state import MachineDifference, MachineState

RATIO = 1.5
"""The factor two figures must be apart by, besides their threshold. On a machine that was busy on
both sides, other processes take what the launch leaves them: a launch that wants more CPU (the
code changed) leaves them less, so 1.3 cores against 1.6 of 2 is the launch's doing as much as the
machine's; half again as much is another machine."""
OTHERS_CORES = 0.25
"""Cores used by other processes, the least difference called one. A launch's threads wait for a
CPU where its work and others' want more CPUs than the machine has, and then each quarter of a core
others take is a quarter of a busy thread's time, far beyond a 5 % tolerance; less is the
machine's housekeeping. The meter's own error is under a hundredth of a core: beside launches of
13-15 s, the others' CPU-seconds it found agreed with every other process's own counters within 0.1
(tests/capture/test_machine_meter.py)."""
OTHERS_SHARE = 0.05
"""... and at least this share of the machine's CPUs: on 32 CPUs 1.6 cores, which a launch that
leaves most of them idle (a GPU job's few loader workers) does not miss."""
STEAL_SHARE = 0.02
"""Steal, the share of the CPUs' time the hypervisor gave to other machines, the least difference
called one: CPU work slows by about the steal, and 2 % is not negligible beside a gate's tolerance
of 5 %. This project's CPU machine, a virtual one, showed 0.2-1.1 % in its launches."""
MEMORY_PRESSURE = 0.02
"""Memory pressure (PSI "some": the share of the launch's time some task stalled on memory, in
reclaim or swap), the least difference called one: 0 on a machine with memory to spare, and a
stall of 2 % of the time is a step's 2 % where the workload's own tasks are those stalling."""


@dataclass(frozen=True)
class _Side:
    """One side's figures: None where none of its launches measured one."""

    cpus: int | None
    others_cores: float | None
    runnable: float | None
    steal: float | None
    memory: float | None
    gpu_others: int | None
    throttled: int                 # launches whose GPU throttled
    clocked: int                   # launches that read the GPU's clocks


def _side(launches: Sequence[Launch]) -> _Side:
    states = [launch.machine_state for launch in launches if launch.machine_state is not None]
    clocks = [launch.gpu_clocks for launch in launches if launch.gpu_clocks is not None]
    gpu = [s.gpu_other_processes for s in states if s.gpu_other_processes is not None]
    return _Side(cpus=max((s.cpus for s in states), default=None), others_cores=_mean(states, lambda s: s.others_cores),
                 runnable=_mean(states, lambda s: s.runnable_mean), steal=_mean(states, lambda s: s.steal_share),
                 memory=_mean(states, lambda s: s.memory_pressure), gpu_others=max(gpu, default=None), throttled=sum(c.throttled for c in clocks),
                 clocked=len(clocks))


def _mean(states: Sequence[MachineState], figure: Callable[[MachineState], float | None]) -> float | None:
    values = [v for s in states if (v := figure(s)) is not None]
    return statistics.fmean(values) if values else None


def _apart(baseline: float | None, current: float | None, least: float) -> tuple[float, float] | None:
    """Both figures, where both are known and apart by ``least`` and by ``RATIO``; else None."""
    if baseline is None or current is None:
        return None
    low, high = sorted((baseline, current))
    return (baseline, current) if high - low >= least and high >= RATIO * low else None


def machine_difference(baseline: Sequence[Launch], current: Sequence[Launch]) -> MachineDifference | None:
    """How the machine during the ``current`` launches differed from the machine during the
    ``baseline``'s, or None where it was alike (or either side did not measure it: a baseline
    recorded before launches kept their machine state)."""
    b, c = _side(baseline), _side(current)
    found: list[tuple[str, bool]] = []    # a clause, and whether the current side is the busier
    cpus = c.cpus or b.cpus or 1
    if (others := _apart(b.others_cores, c.others_cores, max(OTHERS_CORES, OTHERS_SHARE * cpus))) is not None:
        was, now = others
        busier = now > was
        found.append((f"other processes used {now:.2f} of {cpus} CPU{'s' if cpus != 1 else ''} "
                      f"during these launches ({was:.2f} at the recording)", busier))
        if b.runnable is not None and c.runnable is not None:
            found.append((f"runnable tasks {c.runnable:.1f} ({b.runnable:.1f})", busier))
    if (steal := _apart(b.steal, c.steal, STEAL_SHARE)) is not None:
        was, now = steal
        found.append((f"the hypervisor gave {now:.1%} of the CPUs' time to other machines (steal) "
                      f"during these launches ({was:.1%} at the recording)", now > was))
    if (memory := _apart(b.memory, c.memory, MEMORY_PRESSURE)) is not None:
        was, now = memory
        found.append((f"tasks stalled on memory {now:.1%} of the time during these launches "
                      f"({was:.1%} at the recording)", now > was))
    if b.gpu_others is not None and c.gpu_others is not None and b.gpu_others != c.gpu_others:
        found.append((f"other processes on the GPUs: {c.gpu_others or 'none'} during these launches "
                      f"({b.gpu_others or 'none'} at the recording)", c.gpu_others > b.gpu_others))
    if b.clocked and c.clocked and (b.throttled > 0) != (c.throttled > 0):
        found.append((f"the GPU throttled in {c.throttled} of {c.clocked} of these launches "
                      f"({b.throttled} of {b.clocked} at the recording)", c.throttled > 0))
    if not found:
        return None
    sides = {busier for _, busier in found}
    return MachineDifference(clauses=tuple(clause for clause, _ in found),
                             busier=sides.pop() if len(sides) == 1 else None)

