"""Energy and power from NVML samples (perfgate.analysis.energy, pure), the monitor's NVML reader behind its
interface (perfgate.capture.gpu_monitor), attaching them to a real trace's analysis (perfgate.analysis.resources),
and the clock that places a trace's window on the samples' wall clock, under the real nsys.

The sample sequences are recorded by hand with known integrals: a constant 300 W, a linear ramp
(the trapezoid rule is exact on it) and a step from 100 to 400 W (where averaging the samples
would be wrong)."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from nsys_run import run_supervised
from perfgate.analysis.energy import active_gpus, counter_energy_j, interpolate, power_energy_j, window_energy
from perfgate.analysis.resources import NO_CLOCK, NO_NVML, NOT_COVERED, allocator_memory, attach_resources
from perfgate.capture.gpu_monitor import GpuMonitor, PynvmlReader, Reading, Sample
from perfgate.records.resources import LaunchEnergy

T0 = 1_800_000_000_000_000_000          # a wall-clock time (Unix ns)
MS = 1_000_000


def recorded(gpu: int = 0, *, watts, every_ms: int = 100, n: int = 21, util: int | None = 90,
             counter: bool = True, start_mj: int = 5_000_000) -> list[Sample]:
    """Samples every ``every_ms`` from T0; ``watts(t_s)`` the power; the counter its exact integral
    (accumulated in mJ), as NVML's total-energy counter would read."""
    out, energy_mj, last = [], float(start_mj), 0.0
    for k in range(n):
        t = k * every_ms / 1e3
        steps = 100
        for i in range(steps):                      # integrate watts over [last, t] finely
            a = last + (t - last) * i / steps
            energy_mj += watts(a + (t - last) / steps / 2) * (t - last) / steps * 1e3
        last = t
        out.append(Sample(t_s=t, gpu=gpu, sm_mhz=1980 - gpu, temperature_c=50, reasons=0, wall_ns=T0 + k * every_ms * MS,
                          power_mw=round(watts(t) * 1e3), energy_mj=round(energy_mj) if counter else None,
                          util_pct=util))
    return out


def test_interpolation_between_samples_and_none_outside() -> None:
    series = [(0, 0.0), (10, 100.0), (20, 100.0)]
    assert interpolate(series, 5) == 50.0 and interpolate(series, 10) == 100.0 and interpolate(series, 15) == 100.0
    assert interpolate(series, -1) is None and interpolate(series, 21) is None and interpolate([], 0) is None


def test_constant_power_counter_and_power_samples_agree() -> None:
    samples = recorded(watts=lambda t: 300.0)
    start, end = T0 + 250 * MS, T0 + 1050 * MS          # 0.8 s between samples
    report = window_energy(samples, start, end, iterations=8, samples_per_iteration=32)
    assert report is not None and report.source == "energy counter"
    assert report.energy_j == pytest.approx(240.0, abs=0.01)          # 300 W x 0.8 s
    assert report.j_per_step == pytest.approx(30.0, abs=0.01) and report.j_per_sample == pytest.approx(30.0 / 32, abs=1e-3)
    assert report.power_mean_w == pytest.approx(300.0, abs=0.1) and report.power_peak_w == 300.0
    assert report.readings == 8 and report.gpus == (0,) and report.sm_mhz_mean == 1980
    power = power_energy_j([(s.wall_ns, s.power_mw) for s in samples], start, end)
    assert power == pytest.approx(240.0, abs=1e-6)
    assert report.metrics() == pytest.approx({"energy.per_sample_j": 30.0 / 32, "energy.per_step_j": 30.0,
                                              "energy.power_mean_w": 300.0, "energy.power_peak_w": 300.0}, abs=1e-3)


def test_power_samples_integrate_by_trapezoid_with_interpolated_ends() -> None:
    ramp = [(T0 + k * 250 * MS, 1e3 * (100 + 100 * k * 0.25)) for k in range(5)]     # 100 -> 200 W over 1 s
    assert power_energy_j(ramp, T0 + 100 * MS, T0 + 900 * MS) == pytest.approx(120.0)   # exact on a line
    step = [(T0 + k * 100 * MS, 1e3 * (100 if k < 5 else 400)) for k in range(11)]     # 100 W, then 400 W
    # trapezoid over [0.05, 0.95]: 100 W to 0.4 s, the 0.4-0.5 s ramp (25 J), 400 W from 0.5 s
    assert power_energy_j(step, T0 + 50 * MS, T0 + 950 * MS) == pytest.approx(35 + 25 + 180)
    assert power_energy_j(step, T0 - 1, T0 + 500 * MS) is None          # starts before the samples
    # irregular sampling (a burst read more often): 182.5 J, where averaging the samples gives 200
    burst = [(T0 + t * MS, w * 1e3) for t, w in ((0, 100), (100, 100), (150, 400), (200, 400), (600, 100), (1000, 100))]
    assert power_energy_j(burst, T0, T0 + 1000 * MS) == pytest.approx(182.5)


