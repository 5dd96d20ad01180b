"""The diagnosis rules as records, in one table: each rule's id, its check (perfgate.diagnosis.checks),
what its newly firing says about a change, and how many milliseconds per step of a change its
cause accounts for. Adding a rule is a check function and one row of :data:`RULES`."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfgate.diagnosis.checks import (
    blocking_copy, copy_not_overlapped, cpu_launch_bound, dataloader_blocking, long_gpu_gaps,
    low_gpu_utilization, no_mixed_precision, not_compiled, pageable_copies, synchronizing_api_calls,
    synchronous_copies, warmup_in_window,
)
from perfgate.diagnosis.evidence import COMPUTE_PHASES, data_phase, idle_ms_per_step, phase_ms
from perfgate.records.diagnosis import Finding
from perfgate.records.facts import H2D_PHASE, TraceFacts
from perfgate.records.model import Analysis

Check = Callable[[Analysis, "TraceFacts | None"], "Finding | None"]
Explains = Callable[[Analysis, Analysis], float]


@dataclass(frozen=True)
class Rule:
    """One diagnosis rule. ``check`` finds it in one run (its Finding's ``rule`` is ``id``);
    ``phrase`` is what its newly firing says about a regression (the seed-003 optimization
    ladder, reversed); ``explains_ms(baseline, current)`` is the step-time-relevant change
    (ms/step) that its cause would produce; ``reason_cause`` names the cause a regression's
    reason gives when the finding's own cause is a setting the traces cannot see change."""

    id: str
    check: Check
    phrase: str
    explains_ms: Explains
    reason_cause: str | None = None


def _h2d(base: Analysis, cur: Analysis) -> float:
    return phase_ms(cur, H2D_PHASE) - phase_ms(base, H2D_PHASE)


def _compute(base: Analysis, cur: Analysis) -> float:
    return sum(phase_ms(cur, p) - phase_ms(base, p) for p in COMPUTE_PHASES)


def _gpu(attr: str) -> Explains:
    """The change of one GpuWork field; 0 when a side has no GPU detail (unknown, not a change)."""
    def delta(base: Analysis, cur: Analysis) -> float:
        if base.gpu is None or cur.gpu is None:
            return 0.0
        return float(getattr(cur.gpu, attr) or 0.0) - float(getattr(base.gpu, attr) or 0.0)
    return delta


def _idle(base: Analysis, cur: Analysis) -> float:
    b, c = idle_ms_per_step(base), idle_ms_per_step(cur)
    return 0.0 if b is None or c is None else c - b


def _p90(base: Analysis, cur: Analysis) -> float:
    return cur.steps.summary_ms.p90 - base.steps.summary_ms.p90


#: Every rule, in the order they run (findings are then sorted by severity).
RULES: tuple[Rule, ...] = (
    Rule("dataloader_blocking", dataloader_blocking,
         "the DataLoader stopped keeping up: the loop now waits for each batch "
         "(a slower dataset or transform, or fewer workers?)",
         # the data phase of the current run on both sides (as the rule reads it)
         lambda base, cur: phase_ms(cur, data_phase(cur)) - phase_ms(base, data_phase(cur)),
         # how many workers the loop has is not in the trace; that it waits for data is
         reason_cause="input pipeline"),
    Rule("pageable_copies", pageable_copies, "pageable H2D copies appeared → pin_memory disabled?",
         lambda base, cur: max(_h2d(base, cur), _gpu("h2d_ms_per_step")(base, cur))),
    Rule("blocking_copy", blocking_copy, "H2D copies became blocking (a sync per copy) → non_blocking=False?",
         _h2d),
    Rule("synchronous_copies", synchronous_copies, "synchronous cudaMemcpy appeared → non_blocking=False?", _h2d),
    # the copy's own phase: GPU idle that grew elsewhere (e.g. while data loads) is not the copy's
    Rule("copy_not_overlapped", copy_not_overlapped, "H2D copies stopped overlapping compute → copy stream removed?",
         _h2d),
    Rule("synchronizing_api_calls", synchronizing_api_calls,
         "the host started waiting for the GPU inside the step (new sync calls)", _gpu("cuda_api_ms_per_step")),
    Rule("no_mixed_precision", no_mixed_precision,
         "GEMM/conv kernels went from half precision to fp32 → autocast disabled?",
         lambda base, cur: max(_gpu("kernel_ms_per_step")(base, cur), _compute(base, cur))),
    Rule("not_compiled", not_compiled,
         "Triton kernels disappeared, unfused elementwise kernels appeared → torch.compile disabled?",
         lambda base, cur: max(_gpu("kernel_ms_per_step")(base, cur), _compute(base, cur))),
    Rule("cpu_launch_bound", cpu_launch_bound, "kernels got many and short: the CPU cannot launch fast enough",
         _compute),
    Rule("warmup_in_window", warmup_in_window, "warm-up/autotuning moved into the measured window", _p90),
    Rule("long_gpu_gaps", long_gpu_gaps, "long GPU idle gaps appeared", _idle),
    Rule("low_gpu_utilization", low_gpu_utilization, "the GPU became idle most of the time", _idle),
)
RULE_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def run_rules(analysis: Analysis, facts: TraceFacts | None = None,
              rules: tuple[Rule, ...] = RULES) -> tuple[Finding, ...]:
    """Every finding of ``rules``, most severe first (stable within a severity)."""
    found = [f for f in (rule.check(analysis, facts) for rule in rules) if f is not None]
    order = {"critical": 0, "warning": 1, "info": 2}
    return tuple(sorted(found, key=lambda f: order.get(f.severity, 3)))


__all__ = ["RULES", "RULE_BY_ID", "Rule", "run_rules"]
