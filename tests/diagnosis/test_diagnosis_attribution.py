"""Regression attribution on constructed Analysis pairs: the seed-003 optimization ladder run in
reverse (each rung removed names its cause), additivity of phase deltas, kernel deltas, and the
input forms the gate passes (baseline dicts, launch lists, compare outcomes)."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

import pytest

from perfgate.diagnosis import account
from perfgate.diagnosis.attribution import explain_regression
from perfgate.diagnosis.one_run import diagnose
from perfgate.diagnosis.render import render_attribution_text
from perfgate.records.facts import TraceFacts
from perfgate.baselines.store import BaselineLaunch
from perfgate.records.model import (
    Analysis, Direction, GpuIdle, GpuWork, IdleGap, KernelStat, MetricComparison, PhaseStats, Tolerance,
    Verdict,
)
from perfgate.records.steps import StepStats, Summary

STEPS = 10
HALF_GEMM = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64"
FP32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
TRITON = "triton_poi_fused_add_relu_0"


def make_analysis(phases_ms: dict[str, float], *, idle_ms: float = 0.5,
                  idle_gaps: tuple[tuple[float, str], ...] = (), **gpu: object) -> Analysis:
    """STEPS steps of sum(phases) ms; ``idle_gaps``: (ms per step, phase) GPU gaps in every step."""
    step = sum(phases_ms.values())
    summary = Summary(STEPS, step, step, 0.0, step, step, step, step)
    steps = StepStats("step", STEPS, 0, (step,) * STEPS, summary, 0, int(step * STEPS * 1e6))
    phases = {n: PhaseStats(n, STEPS, ms * STEPS, ms, ms, ms, ms / step) for n, ms in phases_ms.items()}
    g = {"kernels_per_step": 50.0, "kernel_ms_per_step": 5.0,
         "top_kernels": (KernelStat(HALF_GEMM, 10 * STEPS, 3.0 * STEPS),
                         KernelStat(TRITON, 40 * STEPS, 2.0 * STEPS)),
         "cuda_api_ms_per_step": 0.3, "h2d_bytes_per_step": 4e6, "h2d_ms_per_step": 0.4,
         "pageable_copies": 0, "sync_calls_per_step": 0.0, **gpu}
    gaps = tuple(IdleGap("0", 0, ms, ("step", p)) for ms, p in idle_gaps for _ in range(STEPS))
    total_idle = idle_ms + sum(ms for ms, _ in idle_gaps)
    idle = GpuIdle(total_idle / step, {"0": total_idle / step}, step * STEPS, gaps)
    return Analysis("t.sqlite", None, None, steps, phases, {}, idle, GpuWork(**g))


FAST = {"data_load": 0.5, "h2d": 0.5, "forward": 4.0, "backward": 4.0, "optimizer": 1.0}


def with_phase(**changes: float) -> dict[str, float]:
    return {**FAST, **changes}


LADDER = {
    # rung removed: (current analysis, expected cause, expected words in the first reason)
    "workers": (make_analysis(with_phase(data_load=30.5), idle_gaps=((29.0, "data_load"),)),
                # the trace shows the loop waiting for data, not how many workers it has
                "input pipeline", "data_load +30.0 ms/step (GPU idle while data_load open): the DataLoader "
                                  "stopped keeping up"),
    "pinned memory": (make_analysis(with_phase(h2d=2.5), pageable_copies=2 * STEPS, h2d_ms_per_step=2.0),
                      "pinned memory", "h2d +2.0 ms/step: pageable H2D copies appeared → pin_memory disabled?"),
    "non-blocking copy": (make_analysis(with_phase(h2d=3.0), sync_calls_per_step=2.0),
                          "non-blocking copy", "h2d +2.5 ms/step: H2D copies became blocking"),
    "mixed precision": (make_analysis(with_phase(forward=6.0, backward=7.0), kernel_ms_per_step=9.0,
                                      top_kernels=(KernelStat(FP32_GEMM, 10 * STEPS, 7.0 * STEPS),
                                                   KernelStat(TRITON, 40 * STEPS, 2.0 * STEPS))),
                        "mixed precision", "autocast disabled?"),
    "compile": (make_analysis(with_phase(forward=5.0, backward=5.5), kernels_per_step=150.0,
                              kernel_ms_per_step=6.0,
                              top_kernels=(KernelStat(HALF_GEMM, 10 * STEPS, 3.0 * STEPS),
                                           KernelStat(ELEMENTWISE, 140 * STEPS, 3.0 * STEPS))),
                "compile", "torch.compile disabled?"),
}


@pytest.mark.parametrize("rung", list(LADDER))
def test_removing_a_ladder_rung_names_it_as_the_cause(rung: str) -> None:
    current, cause, words = LADDER[rung]
    attribution = explain_regression(make_analysis(FAST), current)
    assert attribution.cause == cause
    assert words in attribution.first_reason


def test_adding_a_rung_is_told_as_the_rule_that_no_longer_fires() -> None:
    """The ladder the other way: pinned memory turned on makes the run faster, and the rule that fired
    on the baseline only is the reason, credited with its own evidence's change (the H2D copy time,
    2.0 -> 0.4 ms/step), not the whole phase's."""
    attribution = explain_regression(LADDER["pinned memory"][0], make_analysis(FAST))
    assert attribution.first_reason == ("h2d -1.6 ms/step: no longer: host-device copies use pageable memory: "
                                        "each is staged and blocks the host")
    assert attribution.cause == "pinned memory"
    # the same run against itself: nothing fires on one side only, no rule reason
    same = explain_regression(make_analysis(FAST), make_analysis(FAST))
    assert not any(r.mechanism.startswith("rule:") for r in same.reasons)