def test_a_counter_that_went_backwards_falls_back_to_power_samples() -> None:
    samples = recorded(watts=lambda t: 200.0)
    samples[10] = replace(samples[10], energy_mj=1)                      # a driver reload mid-window
    assert counter_energy_j([(s.wall_ns, s.energy_mj) for s in samples], T0, T0 + 2000 * MS) is None
    report = window_energy(samples, T0 + 100 * MS, T0 + 1100 * MS, iterations=4)
    assert report is not None and report.source == "power samples"
    assert report.energy_j == pytest.approx(200.0, abs=1e-6) and report.j_per_sample is None
    assert "energy.per_sample_j" not in report.metrics() and report.metrics()["energy.per_step_j"] == pytest.approx(50.0)


def test_idle_gpus_of_a_shared_machine_are_not_counted() -> None:
    busy = recorded(0, watts=lambda t: 400.0)
    idle = recorded(1, watts=lambda t: 70.0, util=0)
    window = (T0 + 200 * MS, T0 + 1200 * MS)
    report = window_energy(busy + idle, *window, iterations=10)
    assert active_gpus(busy + idle, *window) == (0,)
    assert report is not None and report.energy_j == pytest.approx(400.0, abs=0.01)
    # without utilization readings every sampled GPU counts; peak power sums one sampling round
    both = window_energy(recorded(0, watts=lambda t: 400.0, util=None) + recorded(1, watts=lambda t: 70.0, util=None),
                         *window, iterations=10)
    assert both is not None and both.gpus == (0, 1) and both.energy_j == pytest.approx(470.0, abs=0.02)
    assert both.power_peak_w == pytest.approx(470.0)


def test_no_samples_around_the_window_means_no_energy() -> None:
    samples = recorded(watts=lambda t: 300.0, n=5)                      # 0 .. 0.4 s
    assert window_energy(samples, T0 + 300 * MS, T0 + 600 * MS, iterations=3) is None
    assert window_energy([], T0, T0 + MS, iterations=1) is None
    assert window_energy(samples, T0 + 200 * MS, T0 + 200 * MS, iterations=1) is None


class ScriptedNvml:
    """pynvml's API as the reader uses it, with a GPU that has no energy counter."""

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.energy_calls, self.power_mw = 0, 250_000

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i
    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return 1755
    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        return 61
    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 0x4
    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self.power_mw
    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        self.energy_calls += 1
        raise self.NVMLError("Not Supported")
    def nvmlDeviceGetUtilizationRates(self, h: int):
        return type("Utilization", (), {"gpu": 97, "memory": 40})()


