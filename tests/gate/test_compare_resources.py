"""Memory and energy gate on their own (issue 18): a regression of peak memory or energy per sample
fails while step time passes; phases still gate only behind step time; a workload can make
kernels per step gate alone (inference); and the attribution names such a regression first."""
from __future__ import annotations

from dataclasses import replace

import pytest

from perfgate.gate.compare import ComparePolicy, compare_launches, needs_more_launches
from perfgate.gate.metric_specs import spec_for
from perfgate.records.model import Verdict

STEPS = (100.0, 100.4, 99.7)
ALLOC = "gpu_memory.peak_allocated_mib"


def launches(**metrics: tuple[float, ...]) -> list[dict[str, float]]:
    n = len(next(iter(metrics.values())))
    return [{name: values[k] for name, values in metrics.items()} for k in range(n)]


def test_specs_gate_memory_and_energy_per_sample_alone_and_report_the_rest() -> None:
    for metric in (ALLOC, "gpu_memory.peak_reserved_mib", "gpu_memory.peak_traced_mib", "energy.per_sample_j"):
        assert spec_for(metric).gating and spec_for(metric).alone, metric
    for metric in ("energy.per_step_j", "energy.power_mean_w", "energy.power_peak_w", "step_time_p99_ms",
                   "kernels_per_step"):
        assert not spec_for(metric).gating, metric
    assert spec_for(ALLOC).unit == "MiB" and spec_for("energy.power_peak_w").unit == "W"


def test_twenty_percent_more_memory_regresses_while_step_time_passes() -> None:
    base = launches(step_time_ms=STEPS, step_time_mean_ms=STEPS, **{ALLOC: (4096.0,) * 3,
                                                                     "phase.forward.cpu_ms": (10.0, 10.1, 9.9)})
    cur = launches(step_time_ms=(100.2, 99.9, 100.1), step_time_mean_ms=(100.2, 99.9, 100.1),
                   **{ALLOC: (4915.2,) * 3, "phase.forward.cpu_ms": (13.0, 13.1, 12.9)})
    out = compare_launches(base, cur)
    assert out.verdict is Verdict.REGRESSED and out.failed
    memory, forward, step = out.row(ALLOC), out.row("phase.forward.cpu_ms"), out.row("step_time_ms")
    assert memory.gating and memory.verdict is Verdict.REGRESSED and memory.change == pytest.approx(0.2)
    assert "no launch-to-launch variance" in memory.note           # identical peaks: tolerance decides
    assert step.verdict is Verdict.PASS
    assert forward.verdict is Verdict.REGRESSED and not forward.gating   # phases stay behind step time
    assert out.summary.startswith("REGRESSED: gpu_memory.peak_allocated_mib +20.0 % (4,096 MiB -> 4,915 MiB, tolerance 10 % and 64.0 MiB)")


@pytest.mark.parametrize("before, after", [(4096.0, 4300.8), (250.0, 300.0)])
def test_memory_within_its_tolerance_or_floor_passes(before: float, after: float) -> None:
    out = compare_launches(launches(step_time_ms=STEPS, **{ALLOC: (before,) * 3}),
                           launches(step_time_ms=STEPS, **{ALLOC: (after,) * 3}))
    assert out.verdict is Verdict.PASS and out.row(ALLOC).verdict is Verdict.PASS


def test_energy_per_sample_regresses_alone_beyond_its_tolerance() -> None:
    base = launches(step_time_ms=STEPS, **{"energy.per_sample_j": (0.500, 0.502, 0.498), "energy.per_step_j": (16.0, 16.06, 15.94)})
    more = launches(step_time_ms=STEPS, **{"energy.per_sample_j": (0.540, 0.541, 0.539), "energy.per_step_j": (17.3, 17.31, 17.28)})
    out = compare_launches(base, more)
    row = out.row("energy.per_sample_j")
    assert out.verdict is Verdict.REGRESSED and row.gating and row.verdict is Verdict.REGRESSED
    assert row.p_value is not None and row.p_value < 0.01 and "metrics gating alone" in row.note
    assert not out.row("energy.per_step_j").gating                     # reported, never gating
    slight = launches(step_time_ms=STEPS, **{"energy.per_sample_j": (0.515, 0.516, 0.514)})    # +3 %
    assert compare_launches(base, slight).verdict is Verdict.PASS
    noisy = launches(step_time_ms=STEPS, **{"energy.per_sample_j": (0.45, 0.70, 0.56)})
    unsure = compare_launches(base, noisy)
    assert unsure.row("energy.per_sample_j").verdict is Verdict.INCONCLUSIVE and needs_more_launches(unsure)


