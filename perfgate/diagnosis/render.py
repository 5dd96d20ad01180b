"""Plain-text renderings of a Diagnosis and an Attribution, for the terminal, markdown (inside a
code block or as list items) and JUnit failure messages. Accept the records or their dicts."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfgate.diagnosis.records import Attribution, Diagnosis


def _d(value: Diagnosis | Attribution | Mapping[str, Any]) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else value.to_dict()


def render_diagnosis_text(diagnosis: Diagnosis | Mapping[str, Any]) -> str:
    """``bottleneck: <class> (confidence N%)``, its evidence, then one block per finding."""
    d = _d(diagnosis)
    lines = [f"bottleneck: {d['bottleneck']} (confidence {float(d.get('confidence') or 0):.0%})"]
    lines += [f"  - {e}" for e in d.get("evidence") or ()]
    for f in d.get("findings") or ():
        lines.append(f"[{f['severity']}] {f['rule']}: {f['message']}")
        lines += [f"    evidence: {e}" for e in f.get("evidence") or ()]
        lines.append(f"    try: {f['suggestion']}")
    return "\n".join(lines)


def render_attribution_text(attribution: Attribution | Mapping[str, Any]) -> str:
    """First reason, then phase deltas (summing with self time to the step delta), GPU idle,
    rule changes and kernel changes."""
    d = _d(attribution)
    lines = [f"first reason: {d['first_reason']}"]
    if d.get("cause"):
        lines.append(f"likely change: {d['cause']}")
    lines += _reason_lines(d)
    lines.append(f"mean step {d['step_mean_delta_ms']:+.2f} ms/step "
                 f"(median {d['step_median_delta_ms']:+.2f}) = phases + self time:")
    width = max([12, *(len(p["name"]) for p in d.get("phase_deltas") or ())])
    for p in d.get("phase_deltas") or ():
        lines.append(f"  {p['name']:<{width}} {p['delta_ms']:+9.2f} ms/step "
                     f"({p['baseline_ms']:.2f} -> {p['current_ms']:.2f})")
    lines.append(f"  {'(self time)':<{width}} {d['unexplained_delta_ms']:+9.2f} ms/step")
    if d.get("gpu_idle_delta_ms") is not None:
        idle = ", ".join(f"{k} {v:+.2f}" for k, v in sorted(
            (d.get("idle_by_phase_delta_ms") or {}).items(), key=lambda kv: -abs(kv[1])) if abs(v) >= 0.005)
        lines.append(f"GPU idle {d['gpu_idle_delta_ms']:+.2f} ms/step" + (f" (by phase: {idle})" if idle else ""))
    for f in d.get("new_findings") or ():
        lines.append(f"newly fires: {f['rule']}: {f['message']}")
    for f in d.get("resolved_findings") or ():
        lines.append(f"no longer fires: {f['rule']}")
    for k in (d.get("kernel_deltas") or ())[:5]:
        if abs(k["ms_delta_per_step"]) >= 0.005 or abs(k["count_delta_per_step"]) >= 0.05:
            lines.append(f"kernel {k['name'][:80]}: {k['ms_delta_per_step']:+.2f} ms/step, "
                         f"{k['count_delta_per_step']:+.1f} launches/step")
    if d.get("baseline_bottleneck") and d.get("baseline_bottleneck") != d.get("current_bottleneck"):
        lines.append(f"bottleneck: {d.get('baseline_bottleneck')} -> {d.get('current_bottleneck')}")
    lines += [f"note: {n}" for n in d.get("notes") or ()]
    return "\n".join(lines)


REASONS_SHOWN = 5


def _reason_lines(d: Mapping[str, Any]) -> list[str]:
    """How much of the step-time change the reasons account for, and each of them by its
    milliseconds; what they leave, as unexplained."""
    delta = float(d.get("step_mean_delta_ms") or 0.0)
    reasons = d.get("reasons") or ()
    if delta <= 0:
        return []
    if not reasons:
        return [f"explained: nothing in the traces accounts for the {delta:+.2f} ms/step change "
                "(no difference in kernels, synchronizations, copies or data loading)"]
    explained = float(d.get("explained_ms") or 0.0)
    lines = [f"explained: {explained:.2f} of {delta:+.2f} ms/step ({explained / delta:.0%}); "
             f"unexplained {delta - explained:.2f} ms/step"]
    for i, r in enumerate(reasons[:REASONS_SHOWN], 1):
        lines.append(f"  {i}. {min(float(r['ms']), delta):.2f} ms/step: {r['text']}")
    return lines
