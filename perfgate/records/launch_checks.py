"""The measurement checks of one launch (``Launch.stability``, ``Launch.gpu_clocks``): whether its
measured steps look stationary (perfgate.gate.statistics.stability) and what NVML saw of its GPU's
clocks (perfgate.capture.gpu_monitor).

Records layer (stdlib only). An analysis record writes each as the key it always had
(``"stability"``, ``"gpu_clocks"``: the fields by name, ``to_dict``); ``from_dict`` reads one back
when writing it again gives the same mapping, else None (the analysis record then keeps the value
in ``extra``, as read).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar


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
        return _read(cls, d)


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
        return _read(cls, d)


_R = TypeVar("_R", StabilityReport, GpuClocks)


def _read(cls: type[_R], d: Any) -> _R | None:
    """``cls`` of ``d``'s fields when each is of its field's kind (a bool, an int, a number, a list
    of strings for a tuple, None only where it may be) and writing it again gives ``d``."""
    if not isinstance(d, Mapping) or set(d) != {f.name for f in fields(cls)}:
        return None
    values = {}
    for f in fields(cls):
        value, kind = d[f.name], str(f.type)
        if value is None:
            if "None" not in kind:
                return None
        elif kind.startswith("tuple"):
            if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
                return None
            value = tuple(value)
        elif kind == "bool":
            if not isinstance(value, bool):
                return None
        elif isinstance(value, bool) or not isinstance(value, int if kind.startswith("int") else (int, float)):
            return None
        values[f.name] = value
    found = cls(**values)
    return found if _same(found.to_dict(), d) else None


def _same(written: Mapping[str, Any], read: Mapping[str, Any]) -> bool:
    """Whether ``written`` is ``read`` once tuples are lists (as JSON reads them back)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in written.items()} == \
        {k: list(v) if isinstance(v, tuple) else v for k, v in read.items()}
