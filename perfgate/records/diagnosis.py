"""Records the diagnosis produces (perfgate.diagnosis): a Finding per rule that fired, the
Diagnosis of one run (``Launch.diagnosis``), and the Attribution of a change between two runs
(``WorkloadResult.attribution``). Frozen dataclasses with JSON-ready ``to_dict()``.

Records layer (stdlib only). A result record writes the Attribution under ``"extra"`` as
``"attribution"``; ``Attribution.from_dict`` reads it back.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# Bottleneck classes (the words users see).
DATA_LOADING = "data-loading bound"
H2D_COPY = "host-to-device-copy bound"
CPU_LAUNCH = "CPU launch bound"
SYNCHRONIZATION = "synchronization bound"
GPU_COMPUTE = "GPU compute bound"
CPU_COMPUTE = "CPU compute bound"           # CPU-only run whose compute phases dominate
UNDETERMINED = "undetermined"

CPU_ONLY_NOTE = "no GPU activity: CPU-only run"

SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class Finding:
    """One rule that fired: what it saw (evidence), what it means (message) and what to try."""

    rule: str                          # rule id, e.g. "pageable_copies"
    severity: str                      # "info" | "warning" | "critical"
    message: str
    evidence: tuple[str, ...]
    suggestion: str
    cause: str | None = None           # the training-loop setting it points at, e.g. "pinned memory"
    phases: tuple[str, ...] = ()       # phases whose time the finding explains
    impact_ms: float | None = None     # estimated cost per step, when the rule can say

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = list(self.evidence)
        d["phases"] = list(self.phases)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Finding:
        return cls(**{**d, "evidence": tuple(d["evidence"]), "phases": tuple(d["phases"])})


@dataclass(frozen=True)
class Diagnosis:
    """The bottleneck class of one run, why (evidence), and every rule that fired."""

    bottleneck: str
    confidence: float                  # 0..1: share of the classifying signal the winner holds
    evidence: tuple[str, ...]
    findings: tuple[Finding, ...]
    gpu_active: bool
    scores: dict[str, float] = field(default_factory=dict)   # per class, fraction of a step
    facts: dict[str, Any] | None = None                      # trace-derived TraceFacts, as a dict

    @property
    def rules_fired(self) -> tuple[str, ...]:
        return tuple(f.rule for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bottleneck": self.bottleneck,
            "confidence": self.confidence,
            "gpu_active": self.gpu_active,
            "evidence": list(self.evidence),
            "scores": dict(self.scores),
            "findings": [f.to_dict() for f in self.findings],
            "facts": None if self.facts is None else dict(self.facts),
        }

    @classmethod
    def from_dict(cls, d: Any) -> Diagnosis | None:
        """The Diagnosis of ``d`` when ``to_dict`` of it gives ``d`` back, else None (a record of
        another perfgate's diagnosis, kept as read)."""
        if not isinstance(d, Mapping) or set(d) != _DIAGNOSIS_KEYS:
            return None
        kinds_ok = (isinstance(d["bottleneck"], str) and isinstance(d["gpu_active"], bool)
                    and isinstance(d["confidence"], (int, float)) and not isinstance(d["confidence"], bool)
                    and isinstance(d["evidence"], list) and isinstance(d["findings"], list)
                    and isinstance(d["scores"], Mapping) and (d["facts"] is None or isinstance(d["facts"], Mapping)))
        if not kinds_ok:
            return None
        try:
            found = cls(bottleneck=d["bottleneck"], confidence=d["confidence"], evidence=tuple(d["evidence"]),
                        findings=tuple(Finding.from_dict(f) for f in d["findings"]), gpu_active=d["gpu_active"],
                        scores=dict(d["scores"]), facts=None if d["facts"] is None else dict(d["facts"]))
        except (TypeError, KeyError):     # a finding of other keys
            return None
        return found if found.to_dict() == dict(d) else None


_DIAGNOSIS_KEYS = {"bottleneck", "confidence", "gpu_active", "evidence", "scores", "findings", "facts"}


@dataclass(frozen=True)
class PhaseDelta:
    """CPU time per step of one phase, before and after (ms); a missing side counts as 0."""

    name: str
    baseline_ms: float
    current_ms: float

    @property
    def delta_ms(self) -> float:
        return self.current_ms - self.baseline_ms


@dataclass(frozen=True)
class KernelDelta:
    """One kernel name's time per step, before and after, and the change in its launches per step."""

    name: str
    count_delta_per_step: float       # current - baseline launches per step
    baseline_ms_per_step: float
    current_ms_per_step: float

    @property
    def ms_delta_per_step(self) -> float:
        return self.current_ms_per_step - self.baseline_ms_per_step


@dataclass(frozen=True)
class Reason:
    """A difference between baseline and current that accounts for ``ms`` per step of the
    step-time change: ``mechanism`` (data_loading, kernels_added, kernel_launches, kernels_longer, dtype,
    syncs, rule:<id>, phase_time), ``where`` (phase or the step's own code), ``text`` (the words
    every report prints), ``cause`` (the likely edit, only when its evidence changed)."""

    mechanism: str
    where: str | None
    ms: float
    text: str
    cause: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "where": self.where, "ms": self.ms, "text": self.text,
                "cause": self.cause}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reason:
        return cls(d["mechanism"], d["where"], d["ms"], d["text"], d["cause"])


