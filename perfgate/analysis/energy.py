"""Energy and power of a launch's measured steps, from the NVML samples perfgate.capture.gpu_monitor took
while the launch ran (pure functions: recorded sample sequences in, numbers out).

The measured window is the trace's (first measured step's start to the last one's period end),
moved onto the wall clock through the export's session start (``TARGET_INFO_SESSION_START_TIME``:
trace timestamp 0 is that Unix time); each sample carries the wall-clock time of its reading.

Two sources, in order of preference:

- **energy counter**: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded; Volta
  and newer). The counter is interpolated linearly at the window's two ends between the samples
  around them; the difference is the window's energy.
- **power samples**: ``nvmlDeviceGetPowerUsage`` (mW), integrated over the window with the
  trapezoid rule on the piecewise-linear power curve through the samples (the curve's values at
  the window's ends interpolated). Used when a GPU has no counter.

Either needs samples on both sides of the window; otherwise there is no energy (absent, not zero).
The GPUs counted are those that did work in the window (utilization above 0 in a sample inside
it), or every sampled GPU when no utilization was read: an idle GPU of a shared machine does not
count against a workload that ran on another one.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from perfgate.records.resources import EnergyReport

__all__ = ["active_gpus", "counter_energy_j", "interpolate", "power_energy_j",
           "window_energy"]


class _Sample(Protocol):   # perfgate.capture.gpu_monitor.Sample
    t_s: float
    gpu: int
    sm_mhz: int
    wall_ns: int
    power_mw: int | None
    energy_mj: int | None
    util_pct: int | None


Series = Sequence[tuple[int, float]]   # (wall-clock ns, value), in time order


def interpolate(series: Series, t_ns: int) -> float | None:
    """The value at ``t_ns`` on the line through the samples around it (a sample's own value at
    its time); None outside the samples' span."""
    if not series or t_ns < series[0][0] or t_ns > series[-1][0]:
        return None
    for (t0, v0), (t1, v1) in zip(series, series[1:]):
        if t0 <= t_ns <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (t_ns - t0) / (t1 - t0)
    return float(series[-1][1])        # a single sample exactly at t_ns


def counter_energy_j(series: Series, start_ns: int, end_ns: int) -> float | None:
    """Joules between ``start_ns`` and ``end_ns`` from an energy counter in mJ; None when the
    samples do not cover the window or the counter went backwards (a driver reload)."""
    if any(v1 < v0 for (_, v0), (_, v1) in zip(series, series[1:])):
        return None
    a, b = interpolate(series, start_ns), interpolate(series, end_ns)
    if a is None or b is None:
        return None
    return (b - a) / 1e3


def power_energy_j(series: Series, start_ns: int, end_ns: int) -> float | None:
    """Joules between ``start_ns`` and ``end_ns`` from power samples in mW (trapezoid rule on the
    piecewise-linear power curve); None when the samples do not cover the window."""
    a, b = interpolate(series, start_ns), interpolate(series, end_ns)
    if a is None or b is None:
        return None
    points = [(start_ns, a), *((t, float(v)) for t, v in series if start_ns < t < end_ns), (end_ns, b)]
    mw_ns = sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in zip(points, points[1:]))
    return mw_ns / 1e12        # mW * ns = 1e-12 J


def active_gpus(samples: Sequence[_Sample], start_ns: int, end_ns: int) -> tuple[int, ...]:
    """GPUs with utilization above 0 in a sample inside the window; every sampled GPU when no
    sample in the window carries a utilization (or none was busy)."""
    everyone = sorted({s.gpu for s in samples})
    busy = sorted({s.gpu for s in samples if start_ns <= s.wall_ns <= end_ns and (s.util_pct or 0) > 0})
    return tuple(busy or everyone)


def _series(samples: Sequence[_Sample], gpu: int, field: str) -> list[tuple[int, float]]:
    values = [(s.wall_ns, getattr(s, field)) for s in samples if s.gpu == gpu and getattr(s, field) is not None]
    return sorted(values)


def window_energy(samples: Sequence[_Sample], start_ns: int, end_ns: int, iterations: int,
                  samples_per_iteration: int | None = None) -> EnergyReport | None:
    """The EnergyReport of the wall-clock window [start_ns, end_ns] (None without samples around
    it). The counter is used when every counted GPU has one covering the window, else power
    samples for all of them (one source per launch)."""
    if end_ns <= start_ns or not samples:
        return None
    gpus = active_gpus(samples, start_ns, end_ns)
    energies: list[float | None] = [counter_energy_j(_series(samples, g, "energy_mj"), start_ns, end_ns) for g in gpus]
    source = "energy counter"
    if any(e is None for e in energies):
        energies = [power_energy_j(_series(samples, g, "power_mw"), start_ns, end_ns) for g in gpus]
        source = "power samples"
    if any(e is None for e in energies):
        return None
    total = float(sum(e for e in energies if e is not None))
    inside = [s for s in samples if s.gpu in gpus and start_ns <= s.wall_ns <= end_ns]
    rounds: dict[float, float] = {}
    for s in inside:
        if s.power_mw is not None:
            rounds[s.t_s] = rounds.get(s.t_s, 0.0) + s.power_mw / 1e3
    clocks = [s.sm_mhz for s in inside]
    window_s = (end_ns - start_ns) / 1e9
    return EnergyReport(
        source=source, window_s=window_s, gpus=gpus, energy_j=total, iterations=iterations,
        samples_per_iteration=samples_per_iteration, power_mean_w=total / window_s,
        power_peak_w=max(rounds.values()) if rounds else None,
        sm_mhz_mean=sum(clocks) / len(clocks) if clocks else None, readings=len(inside))
