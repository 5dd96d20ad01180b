"""The diagnosis of one run: its bottleneck class with the evidence, and the rules that fired."""
from __future__ import annotations

from typing import TYPE_CHECKING

from perfgate.diagnosis.bottleneck import classify
from perfgate.diagnosis.evidence import gpu_active
from perfgate.diagnosis.facts import TraceFacts, facts_from_mapping, trace_facts
from perfgate.diagnosis.records import Diagnosis
from perfgate.diagnosis.rules import run_rules
from perfgate.records.model import Analysis

if TYPE_CHECKING:
    from perfgate.trace.export import Trace


def diagnose(a: Analysis, trace: Trace | None = None, *, facts: TraceFacts | None = None) -> Diagnosis:
    """Bottleneck class, evidence and findings of one run. ``trace`` (the Trace the analysis was
    made from) lets the rules read raw events; ``facts`` passes TraceFacts computed before; without
    either, the facts a diagnosis stored with the analysis (``extra["diagnosis"]``, read back) count."""
    if facts is None and trace is not None:
        facts = trace_facts(trace, a)
    if facts is None:
        facts = facts_from_mapping(a.extra)
    verdict = classify(a, facts)
    findings = run_rules(a, facts)
    return Diagnosis(bottleneck=verdict.bottleneck, confidence=round(verdict.confidence, 4),
                     evidence=verdict.evidence, findings=findings, gpu_active=gpu_active(a),
                     scores={k: round(v, 4) for k, v in verdict.scores.items()},
                     facts=None if facts is None else facts.to_dict())
