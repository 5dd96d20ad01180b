"""What a workload's noise means for the gate at its budget (``WorkloadResult.noise``): the
launch-to-launch spread of its step time and the smallest slowdown the gate catches 9 times in 10;
perfgate.gate.sequential_looks computes it (``noise_report``) and words it.

Records layer (stdlib only). A result record writes it under ``"extra"`` as ``"noise"``
(``to_dict``: its fields, by name); ``from_dict`` reads it back.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

#: The metric whose launch-to-launch noise sizes the gate.
NOISE_METRIC = "step_time_ms"


@dataclass(frozen=True)
class NoiseReport:
    """The noise of a baseline's launches at a launch budget."""

    metric: str                         # NOISE_METRIC
    noise: float | None                 # launch-to-launch log-sd of step time (≈ CV); None: fewer than 2 launches
    n_baseline: int                     # the baseline launches that measured it
    max_launches: int                   # the budget's most launches
    alpha_per_look: float               # the level of each look (Pocock's)
    tolerance_rel: float | None         # the metric's relative tolerance
    detectable_change: float | None     # relative slowdown caught 9 in 10 at max_launches

    @property
    def too_noisy(self) -> bool:
        """Whether a slowdown a little beyond the tolerance cannot be established at the budget:
        the noise alone needs more than the tolerance plus half of it."""
        rel = self.tolerance_rel
        if self.detectable_change is None or rel is None or not math.isfinite(rel):
            return False
        return self.detectable_change > 1.5 * rel + 1e-12

    def describe(self) -> str:
        if self.noise is None:
            return (f"launch-to-launch noise unknown ({self.n_baseline} baseline launch"
                    f"{'es' if self.n_baseline != 1 else ''}; record 2 or more to estimate it)")
        text = f"launch-to-launch noise {self.noise * 100:.2f} % ({self.n_baseline} baseline launches)"
        if self.detectable_change is not None:
            text += (f"; a slowdown is caught 9 times in 10 from +{self.detectable_change * 100:.1f} % "
                     f"at up to {self.max_launches} launch{'es' if self.max_launches != 1 else ''}")
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Any) -> NoiseReport | None:
        """The NoiseReport of ``d`` when it is exactly one (``to_dict``'s keys and kinds), else None."""
        if not isinstance(d, Mapping) or set(d) != {f.name for f in fields(cls)}:
            return None
        counts = (d["n_baseline"], d["max_launches"])
        numbers = (d["noise"], d["tolerance_rel"], d["detectable_change"])
        if (isinstance(d["metric"], str) and all(isinstance(n, int) and not isinstance(n, bool) for n in counts)
                and _number(d["alpha_per_look"]) and all(n is None or _number(n) for n in numbers)):
            return cls(**d)
        return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
