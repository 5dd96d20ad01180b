"""Launches shaped like a GPU gate run of a workload that prints nothing (issue 28, item 3), for the
tests of every path and renderer without a GPU (tests/analysis/test_absent_figures.py,
tests/report/test_report_properties.py).

They are the committed H100 captures of resnet_cifar (tests/fixtures/traces/gpu-resnet-*), analysed
the way ``pipeline.launch_capture_and_analysis`` analyses a launch, without the workload's self-report (no
batch size, no torch allocator figures):

- a *timing* launch is what an ``nvtx``-only trace of the same run gives: no GPU work, no GPU idle,
  no GPU time per phase;
- the *profile* launch is the CUDA-traced capture as it is, with the peak of nsys's CUDA memory
  trace (``gpu_memory.peak_traced_mib``: these captures were made without
  ``--cuda-memory-usage``, so the peak is set on the record, 3 GiB);
- energy and power come from NVML samples at a known power around the measured window
  (``energy.per_step_j``, ``energy.power_mean_w``; no energy per sample: no batch size).
"""
from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from perfgate.capture.gpu_monitor import Sample
from perfgate.records.model import Analysis, MachineInfo

TRACES = Path(__file__).parent / "fixtures" / "traces"
TRACED_PEAK_BYTES = 3 * 2**30
WATTS = 400.0
H100 = MachineInfo(machine_class="nvidia-h100-80gb-hbm3-x1", gpu_model="NVIDIA H100 80GB HBM3", gpu_count=1,
                   driver="580.159.04", cuda="13.0", torch="2.11.0+cu130", nsys="2025.3.1", hostname="gpu-runner")


@functools.lru_cache(maxsize=None)
def _analysed(case: str) -> tuple[Analysis, int | None, object]:
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.trace.export import load_trace

    trace = load_trace(TRACES / case / "trace.sqlite")
    return analyze(trace, AnalysisOptions(skip_steps=0)), trace.session_start_utc_ns, trace


def nvml_samples(analysis: Analysis, session_start_ns: int, watts: float = WATTS) -> list[Sample]:
    """One GPU sampled every 0.1 s at ``watts`` from 1 s before the measured window to past its end."""
    lo = session_start_ns + analysis.steps.window_start_ns - 10**9
    n = int((analysis.steps.window_end_ns - analysis.steps.window_start_ns) / 1e8) + 30
    return [Sample(t_s=k * 0.1, gpu=0, sm_mhz=1980, temperature_c=50, reasons=0, wall_ns=lo + k * 10**8,
                   power_mw=int(watts * 1e3), energy_mj=int(watts * 100 * k), util_pct=99) for k in range(n)]


def as_timing(a: Analysis) -> Analysis:
    """What an ``nvtx``-only timing launch of the same run measures: no GPU facts."""
    phases = {n: replace(p, gpu_ms=None, gpu_per_step_ms=None, gpu_thread_proj_ms=None) for n, p in a.phases.items()}
    return replace(a, gpu=None, gpu_idle=None, phases=phases, comm=None)


def launch(case: str, kind: str, k: int = 0, *, energy: bool = True) -> Analysis:
    """Launch ``k`` of ``kind`` ("timing" or "profile") of the capture ``case``, analysed, checked,
    with its resources and diagnosis, as ``pipeline.launch_capture_and_analysis`` makes it (no self-report)."""
    from perfgate.pipeline.inputs import diagnosed
    from perfgate.pipeline.workload_run import _checked
    from perfgate.analysis.resources import attach_resources

    full, start, trace = _analysed(case)
    assert start is not None and full.gpu is not None
    a = as_timing(full) if kind == "timing" else replace(full, gpu=replace(full.gpu, peak_memory_bytes=TRACED_PEAK_BYTES))
    a = _checked(replace(a, launch=replace(a.launch, number=k, kind=kind)), k, None)
    a = attach_resources(a, nvml_samples(a, start) if energy else [], start)
    return diagnosed(a)
