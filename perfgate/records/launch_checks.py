"""The measurement checks of one launch (``Launch.stability``, ``Launch.gpu_clocks``): whether its
measured steps look stationary (perfgate.gate.statistics.stability) and what NVML saw of its GPU's
clocks (perfgate.capture.gpu_monitor).

Records layer (stdlib only). An analysis record writes each as the key it always had
(``"stability"``, ``"gpu_clocks"``: the fields by name, ``to_dict``); ``from_dict`` reads one back
when writing it again gives the same mapping, else None (the analysis record then keeps the value
in ``extra``, as read).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from perfgate.records.fields import read_fields


@dataclass(frozen=True)
class StabilityReport:
    """Whether one launch's measured steps look stationary.

    ``drift_fraction``: (median of second half − median of first half) / overall median.
    ``changepoint_index``: first step of the second level of the best two-level split (None if the
    split is not significant), ``level_shift_fraction``: its (right − left median) / overall median.
    ``noise_fraction``: robust step-to-step noise (MAD of successive differences / √2) / median.
    """

    stable: bool
    steps: int
    drift_fraction: float
    changepoint_index: int | None
    level_shift_fraction: float
    noise_fraction: float
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> StabilityReport | None:
        """The StabilityReport of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        return read_fields(cls, d)


@dataclass(frozen=True)
class GpuClocks:
    """What NVML saw of a launch's GPUs' clocks while it ran."""

    samples: int
    sm_mhz_min: int
    sm_mhz_median: float
    sm_mhz_max: int
    temperature_c_max: int
    reasons: tuple[str, ...]  # every clocks-event reason seen in any sample (except "gpu idle")
    throttled: bool           # a thermal or hardware slowdown was seen

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> GpuClocks | None:
        """The GpuClocks of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        return read_fields(cls, d)