def test_removing_the_copy_stream_is_named_from_trace_facts_kept_with_the_baseline() -> None:
    facts = {"steps": STEPS, "h2d_copy_ms_per_step": 0.4, "h2d_on_compute_stream_fraction": 0.0,
             "h2d_overlap_fraction": 0.95, "idle_ms_per_step": 0.5, "idle_by_phase_ms": {"forward": 0.5}}
    baseline = replace(make_analysis(FAST), facts=TraceFacts.from_dict(facts))
    stored = {**baseline.to_dict(), "diagnosis": diagnose(baseline).to_dict()}
    current = make_analysis(with_phase(h2d=1.5), idle_ms=1.5)
    cur_facts = TraceFacts.from_dict({**facts, "h2d_on_compute_stream_fraction": 1.0,
                                      "h2d_overlap_fraction": 0.0, "idle_ms_per_step": 1.5,
                                      "idle_by_phase_ms": {"h2d": 1.0, "forward": 0.5}})
    current = replace(current, facts=cur_facts)
    attribution = explain_regression(Analysis.from_dict(json.loads(json.dumps(stored))), current)
    assert attribution.cause == "overlap stream"
    assert attribution.first_reason.startswith("h2d +1.0 ms/step (GPU idle while h2d open): H2D copies "
                                               "stopped overlapping compute")
    assert attribution.idle_by_phase_delta_ms["h2d"] == pytest.approx(1.0)


def test_phase_deltas_and_self_time_add_up_to_the_step_delta() -> None:
    base = make_analysis(FAST)
    cur = make_analysis(with_phase(data_load=3.0, forward=3.0, optimizer=1.75))
    a = explain_regression(base, cur)
    assert [p.name for p in a.phase_deltas][:1] == ["data_load"]
    assert a.step_mean_delta_ms == pytest.approx(2.5 - 1.0 + 0.75)
    assert sum(p.delta_ms for p in a.phase_deltas) + a.unexplained_delta_ms == pytest.approx(a.step_mean_delta_ms)
    assert a.unexplained_delta_ms == pytest.approx(0.0)


def test_kernel_deltas_are_per_step_and_sorted_by_time_change() -> None:
    cur = make_analysis(FAST, top_kernels=(KernelStat(HALF_GEMM, 12 * STEPS, 4.5 * STEPS),
                                           KernelStat(TRITON, 40 * STEPS, 2.25 * STEPS)))
    a = explain_regression(make_analysis(FAST), cur)
    first = a.kernel_deltas[0]
    assert (first.name, first.ms_delta_per_step, first.count_delta_per_step) == (HALF_GEMM, 1.5, 2.0)
    assert a.kernel_deltas[1].ms_delta_per_step == pytest.approx(0.25)


