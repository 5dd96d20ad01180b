"""Diagnosis: the bottleneck class of a run with its evidence, rule findings with suggestions,
and the attribution of a regression to phases, GPU idle time, rules and kernels.

    diagnose(analysis, trace=None) -> Diagnosis
    explain_regression(baseline, current, comparisons=None) -> Attribution
    render_diagnosis_text(diagnosis) / render_attribution_text(attribution) -> str
"""
from __future__ import annotations

import importlib
from typing import Any

# each name's module, imported when the name is first used: ``perfgate analyze`` diagnoses one run
# and never imports the attribution of a regression (``explain_regression``) or its reasons
_HOME = {
    "explain_regression": "attribution", "TraceFacts": "facts", "trace_facts": "facts", "diagnose": "one_run",
    "Attribution": "records", "Diagnosis": "records", "Finding": "records", "KernelDelta": "records",
    "PhaseDelta": "records", "render_attribution_text": "render", "render_diagnosis_text": "render",
    "RULES": "rules",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value
