"""One line of a run history file (perfgate.commands.history writes and reads them;
perfgate.commands.history_changes finds their change points)."""
from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STEP_METRIC = "step_time_ms"


@dataclass(frozen=True)
class Entry:
    """One line of a history file."""

    time: str
    verdict: str
    launches: tuple[dict[str, float], ...]
    commit: str | None = None
    kind: str = "gate"                     # "gate" or "baseline" (a recording run)
    baseline_step_time_ms: float | None = None
    machine: Mapping[str, Any] | None = None

    @property
    def step_time_ms(self) -> float | None:
        """Geometric mean over the launches of each launch's step time (what the gate compares)."""
        values = [m[STEP_METRIC] for m in self.launches if m.get(STEP_METRIC, 0) > 0]
        return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None