def test_without_a_rule_change_the_largest_phase_and_its_slower_kernel_are_named() -> None:
    cur = make_analysis(with_phase(forward=5.5), top_kernels=(KernelStat(HALF_GEMM, 10 * STEPS, 4.5 * STEPS),
                                                              KernelStat(TRITON, 40 * STEPS, 2.0 * STEPS)))
    a = explain_regression(make_analysis(FAST), cur)
    assert a.cause is None and a.new_findings == ()
    assert a.first_reason == f"GPU kernel time +1.50 ms/step: {HALF_GEMM} +1.50 ms/step (+0.0 launches/step)"


def test_an_improvement_gets_the_reasons_of_the_speed_up() -> None:
    a = explain_regression(make_analysis(with_phase(forward=6.0)), make_analysis(FAST))
    assert a.first_reason.startswith("forward -2.0 ms/step of host time")
    assert a.explained_ms == pytest.approx(2.0) and "explained: 2.00 of -2.00 ms/step" in render_attribution_text(a)


@dataclass
class _Outcome:
    comparisons: list[MetricComparison]


def _row(metric: str, verdict: Verdict) -> MetricComparison:
    return MetricComparison(metric, "ms", Direction.LOWER_IS_BETTER, 1.0, 2.0, 1.0, 1.0, Tolerance(0.05), verdict)


def test_launch_lists_are_taken_at_the_tables_centre_and_outcomes_give_the_regressed_metrics() -> None:
    from perfgate.gate.statistics import geometric_mean

    launches = [make_analysis(with_phase(data_load=x)) for x in (0.5, 9.5, 1.5)]
    outcome = _Outcome([_row("step_time_ms", Verdict.REGRESSED), _row("phase.forward.cpu_ms", Verdict.PASS)])
    a = explain_regression([make_analysis(FAST)], launches, outcome)
    assert a.step_mean_delta_ms == pytest.approx(geometric_mean([10.0, 19.0, 11.0]) - 10.0)
    assert a.regressed_metrics == ("step_time_ms",)


def test_a_metrics_only_baseline_compares_phases_but_not_rules() -> None:
    base = BaselineLaunch(make_analysis(FAST).metrics(), detail={"phases": {}, "steps": {"count": STEPS}})
    cur = make_analysis(with_phase(h2d=2.5), pageable_copies=2 * STEPS)
    a = explain_regression(base.analysis(), cur)
    assert a.phase_deltas[0].name == "h2d" and a.phase_deltas[0].delta_ms == pytest.approx(2.0)
    assert a.new_findings == ()
    assert a.kernel_deltas == () and a.idle_by_phase_delta_ms == {} and a.baseline_bottleneck is None
    assert a.notes == ("the baseline keeps no GPU detail (gpu, gpu_idle): rules, kernels and idle by "
                       "phase are not compared",)


def test_attribution_text_and_dict_carry_the_first_reason() -> None:
    current, _, _ = LADDER["pinned memory"]
    a = explain_regression(make_analysis(FAST), current)
    doc = json.loads(json.dumps(a.to_dict()))
    assert doc["first_reason"] == a.first_reason and doc["cause"] == "pinned memory"
    text = render_attribution_text(doc)
    assert text.splitlines()[0] == f"first reason: {a.first_reason}"
    assert "newly fires: pageable_copies" in text
    assert render_attribution_text(a) == text


