"""Peak GPU memory and energy of one launch, attached to its Analysis (issue 18).

Each memory metric names its source:

- ``gpu_memory.peak_allocated_mib``, ``gpu_memory.peak_reserved_mib``: the workload's own torch
  allocator (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``, peak statistics reset
  when its measured steps begin), from the ``"gpu_memory"`` object of its ``PERFGATE_SELF_REPORT``
  line (workloads/_memory.py writes it).
- ``gpu_memory.peak_traced_mib``: nsys's CUDA memory usage events (the capture passes
  ``--cuda-memory-usage=true`` with CUDA tracing): the largest running total of device
  allocations (``cudaMalloc`` and friends: what the caching allocator reserves, plus allocations of
  other libraries) of one process on one GPU over the whole run, read by Analysis.metrics() from
  ``GpuWork.peak_memory_bytes``.

Energy and power come from perfgate.analysis.energy over the NVML samples perfgate.capture.gpu_monitor took during
the launch: ``energy.per_sample_j``, ``energy.per_step_j``, ``energy.power_mean_w``,
``energy.power_peak_w``. Without NVML or a GPU these metrics are absent (never zero), and
``Analysis.launch.energy`` says why.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from perfgate.analysis.energy import window_energy
from perfgate.records.resources import GpuMemory, LaunchEnergy, MemoryPeak
from perfgate.records.model import Analysis

MIB = 2**20
ALLOCATED = "gpu_memory.peak_allocated_mib"
RESERVED = "gpu_memory.peak_reserved_mib"
TRACED = "gpu_memory.peak_traced_mib"

#: Memory metrics in the order reports prefer them, with the source each comes from.
MEMORY_SOURCES: dict[str, str] = {
    ALLOCATED: "torch allocator (max_memory_allocated)",
    TRACED: "nsys CUDA memory usage trace",
    RESERVED: "torch allocator (max_memory_reserved)",
}
SHORT_SOURCES = {ALLOCATED: "allocated", TRACED: "traced", RESERVED: "reserved"}
_REPORT_KEYS = {"max_allocated_bytes": ALLOCATED, "max_reserved_bytes": RESERVED}

NO_NVML = "no NVML readings (nvidia-ml-py not installed, or no NVIDIA GPU/driver)"
NO_CLOCK = "the trace has no session start time (TARGET_INFO_SESSION_START_TIME): its window cannot be placed"
NOT_COVERED = "the NVML samples do not cover the measured window"


def allocator_memory(self_report: Mapping[str, Any] | None) -> dict[str, float]:
    """``{metric: MiB}`` from a self-report's ``"gpu_memory"`` object (empty without one: a CPU
    run, or a workload that does not report it)."""
    memory = (self_report or {}).get("gpu_memory")
    if not isinstance(memory, Mapping):
        return {}
    out = {}
    for key, metric in _REPORT_KEYS.items():
        value = memory.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            out[metric] = float(value) / MIB
    return out


def energy_of(analysis: Analysis, samples: Sequence[Any], session_start_utc_ns: int | None) -> LaunchEnergy:
    """``Analysis.launch.energy``: the EnergyReport over the measured window, or why there is none."""
    if not samples:
        return LaunchEnergy(unavailable=NO_NVML)
    if session_start_utc_ns is None:
        return LaunchEnergy(unavailable=NO_CLOCK)
    steps = analysis.steps
    iterations = max(1, round(steps.count / max(1, analysis.processes)))
    report = window_energy(samples, session_start_utc_ns + steps.window_start_ns,
                           session_start_utc_ns + steps.window_end_ns, iterations, steps.batch_size)
    if report is None:
        return LaunchEnergy(unavailable=NOT_COVERED)
    return LaunchEnergy(report=report, clock_offset_ms=clock_offset_ms(analysis, session_start_utc_ns))


def clock_offset_ms(analysis: Analysis, session_start_utc_ns: int) -> float | None:
    """How far the trace's measured window, placed on the wall clock, starts from where the workload
    says its measured steps began (``window_unix_ns`` in its self-report; None without one): a check
    of the clock that places the energy window (a few ms: the first step range opens just after)."""
    reported = (analysis.launch.self_report or {}).get("window_unix_ns")
    if not (isinstance(reported, list) and len(reported) == 2 and all(isinstance(x, int) for x in reported)):
        return None
    return (session_start_utc_ns + analysis.steps.window_start_ns - reported[0]) / 1e6


def attach_resources(analysis: Analysis, samples: Sequence[Any], session_start_utc_ns: int | None) -> Analysis:
    """``analysis`` with ``launch.gpu_memory`` (each source's peak), ``launch.energy`` and
    ``launch.resource_metrics`` (what Analysis.metrics() adds to the gate's metrics)."""
    memory = allocator_memory(analysis.launch.self_report)
    energy = energy_of(analysis, samples, session_start_utc_ns)
    metrics = {**memory, **energy.metrics()}
    launch = replace(analysis.launch, energy=energy, resource_metrics=metrics)
    traced = analysis.gpu.peak_memory_bytes if analysis.gpu is not None else None
    everything = {**memory, **({TRACED: traced / MIB} if traced is not None else {})}
    if everything:
        launch = replace(launch, gpu_memory=GpuMemory(tuple(MemoryPeak(m, v, MEMORY_SOURCES[m])
                                                             for m, v in everything.items())))
    return replace(analysis, launch=launch)


def headline_memory(metrics: Mapping[str, float]) -> tuple[str, float] | None:
    """The memory metric reports show first (allocated, else traced, else reserved) and its value."""
    for metric in MEMORY_SOURCES:
        if metric in metrics:
            return metric, metrics[metric]
    return None
