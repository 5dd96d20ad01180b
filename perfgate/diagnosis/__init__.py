"""Diagnosis: the bottleneck class of a run with its evidence, rule findings with suggestions,
and the attribution of a regression to phases, GPU idle time, rules and kernels.

    diagnose(analysis, trace=None) -> Diagnosis
    explain_regression(baseline, current, comparisons=None) -> Attribution
    render_diagnosis_text(diagnosis) / render_attribution_text(attribution) -> str
"""
from __future__ import annotations

from perfgate.diagnosis.attribution import explain_regression
from perfgate.diagnosis.facts import TraceFacts, trace_facts
from perfgate.diagnosis.one_run import diagnose
from perfgate.diagnosis.records import Attribution, Diagnosis, Finding, KernelDelta, PhaseDelta
from perfgate.diagnosis.render import render_attribution_text, render_diagnosis_text
from perfgate.diagnosis.rules import RULES

__all__ = [
    "RULES", "Attribution", "Diagnosis", "Finding", "KernelDelta", "PhaseDelta", "TraceFacts",
    "diagnose", "explain_regression", "render_attribution_text", "render_diagnosis_text",
    "trace_facts",
]
