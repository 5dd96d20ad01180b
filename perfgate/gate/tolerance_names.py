"""The metric names a tolerance may name (``[tool.perfgate.tolerance]``, a workload's
``tolerance`` table, ``--perfgate-tolerance`` / ``--tolerance``): the gate's metrics
(perfgate.gate.metric_specs.METRIC_SPECS), ``phase.<phase>.cpu_ms`` / ``phase.<phase>.gpu_ms`` for any
phase, and fnmatch patterns matching at least one of them. Anything else is a typo that would
otherwise change nothing, silently."""
from __future__ import annotations

import fnmatch
import re

from perfgate.errors import ConfigError

PHASE_KINDS = ("cpu_ms", "gpu_ms")
_PHASE_RE = re.compile(r"phase\.(.+)\.([^.]+)")


def fixed_metrics() -> list[str]:
    """The metric names without a phase in them (``step_time_ms``, ``gpu_idle_fraction``, ...)."""
    from perfgate.gate.metric_specs import METRIC_SPECS

    return [s.name_pattern for s in METRIC_SPECS if not any(c in s.name_pattern for c in "*?[")]


def names_a_metric(pattern: str) -> bool:
    """Whether ``pattern`` (a metric name or an fnmatch pattern) matches a metric of the gate."""
    if any(fnmatch.fnmatchcase(name, pattern) for name in fixed_metrics()):
        return True
    match = _PHASE_RE.fullmatch(pattern)
    phases = {"forward", match.group(1) if match else "forward"}   # wildcards match themselves
    return any(fnmatch.fnmatchcase(f"phase.{p}.{k}", pattern) for p in phases for k in PHASE_KINDS)


def check_metric_name(pattern: str, where: str) -> None:
    """ConfigError naming ``where`` when ``pattern`` matches no metric of the gate."""
    if not names_a_metric(pattern):
        raise ConfigError(
            f"{where}: no metric is named {pattern!r}: a tolerance names one of {', '.join(fixed_metrics())}, "
            "phase.<phase>.cpu_ms, phase.<phase>.gpu_ms, or an fnmatch pattern matching them (e.g. 'phase.*.cpu_ms')")