def test_unchanged_code_gets_what_moved_and_no_edit_guessed() -> None:
    """Issue 42: an unchanged rerun whose data loading alone grew (noise, a neighbour's burst) read
    ``data_load +0.8 ms/step ...: a slower dataset or transform?``; with the same code on both sides
    the account says what moved, guesses no edit and names no likely change."""
    base, cur = make_analysis(FAST), make_analysis(with_phase(h2d=2.5), pageable_copies=2 * STEPS, h2d_ms_per_step=2.0)
    changed = explain_regression(base, cur)
    assert changed.cause == "pinned memory" and changed.first_reason.endswith("pin_memory disabled?")
    same = explain_regression(base, cur, same_code=True)
    assert same.cause is None and "?" not in same.first_reason and "pin_memory" not in same.first_reason
    assert same.first_reason == ("h2d +2.0 ms/step: pageable H2D copies appeared "
                                 "(the code did not change: the machine or noise)")
    assert all(r.cause is None and not r.text.endswith("?") for r in same.reasons)
    assert "likely change" not in render_attribution_text(same)
    waited = explain_regression(base, make_analysis(with_phase(data_load=30.5), idle_gaps=((29.0, "data_load"),)),
                                same_code=True)
    assert waited.first_reason == ("data_load +30.0 ms/step (GPU idle while data_load open): the DataLoader stopped "
                                   "keeping up: the loop now waits for each batch (the code did not change: the "
                                   "machine or noise)")


def test_the_reasons_shares_partition_the_change() -> None:
    """Issue 42: ``explained: 29.51 of +29.51 (100%)`` over reasons of 28.51 and 29.51 ms/step: reasons
    that overlap each showed the whole change. In rank order, each shows what the reasons before it
    left, so the lines add up to the explained total."""
    assert account.shares([28.51, 29.51], 29.51) == pytest.approx([28.51, 1.0])
    assert account.shares([3.0, 1.0, 2.0], -5.0) == pytest.approx([3.0, 1.0, 1.0])     # a speed-up too
    assert account.shares([0.5, 0.25], 2.0) == pytest.approx([0.5, 0.25])               # under the change
    # 30 ms of waiting for data and 2 ms of pageable copies, while forward got 4 ms faster: +28 ms/step
    cur = make_analysis(with_phase(data_load=30.5, h2d=2.5, forward=0.0), idle_gaps=((29.0, "data_load"),),
                        pageable_copies=2 * STEPS, h2d_ms_per_step=2.0)
    a = explain_regression(make_analysis(FAST), cur)
    assert len(a.reasons) >= 2 and sum(r.ms for r in a.reasons) > a.step_mean_delta_ms
    lines = [line for line in render_attribution_text(a).splitlines() if line.strip()[:2] in {"1.", "2.", "3.", "4.", "5."}]
    shown = [float(line.split(".", 1)[1].split("ms/step")[0]) for line in lines]
    assert sum(shown) == pytest.approx(a.explained_ms, abs=0.01 * len(shown))
    assert a.explained_ms <= abs(a.step_mean_delta_ms) + 1e-9


def test_the_reasons_figures_come_from_the_launches_the_table_states() -> None:
    """Issue 42: a reason read ``optimizer x1.19`` from the median launch beside the table's worst
    phase ``optimizer +80.6 %``. Over several launches a side the phase deltas, and so the reasons,
    are the table's centres (the geometric mean of the launches), not one launch's."""
    from perfgate.gate.statistics import geometric_mean

    base = [make_analysis(FAST) for _ in range(3)]
    # the median launch by step time (forward 4.0) has optimizer 1.2; the other two 2.0 and 2.2
    cur = [make_analysis(with_phase(optimizer=1.2)), make_analysis(with_phase(optimizer=2.0, forward=2.9)),
           make_analysis(with_phase(optimizer=2.2, forward=4.5))]
    a = explain_regression(base, cur)
    optimizer = next(p for p in a.phase_deltas if p.name == "optimizer")
    assert optimizer.current_ms == pytest.approx(geometric_mean([1.2, 2.0, 2.2]))
    assert optimizer.current_ms != pytest.approx(1.2)
    steps = [sum(with_phase(optimizer=o, forward=f).values()) for o, f in ((1.2, 4.0), (2.0, 2.9), (2.2, 4.5))]
    assert a.step_mean_delta_ms == pytest.approx(geometric_mean(steps) - sum(FAST.values()))
    # one launch a side: that launch
    one = explain_regression(base[:1], cur[:1])
    assert next(p for p in one.phase_deltas if p.name == "optimizer").current_ms == pytest.approx(1.2)