@dataclass(frozen=True)
class Attribution:
    """Which phases, GPU idle time, rules and kernels account for a change in step time."""

    step_mean_delta_ms: float          # current - baseline mean step time
    step_median_delta_ms: float
    phase_deltas: tuple[PhaseDelta, ...]     # sorted by delta, largest increase first
    unexplained_delta_ms: float        # delta of step self time (step - sum of phases)
    gpu_idle_delta_ms: float | None    # GPU idle time per step, current - baseline
    idle_by_phase_delta_ms: dict[str, float]
    new_findings: tuple[Finding, ...]
    resolved_findings: tuple[Finding, ...]
    kernel_deltas: tuple[KernelDelta, ...]   # sorted by |ms delta|
    first_reason: str
    cause: str | None = None           # training-loop setting most likely changed, e.g. "pinned memory"
    regressed_metrics: tuple[str, ...] = ()
    baseline_bottleneck: str | None = None
    current_bottleneck: str | None = None
    notes: tuple[str, ...] = ()
    reasons: tuple[Reason, ...] = ()   # ranked by the ms/step they account for
    explained_ms: float = 0.0          # of |step_mean_delta_ms|, by the reasons (at most all of it)
    unlocated: tuple[Reason, ...] = ()  # host time of phases no difference locates (a GPU run's rest)
    baseline_differs: str | None = None  # the baseline measured other code or software (perfgate.baselines.provenance)
    software_explains: tuple[int, ...] = ()  # reasons (1-based) that the software change may explain too

    def to_dict(self) -> dict[str, Any]:
        return {
            "first_reason": self.first_reason,
            "cause": self.cause,
            "step_mean_delta_ms": self.step_mean_delta_ms,
            "step_median_delta_ms": self.step_median_delta_ms,
            "phase_deltas": [
                {"name": p.name, "baseline_ms": p.baseline_ms, "current_ms": p.current_ms,
                 "delta_ms": p.delta_ms}
                for p in self.phase_deltas
            ],
            "unexplained_delta_ms": self.unexplained_delta_ms,
            "gpu_idle_delta_ms": self.gpu_idle_delta_ms,
            "idle_by_phase_delta_ms": dict(self.idle_by_phase_delta_ms),
            "new_findings": [f.to_dict() for f in self.new_findings],
            "resolved_findings": [f.to_dict() for f in self.resolved_findings],
            "kernel_deltas": [
                {"name": k.name, "count_delta_per_step": k.count_delta_per_step,
                 "ms_delta_per_step": k.ms_delta_per_step,
                 "baseline_ms_per_step": k.baseline_ms_per_step,
                 "current_ms_per_step": k.current_ms_per_step}
                for k in self.kernel_deltas
            ],
            "regressed_metrics": list(self.regressed_metrics),
            "baseline_bottleneck": self.baseline_bottleneck,
            "current_bottleneck": self.current_bottleneck,
            "notes": list(self.notes),
            "reasons": [r.to_dict() for r in self.reasons],
            "explained_ms": self.explained_ms,
            "unlocated": [r.to_dict() for r in self.unlocated],
            "baseline_differs": self.baseline_differs,
            "software_explains": list(self.software_explains),
        }

    @classmethod
    def from_dict(cls, d: Any) -> Attribution | None:
        """The Attribution of ``d`` when ``to_dict`` of it writes ``d`` back as it is (keys, kinds,
        the deltas it derives), else None."""
        if not isinstance(d, Mapping):
            return None
        try:
            found = cls(
                step_mean_delta_ms=d["step_mean_delta_ms"], step_median_delta_ms=d["step_median_delta_ms"],
                phase_deltas=tuple(PhaseDelta(p["name"], p["baseline_ms"], p["current_ms"]) for p in d["phase_deltas"]),
                unexplained_delta_ms=d["unexplained_delta_ms"], gpu_idle_delta_ms=d["gpu_idle_delta_ms"],
                idle_by_phase_delta_ms=dict(d["idle_by_phase_delta_ms"]),
                new_findings=tuple(Finding.from_dict(f) for f in d["new_findings"]),
                resolved_findings=tuple(Finding.from_dict(f) for f in d["resolved_findings"]),
                kernel_deltas=tuple(KernelDelta(k["name"], k["count_delta_per_step"], k["baseline_ms_per_step"],
                                                k["current_ms_per_step"]) for k in d["kernel_deltas"]),
                first_reason=d["first_reason"], cause=d["cause"],
                regressed_metrics=tuple(d["regressed_metrics"]), baseline_bottleneck=d["baseline_bottleneck"],
                current_bottleneck=d["current_bottleneck"], notes=tuple(d["notes"]),
                reasons=tuple(Reason.from_dict(r) for r in d["reasons"]), explained_ms=d["explained_ms"],
                unlocated=tuple(Reason.from_dict(r) for r in d["unlocated"]), baseline_differs=d["baseline_differs"],
                software_explains=tuple(d["software_explains"]))
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        return found if _written(found.to_dict()) == _written(d) else None


def _written(d: Any) -> str:
    """``d`` as a record file writes it (sorted keys), to tell whether a record read back writes
    the same bytes."""
    return json.dumps(d, sort_keys=True, default=str)
