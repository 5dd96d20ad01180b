"""GPU clocks, temperature, throttle reasons, power and the energy counter sampled through NVML
while a launch runs.

A launch whose GPU slowed down for thermal or hardware reasons measured the machine, not the code:
the gate marks it (``Analysis.launch.gpu_clocks.throttled``) and says so in the result. The
same samples give the launch's energy over its measured steps (perfgate.analysis.energy). NVML comes from
``nvidia-ml-py`` (module ``pynvml``) behind :class:`NvmlReader`; without it, or without a GPU,
monitoring is a no-op. Only the GPUs ``CUDA_VISIBLE_DEVICES`` leaves to the launch are sampled
(NVML itself sees every GPU of the host, those of other jobs too).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from statistics import median
from typing import Any, Protocol

from perfgate.records.launch_checks import GpuClocks
from perfgate.system.machine import visible_gpus

# nvmlClocksEventReasons bits (NVML's "clocks throttle reasons").
REASONS: dict[int, str] = {
    0x1: "gpu idle",
    0x2: "applications clocks setting",
    0x4: "software power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown",
    0x80: "hardware power brake slowdown",
    0x100: "display clock setting",
}
THROTTLE_MASK = 0x8 | 0x20 | 0x40 | 0x80
"""Reasons that mark a launch as throttled: thermal or hardware slowdowns. A software power cap is
reported but does not mark the launch (a busy H100 reaches its power limit in normal work)."""


@dataclass(frozen=True)
class Reading:
    """One GPU's NVML values at one moment; None where this GPU or driver does not report it."""

    sm_mhz: int
    temperature_c: int
    reasons: int
    power_mw: int | None = None      # nvmlDeviceGetPowerUsage
    energy_mj: int | None = None     # nvmlDeviceGetTotalEnergyConsumption (since the driver loaded)
    util_pct: int | None = None      # nvmlDeviceGetUtilizationRates().gpu


@dataclass(frozen=True)
class Sample:
    t_s: float
    gpu: int                  # the i-th GPU CUDA_VISIBLE_DEVICES leaves visible (PynvmlReader)
    sm_mhz: int
    temperature_c: int
    reasons: int              # nvmlClocksEventReasons bitmask
    wall_ns: int = 0          # time.time_ns() of the reading: maps it onto a trace's clock
    power_mw: int | None = None
    energy_mj: int | None = None
    util_pct: int | None = None


class NvmlReader(Protocol):
    """What the monitor needs from NVML: ``open()`` -> GPU count (raises when NVML is unusable),
    ``read(gpu)`` -> Reading (raises for a failed read: a missing sample), ``close()``. ``gpu`` is
    the monitor's number of a GPU, 0 to count - 1 (``Sample.gpu``)."""

    def open(self) -> int: ...

    def read(self, gpu: int) -> Reading: ...

    def close(self) -> None: ...


def _text(value: str | bytes) -> str:
    """A pynvml string (bytes in older nvidia-ml-py) as str."""
    return value.decode() if isinstance(value, bytes) else value


def open_visible(nvml: Any | None = None) -> tuple[Any, list[Any]]:
    """NVML initialised (the ``pynvml`` module where ``nvml`` is None, else an object with its API)
    and the handles of the GPUs ``CUDA_VISIBLE_DEVICES`` leaves visible, in CUDA's order
    (``visible_gpus``); every GPU where the variable is unset or names MIG instances by their own
    UUIDs. Raises where NVML is unusable."""
    if nvml is None:
        import pynvml

        nvml = pynvml
    nvml.nvmlInit()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cuda_visible is not None:
        visible = visible_gpus(cuda_visible, [(i, _text(nvml.nvmlDeviceGetUUID(h))) for i, h in enumerate(handles)])
        handles = handles if visible is None else [handles[i] for i in visible]
    return nvml, handles


class PynvmlReader:
    """NvmlReader over the ``pynvml`` module (or an object with its API, for tests). Its GPU i is the
    i-th GPU ``CUDA_VISIBLE_DEVICES`` leaves visible (``visible_gpus``): CUDA's device i with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and with CUDA's default order on a host of one GPU model;
    every GPU in NVML's order where the variable is unset or names MIG instances by their own UUIDs."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml: Any = nvml
        self._handles: list[Any] = []
        self._unsupported: set[str] = set()

    def open(self) -> int:
        self._nvml, self._handles = open_visible(self._nvml)
        return len(self._handles)

    def _optional(self, name: str, read: Any) -> int | None:
        """``read()`` as an int, None where it failed (and, once failed, without asking again)."""
        if name in self._unsupported:
            return None
        try:
            return int(read())
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported, an old driver, a fake without it
            self._unsupported.add(name)
            return None

    def read(self, gpu: int) -> Reading:
        nvml, h = self._nvml, self._handles[gpu]
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return Reading(
            sm_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
            temperature_c=int(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
            reasons=int(reasons(h)),
            power_mw=self._optional("power", lambda: nvml.nvmlDeviceGetPowerUsage(h)),
            energy_mj=self._optional("energy", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h)),
            util_pct=self._optional("util", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu))

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def monitor_report(samples: list[Sample]) -> GpuClocks | None:
    """The report of a launch's samples (None when there are none)."""
    if not samples:
        return None
    clocks = [s.sm_mhz for s in samples]
    mask = 0
    for s in samples:
        mask |= s.reasons
    return GpuClocks(
        samples=len(samples), sm_mhz_min=min(clocks), sm_mhz_median=float(median(clocks)),
        sm_mhz_max=max(clocks), temperature_c_max=max(s.temperature_c for s in samples),
        reasons=tuple(n for n in reason_names(mask & ~0x1)), throttled=bool(mask & THROTTLE_MASK))


class GpuMonitor:
    """``with GpuMonitor() as m: ...`` samples every GPU each ``interval_s``; ``m.report()`` (clocks)
    and ``m.samples`` (everything, for perfgate.analysis.energy) after. ``reader``: an NvmlReader (default
    pynvml, or ``nvml``: an object with pynvml's API)."""

    def __init__(self, interval_s: float = 0.1, nvml: Any | None = None,
                 reader: NvmlReader | None = None) -> None:
        self.interval_s = interval_s
        self._reader: NvmlReader = reader if reader is not None else PynvmlReader(nvml)
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gpus = 0

    def __enter__(self) -> GpuMonitor:
        try:
            self._gpus = self._reader.open()
        except Exception:  # noqa: BLE001 - no pynvml, no driver, no GPU: monitoring is off
            return self
        self._thread = threading.Thread(target=self._run, name="perfgate-gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.is_set():
            self._sample_all(time.monotonic() - start)
            self._stop.wait(self.interval_s)
        self._sample_all(time.monotonic() - start)   # a last reading: the launch's end is covered

    def _sample_all(self, t_s: float) -> None:
        for i in range(self._gpus):
            try:
                r = self._reader.read(i)
            except Exception:  # noqa: BLE001 - a failed read is a missing sample
                continue
            self._samples.append(Sample(
                t_s=t_s, gpu=i, sm_mhz=r.sm_mhz, temperature_c=r.temperature_c, reasons=r.reasons,
                wall_ns=time.time_ns(), power_mw=r.power_mw, energy_mj=r.energy_mj, util_pct=r.util_pct))

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._reader.close()

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)

    def report(self) -> GpuClocks | None:
        return monitor_report(list(self._samples))
