"""A launch's GPU resources (perfgate.analysis.resources): its peak GPU memory by source
(``Launch.gpu_memory``) and the energy of its measured steps (``Launch.energy``: the EnergyReport
perfgate.analysis.energy makes from NVML's samples over the measured window, or why there is none).

Records layer (stdlib only). An analysis record writes the memory as ``"gpu_memory"`` (``{metric:
{"mib": peak, "source": words}}``) and the energy as ``"energy"``: the report's fields
(``to_dict``: ``j_per_step`` and ``j_per_sample`` besides), its gate metrics under ``"metrics"``
and ``"clock_offset_ms"``; or ``{"unavailable": why}``. ``from_dict`` reads each back when writing
it again gives the same mapping, else None (the analysis record keeps it in ``extra``, as read).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfgate.records.fields import read_fields


@dataclass(frozen=True)
class EnergyReport:
    """The energy of one launch's measured window. ``iterations``: measured steps per process
    (one iteration of the whole job); ``samples_per_iteration``: its batch size times world size
    (None when unknown: no per-sample energy)."""

    source: str                       # "energy counter" or "power samples"
    window_s: float
    gpus: tuple[int, ...]             # the GPUs counted, as Sample.gpu numbers them (the i-th visible one)
    energy_j: float                   # all counted GPUs together
    iterations: int
    samples_per_iteration: int | None
    power_mean_w: float               # energy_j / window_s
    power_peak_w: float | None        # largest sum over the counted GPUs of one sampling round
    sm_mhz_mean: float | None         # mean SM clock of the counted GPUs' samples in the window
    readings: int                     # samples inside the window

    @property
    def j_per_step(self) -> float | None:
        return self.energy_j / self.iterations if self.iterations > 0 else None

    @property
    def j_per_sample(self) -> float | None:
        if not self.samples_per_iteration or self.iterations <= 0:
            return None
        return self.energy_j / (self.iterations * self.samples_per_iteration)

    def metrics(self) -> dict[str, float]:
        """The gate's energy metrics (compare.METRIC_SPECS: ``energy.*``)."""
        out = {"energy.power_mean_w": self.power_mean_w}
        if self.power_peak_w is not None:
            out["energy.power_peak_w"] = self.power_peak_w
        if self.j_per_step is not None:
            out["energy.per_step_j"] = self.j_per_step
        if self.j_per_sample is not None:
            out["energy.per_sample_j"] = self.j_per_sample
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "window_s": self.window_s, "gpus": list(self.gpus),
                "energy_j": self.energy_j, "iterations": self.iterations,
                "samples_per_iteration": self.samples_per_iteration, "j_per_step": self.j_per_step,
                "j_per_sample": self.j_per_sample, "power_mean_w": self.power_mean_w,
                "power_peak_w": self.power_peak_w, "sm_mhz_mean": self.sm_mhz_mean,
                "readings": self.readings}

    @classmethod
    def from_dict(cls, d: Any) -> EnergyReport | None:
        """The EnergyReport of ``d`` (``to_dict``'s keys, and any others) when ``to_dict`` of it gives
        those keys back, else None."""
        if not isinstance(d, Mapping) or not _REPORT_KEYS <= set(d):
            return None
        return read_fields(cls, {k: d[k] for k in _REPORT_KEYS}, derived=("j_per_step", "j_per_sample"))


_REPORT_KEYS = {"source", "window_s", "gpus", "energy_j", "iterations", "samples_per_iteration", "j_per_step",
                "j_per_sample", "power_mean_w", "power_peak_w", "sm_mhz_mean", "readings"}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class LaunchEnergy:
    """``Launch.energy``: the energy over the launch's measured window (``report``, with how far the
    trace's window placed on the wall clock starts from the workload's own word, ``clock_offset_ms``),
    or why there is none (``unavailable``)."""

    report: EnergyReport | None = None
    clock_offset_ms: float | None = None
    unavailable: str | None = None

    def metrics(self) -> dict[str, float]:
        """The gate's energy metrics of the launch (none without a report)."""
        return self.report.metrics() if self.report is not None else {}

    def to_dict(self) -> dict[str, Any]:
        if self.report is None:
            return {"unavailable": self.unavailable}
        return {**self.report.to_dict(), "metrics": self.report.metrics(), "clock_offset_ms": self.clock_offset_ms}

    @classmethod
    def from_dict(cls, d: Any) -> LaunchEnergy | None:
        """The LaunchEnergy of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        if not isinstance(d, Mapping):
            return None
        if set(d) == {"unavailable"}:
            return cls(unavailable=d["unavailable"]) if isinstance(d["unavailable"], str) else None
        offset = d.get("clock_offset_ms")
        report = EnergyReport.from_dict(d)
        if report is None or set(d) != _REPORT_KEYS | {"metrics", "clock_offset_ms"} or not (
                offset is None or _number(offset)):
            return None
        found = cls(report=report, clock_offset_ms=offset)
        return found if found.to_dict() == dict(d) else None


@dataclass(frozen=True)
class MemoryPeak:
    """One source's peak GPU memory: its gate metric (``gpu_memory.peak_allocated_mib``, ...), the
    peak in MiB, and the source in words (``torch allocator``, ``nsys CUDA memory trace``)."""

    metric: str
    mib: float
    source: str


@dataclass(frozen=True)
class GpuMemory:
    """``Launch.gpu_memory``: each memory source's peak, in the order the analysis found them."""

    peaks: tuple[MemoryPeak, ...]

    def to_dict(self) -> dict[str, Any]:
        return {p.metric: {"mib": p.mib, "source": p.source} for p in self.peaks}

    @classmethod
    def from_dict(cls, d: Any) -> GpuMemory | None:
        """The GpuMemory of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        if not isinstance(d, Mapping) or not d:
            return None
        peaks = []
        for metric, peak in d.items():
            if not (isinstance(metric, str) and isinstance(peak, Mapping) and set(peak) == {"mib", "source"}
                    and _number(peak["mib"]) and isinstance(peak["source"], str)):
                return None
            peaks.append(MemoryPeak(metric, peak["mib"], peak["source"]))
        return cls(tuple(peaks))
