"""Plain-text renderings of a Diagnosis and an Attribution, for the terminal, markdown (inside a
code block or as list items) and JUnit failure messages. Accept the records or their dicts."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from perfgate.diagnosis.account import shares
from perfgate.records.diagnosis import Attribution, Diagnosis


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
    """What the baseline measured when it was other code or software, the first reason, how much
    the reasons explain and each of them, then phase deltas (summing with self time to the step
    delta), GPU idle, rule changes and kernel changes: one account, from one comparison."""
    d = _d(attribution)
    lines = [f"baseline: {d['baseline_differs']}"] if d.get("baseline_differs") else []
    lines.append(f"first reason: {d['first_reason']}")
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
    """How much of the step-time change (either way) the reasons account for, each of them by its
    milliseconds, and what they leave, as unexplained (with the host time the traces do not
    locate); which reasons the software change may explain too."""
    delta = float(d.get("step_mean_delta_ms") or 0.0)
    reasons = d.get("reasons") or ()
    if delta == 0:
        return []
    explained = float(d.get("explained_ms") or 0.0)
    unlocated = d.get("unlocated") or ()
    host = ("; phase time no difference locates: "
            + ", ".join(r["text"].split(" ms/step", 1)[0] + " ms/step" for r in unlocated)) if unlocated else ""
    if not reasons:
        return [f"explained: none of the {delta:+.2f} ms/step: no phase, kernel, synchronization or copy changed "
                f"by more than noise{host}"]
    lines = [f"explained: {explained:.2f} of {delta:+.2f} ms/step ({explained / abs(delta):.0%}); "
             f"unexplained {abs(delta) - explained:.2f} ms/step{host}"]
    parts = shares([float(r["ms"]) for r in reasons], delta)
    for i, (r, part) in enumerate(zip(reasons[:REASONS_SHOWN], parts), 1):
        lines.append(f"  {i}. {part:.2f} ms/step: {r['text']}")
    software = [i for i in d.get("software_explains") or () if i <= min(len(reasons), REASONS_SHOWN)]
    if software:
        lines.append(f"  the software the baseline ran on differs: it may account for reason"
                     f"{'s' if len(software) > 1 else ''} {', '.join(map(str, software))} too "
                     "(the libraries choose the kernels)")
    return lines