def test_a_workload_can_make_kernels_per_step_gate_alone() -> None:
    base = launches(step_time_ms=STEPS, kernels_per_step=(2.0, 2.0, 2.0))
    lost = launches(step_time_ms=STEPS, kernels_per_step=(160.0, 160.0, 160.0))
    assert compare_launches(base, lost).verdict is Verdict.PASS         # diagnostic by default
    out = compare_launches(base, lost, ComparePolicy(gate_alone=("kernels_per_step",)))
    assert out.verdict is Verdict.REGRESSED and out.row("kernels_per_step").gating
    off = ComparePolicy(gate_alone=("kernels_per_step",), gating={"kernels_per_step": False})
    assert compare_launches(base, lost, off).verdict is Verdict.PASS    # an explicit gating override wins


@pytest.fixture(scope="module")
def ladder(fixtures_dir):
    from perfgate.analysis import AnalysisOptions, analyze_trace

    def one(case: str):
        return analyze_trace(fixtures_dir / "traces" / case / "trace.sqlite", AnalysisOptions(skip_steps=0))
    return one("reverse-ladder-full"), one("reverse-ladder-no-compile")


def test_a_memory_regression_is_the_first_reason_when_step_time_passes(ladder) -> None:
    from perfgate.diagnosis.attribution import explain_regression

    full, _ = ladder
    base = replace(full, launch=replace(full.launch, resource_metrics={ALLOC: 4096.0}))
    cur = replace(full, launch=replace(full.launch, resource_metrics={ALLOC: 4915.2}))
    outcome = compare_launches([base.metrics()], [cur.metrics()])
    attribution = explain_regression(base, cur, outcome)
    assert attribution.first_reason.startswith(
        "peak GPU memory allocated (torch allocator) +20.0% (4,096 -> 4,915 MiB): more memory held at the peak")
    assert attribution.cause == "memory"


def test_lost_cuda_graphs_are_named_by_kernels_per_batch(ladder) -> None:
    """The compiled side replays a CUDA graph per batch (a few kernels, one graph launch); the
    change runs eagerly: kernels per batch lead the attribution over the step-time reasons."""
    from perfgate.diagnosis.attribution import explain_regression

    full, eager = ladder
    graphs = replace(full, gpu=replace(full.gpu, kernels_per_step=3.0, graph_launches_per_step=1.0))
    policy = ComparePolicy(gate_alone=("kernels_per_step",))
    outcome = compare_launches([graphs.metrics()], [eager.metrics()], policy)
    assert outcome.verdict is Verdict.REGRESSED and outcome.regressed[0].metric == "kernels_per_step"
    attribution = explain_regression(graphs, eager, outcome)
    assert attribution.first_reason.startswith("kernels per batch 3 -> 433 (+430/batch, CUDA graph launches per "
                                               "batch 1 -> 0): CUDA graphs lost")
    assert attribution.cause == "compile"


def test_a_kernel_regression_smaller_than_the_step_regression_follows_the_step_diagnosis(ladder) -> None:
    """The real compile-removed pair: kernels +25 %, mean step +32 %: the compile change leads (told
    from the analyses' facts: Triton kernels replaced by eager ones) and the kernels are a note."""
    from perfgate.diagnosis.attribution import explain_regression

    full, eager = ladder
    outcome = compare_launches([full.metrics()], [eager.metrics()], ComparePolicy(gate_alone=("kernels_per_step",)))
    assert outcome.row("kernels_per_step").verdict is Verdict.REGRESSED
    attribution = explain_regression(full, eager, outcome)
    assert "torch.compile removed" in attribution.first_reason and not attribution.first_reason.startswith("kernels")
    assert attribution.cause == "compile"
    assert any(n.startswith("also regressed: kernels per batch 346 -> 433") for n in attribution.notes)


def test_energy_per_sample_leads_alone_and_never_beside_a_step_time_regression() -> None:
    """`energy per sample +8.0% (0.5 -> 0.54 J): …` is the first reason where energy alone regressed;
    beside a step-time regression it keeps its own line (docs/diagnosis.md, every claim)."""
    from perfgate.diagnosis.resources import leading_reason, resource_reasons

    base = launches(step_time_ms=STEPS, **{"energy.per_sample_j": (0.500, 0.502, 0.498)})
    more = launches(step_time_ms=STEPS, **{"energy.per_sample_j": (0.540, 0.541, 0.539)})
    led = leading_reason(compare_launches(base, more).comparisons)
    assert led is not None
    text, cause, others = led
    assert text == "energy per sample +8.0% (0.5 -> 0.54 J): the GPU does more work or runs longer per sample", text
    assert cause == "energy" and others == []
    slower = launches(step_time_ms=(130.0, 130.4, 129.7), **{"energy.per_sample_j": (0.540, 0.541, 0.539)})
    both = compare_launches(base, slower)
    assert both.row("step_time_ms").verdict is Verdict.REGRESSED
    assert [c.metric for c, _, _ in resource_reasons(both.comparisons)] == ["energy.per_sample_j"]   # its own line
    assert leading_reason(both.comparisons) is None                                           # never the first reason