def test_pynvml_reader_reads_power_and_asks_once_for_a_counter_the_gpu_lacks(monkeypatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = ScriptedNvml()
    reader = PynvmlReader(nvml)
    assert reader.open() == 1
    first, second = reader.read(0), reader.read(0)
    assert first == Reading(sm_mhz=1755, temperature_c=61, reasons=0x4, power_mw=250_000, energy_mj=None, util_pct=97)
    assert second.energy_mj is None and nvml.energy_calls == 1


class Replay:
    """An NvmlReader replaying recorded readings (the last one repeats)."""

    def __init__(self, readings: list[Reading]) -> None:
        self.readings, self.k, self.closed = readings, 0, False

    def open(self) -> int:
        return 1

    def read(self, gpu: int) -> Reading:
        r = self.readings[min(self.k, len(self.readings) - 1)]
        self.k += 1
        return r

    def close(self) -> None:
        self.closed = True


def test_monitor_stamps_each_reading_with_the_wall_clock() -> None:
    import time

    reader = Replay([Reading(1980, 55, 0, power_mw=300_000, energy_mj=1000 * k, util_pct=99) for k in range(100)])
    before = time.time_ns()
    with GpuMonitor(interval_s=0.01, reader=reader) as monitor:
        time.sleep(0.08)
    samples = monitor.samples
    assert reader.closed and len(samples) >= 4
    assert [s.energy_mj for s in samples] == [1000 * k for k in range(len(samples))]
    stamps = [s.wall_ns for s in samples]
    assert stamps == sorted(stamps) and before <= stamps[0] and stamps[-1] <= time.time_ns()
    assert monitor.report() is not None and monitor.report().sm_mhz_max == 1980


@pytest.fixture(scope="module")
def gpu_analysis(fixtures_dir):
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.trace.export import load_trace

    trace = load_trace(fixtures_dir / "traces" / "gpu-transformer" / "trace.sqlite")
    return analyze(trace, AnalysisOptions(skip_steps=0, batch_size=32)), trace


def test_energy_and_allocator_memory_attach_to_a_real_trace_analysis(gpu_analysis) -> None:
    analysis, trace = gpu_analysis
    start = trace.session_start_utc_ns
    assert start == 1795348826387480468                               # TARGET_INFO_SESSION_START_TIME
    steps = analysis.steps
    lo, hi = start + steps.window_start_ns, start + steps.window_end_ns
    samples = [Sample(t_s=k * 0.1, gpu=0, sm_mhz=1980, temperature_c=50, reasons=0, wall_ns=lo - 10**9 + k * 10**8,
                      power_mw=500_000, energy_mj=500 * k * 100, util_pct=100)
               for k in range(int((hi - lo) / 10**8) + 25)]            # 500 W from 1 s before to after
    report = {"gpu_memory": {"max_allocated_bytes": 3 * 2**30, "max_reserved_bytes": 4 * 2**30},
              "window_unix_ns": [lo - 2 * MS, hi]}                    # the workload's own clock: 2 ms earlier
    attached = attach_resources(replace(analysis, launch=replace(analysis.launch, self_report=report)), samples, start)
    window_s = (steps.window_end_ns - steps.window_start_ns) / 1e9
    metrics = attached.metrics()
    assert metrics["energy.per_step_j"] == pytest.approx(500 * window_s / steps.count, rel=1e-6)
    assert metrics["energy.per_sample_j"] == pytest.approx(500 * window_s / (steps.count * 32), rel=1e-6)
    assert metrics["gpu_memory.peak_allocated_mib"] == 3072.0 and metrics["gpu_memory.peak_reserved_mib"] == 4096.0
    assert attached.launch.energy.report.source == "energy counter"
    assert attached.launch.energy.clock_offset_ms == pytest.approx(2.0)
    peak = next(p for p in attached.launch.gpu_memory.peaks if p.metric == "gpu_memory.peak_allocated_mib")
    assert peak.source.startswith("torch allocator")
    assert "gpu_memory.peak_traced_mib" not in metrics                 # this capture had no --cuda-memory-usage


def test_without_nvml_or_a_clock_the_energy_is_absent_and_says_why(gpu_analysis) -> None:
    analysis, trace = gpu_analysis
    for samples, start, why in (([], trace.session_start_utc_ns, NO_NVML),
                                ([Sample(0.0, 0, 1980, 50, 0, wall_ns=1, energy_mj=1)], None, NO_CLOCK),
                                ([Sample(0.0, 0, 1980, 50, 0, wall_ns=1, energy_mj=1)], trace.session_start_utc_ns, NOT_COVERED)):
        attached = attach_resources(analysis, samples, start)
        assert attached.launch.energy == LaunchEnergy(unavailable=why)
        assert not any(m.startswith("energy.") for m in attached.metrics())       # absent, not zero
    assert allocator_memory({"gpu_memory": {"max_allocated_bytes": 0, "max_reserved_bytes": True}}) == {}
    assert allocator_memory(None) == {} and allocator_memory({"gpu_memory": "n/a"}) == {}


PROBE = """
import time
from perfgate import nvtx
time.sleep(0.5)
with nvtx.range("probe"):
    began = time.time_ns()
    time.sleep(0.3)
    ended = time.time_ns()
print("PROBE", began, ended)
"""


def test_a_traces_session_start_places_its_ranges_on_the_wall_clock(nsys_path, torch_module, repo_root, tmp_path) -> None:
    """Energy windows need trace time -> wall clock: on the real nsys, session start + a range's
    start is the time.time_ns() the process read inside it (within a few ms)."""
    from perfgate.trace.export import load_trace

    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    done = run_supervised([nsys_path, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
                           "--export=sqlite", "-o", str(tmp_path / "t"), "-f", "true", sys.executable, str(script)],
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    began, ended = (int(x) for x in next(ln for ln in done.stdout.splitlines() if ln.startswith("PROBE")).split()[1:])
    trace = load_trace(Path(tmp_path / "t.sqlite"))
    nvtx = trace.nvtx.frame()
    probe = nvtx[nvtx["text"] == "probe"].iloc[0]
    assert trace.session_start_utc_ns is not None
    assert abs(trace.session_start_utc_ns + int(probe["start"]) - began) < 20 * MS
    assert abs(trace.session_start_utc_ns + int(probe["end"]) - ended) < 20 * MS
