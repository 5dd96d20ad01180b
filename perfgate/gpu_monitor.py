"""GPU clocks, temperature and throttle reasons sampled through NVML while a launch runs.

A launch whose GPU slowed down for thermal or hardware reasons measured the machine, not the code:
the gate marks it (``Analysis.extra["gpu_clocks"]["throttled"]``) and says so in the result. NVML
comes from ``nvidia-ml-py`` (module ``pynvml``); without it, or without a GPU, monitoring is a no-op.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from statistics import median
from typing import Any

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
class Sample:
    t_s: float
    gpu: int
    sm_mhz: int
    temperature_c: int
    reasons: int              # nvmlClocksEventReasons bitmask


@dataclass(frozen=True)
class MonitorReport:
    samples: int
    sm_mhz_min: int
    sm_mhz_median: float
    sm_mhz_max: int
    temperature_c_max: int
    reasons: tuple[str, ...]  # every reason seen in any sample (except "gpu idle")
    throttled: bool           # a thermal or hardware slowdown was seen

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASONS.items() if mask & bit]


def summarize(samples: list[Sample]) -> MonitorReport | None:
    """The report of a launch's samples (None when there are none)."""
    if not samples:
        return None
    clocks = [s.sm_mhz for s in samples]
    mask = 0
    for s in samples:
        mask |= s.reasons
    return MonitorReport(
        samples=len(samples), sm_mhz_min=min(clocks), sm_mhz_median=float(median(clocks)),
        sm_mhz_max=max(clocks), temperature_c_max=max(s.temperature_c for s in samples),
        reasons=tuple(n for n in reason_names(mask & ~0x1)), throttled=bool(mask & THROTTLE_MASK))


class GpuMonitor:
    """``with GpuMonitor() as m: ...`` samples every GPU each ``interval_s``; ``m.report()`` after."""

    def __init__(self, interval_s: float = 0.25, nvml: Any | None = None) -> None:
        self.interval_s = interval_s
        self._nvml: Any = nvml         # pynvml (untyped) or a stand-in; None until NVML answers
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[Any] = []

    def __enter__(self) -> GpuMonitor:
        nvml = self._nvml
        if nvml is None:
            try:
                import pynvml
            except ImportError:
                return self
            nvml = pynvml
        try:
            nvml.nvmlInit()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - no driver, no GPU: monitoring is off
            return self
        self._nvml = nvml
        self._thread = threading.Thread(target=self._run, name="perfgate-gpu-monitor", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        nvml, start = self._nvml, time.monotonic()
        reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        while not self._stop.is_set():
            for i, h in enumerate(self._handles):
                try:
                    self._samples.append(Sample(
                        t_s=time.monotonic() - start, gpu=i,
                        sm_mhz=int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)),
                        temperature_c=int(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)),
                        reasons=int(reasons(h))))
                except Exception:  # noqa: BLE001 - a failed read is a missing sample
                    pass
            self._stop.wait(self.interval_s)

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            try:
                self._nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass

    def report(self) -> MonitorReport | None:
        return summarize(list(self._samples))
