"""GPU clock/throttle monitoring: the pure summary, and the sampling thread against an NVML
stand-in (this machine has no GPU; the real NVML path ran on the GPU machine)."""
from __future__ import annotations

import sys
import time

from perfgate.capture.gpu_monitor import THROTTLE_MASK, GpuMonitor, PynvmlReader, Sample, reason_names, monitor_report


class FakeNvml:
    """The part of pynvml's API the monitor uses, with scripted readings."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, clocks: list[int], reasons: int, gpus: int = 2) -> None:
        self.clocks, self.reason_mask, self.gpus, self.calls, self.shut = clocks, reasons, gpus, 0, False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shut = True
    def nvmlDeviceGetCount(self) -> int:
        return self.gpus
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i
    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self.calls += 1
        return self.clocks[min(self.calls - 1, len(self.clocks) - 1)]
    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        return 60 + h
    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self.reason_mask


def test_summary_marks_thermal_and_hardware_slowdowns_but_not_a_power_cap() -> None:
    capped = [Sample(0.0, 0, 1980, 55, 0x4), Sample(0.2, 0, 1755, 57, 0x4 | 0x1)]
    hot = [Sample(0.0, 0, 1980, 80, 0x0), Sample(0.2, 0, 1200, 88, 0x40)]
    a, b = monitor_report(capped), monitor_report(hot)
    assert a is not None and not a.throttled and a.reasons == ("software power cap",)
    assert (a.sm_mhz_min, a.sm_mhz_max, a.sm_mhz_median, a.temperature_c_max) == (1755, 1980, 1867.5, 57)
    assert b is not None and b.throttled and b.reasons == ("hardware thermal slowdown",)
    assert monitor_report([]) is None
    assert reason_names(THROTTLE_MASK) == ["hardware slowdown", "software thermal slowdown",
                                           "hardware thermal slowdown", "hardware power brake slowdown"]


def test_monitor_samples_every_gpu_until_the_block_ends(monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = FakeNvml(clocks=[1980, 1980, 1410], reasons=0x8)
    with GpuMonitor(interval_s=0.01, nvml=nvml) as m:
        time.sleep(0.1)
    report = m.report()
    assert nvml.shut and report is not None
    assert report.samples >= 4 and report.samples % 2 == 0     # both GPUs each round
    assert report.throttled and report.reasons == ("hardware slowdown",)
    assert report.sm_mhz_min == 1410 and report.temperature_c_max == 61


class HostNvml(FakeNvml):
    """A host of 4 GPUs, each with its UUID (bytes, as older nvidia-ml-py gives it)."""

    UUIDS = ["GPU-0a1b-0000", "GPU-1a1b-1111", "GPU-2e4f-2222", "GPU-3e4f-3333"]

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return self.UUIDS[h].encode()


def test_monitor_samples_only_the_gpus_cuda_visible_devices_leaves(monkeypatch) -> None:
    """A job given GPUs 2 and 3 of 4 samples those two, as its GPUs 0 and 1 (CUDA's numbers):
    the other GPUs' clocks and energy are another job's."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    reader = PynvmlReader(HostNvml(clocks=[1980], reasons=0, gpus=4))
    assert reader.open() == 2
    assert [reader.read(g).temperature_c for g in (0, 1)] == [62, 63]     # FakeNvml: 60 + NVML index
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3e4f, 1")
    assert reader.open() == 2 and [reader.read(g).temperature_c for g in (0, 1)] == [63, 61]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert reader.open() == 0

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    with GpuMonitor(interval_s=0.01, reader=PynvmlReader(HostNvml(clocks=[1980], reasons=0, gpus=4))) as m:
        time.sleep(0.05)
    assert {s.gpu for s in m.samples} == {0, 1} and {s.temperature_c for s in m.samples} == {61, 63}


def test_monitor_is_a_no_op_without_nvml(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)   # import pynvml raises ImportError
    with GpuMonitor(interval_s=0.01) as m:
        pass
    assert m.report() is None


def test_pipeline_marks_an_unstable_or_throttled_launch(fixtures_dir) -> None:
    from dataclasses import replace

    from perfgate.analysis import AnalysisOptions, analyze_trace
    from perfgate.pipeline.workload_run import _checked

    analysis = analyze_trace(fixtures_dir / "traces" / "gpu-resnet-pinned" / "trace.sqlite",
                             AnalysisOptions(skip_steps=0))
    steady = replace(analysis, steps=replace(analysis.steps, durations_ms=tuple([20.0, 20.2, 19.9, 20.1] * 5)))
    two_levels = replace(analysis, steps=replace(analysis.steps, durations_ms=tuple([20.0, 20.1] * 5 + [30.0, 30.1] * 5)))
    hot = monitor_report([Sample(0.0, 0, 1980, 80, 0x0), Sample(0.2, 0, 1200, 88, 0x40)])

    ok = _checked(steady, 0, None)
    assert ok.launch.stability.stable and ok.launch.notes == ()
    bad = _checked(two_levels, 1, hot)
    assert not bad.launch.stability.stable and bad.launch.gpu_clocks == hot and hot.throttled
    assert any(w.startswith("launch 1: measured steps are not stable") for w in bad.launch.notes)
    assert any(w.startswith("launch 1: the GPU throttled (hardware thermal slowdown)") for w in bad.launch.notes)
