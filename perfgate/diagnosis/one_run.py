"""The diagnosis of one run: its bottleneck class with the evidence, and the rules that fired."""
from __future__ import annotations

from perfgate.diagnosis.bottleneck import classify
from perfgate.diagnosis.evidence import gpu_active
from perfgate.records.diagnosis import Diagnosis
from perfgate.diagnosis.rules import run_rules
from perfgate.records.model import Analysis


def diagnose(a: Analysis) -> Diagnosis:
    """Bottleneck class, evidence and findings of one run, from its Analysis alone: the rules that
    read raw events read them as ``a.facts`` (made in the analysis pass, or read back with a stored
    analysis record); without facts, those rules fall back on what the rest of the Analysis says."""
    facts = a.facts
    verdict = classify(a, facts)
    findings = run_rules(a, facts)
    return Diagnosis(bottleneck=verdict.bottleneck, confidence=round(verdict.confidence, 4),
                     evidence=verdict.evidence, findings=findings, gpu_active=gpu_active(a),
                     scores={k: round(v, 4) for k, v in verdict.scores.items()},
                     facts=None if facts is None else facts.to_dict())
