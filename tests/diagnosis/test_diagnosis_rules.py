"""Each diagnosis rule and the bottleneck classifier on constructed Analysis objects, at and
around their thresholds."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from perfgate.diagnosis import checks, rules
from perfgate.diagnosis.one_run import diagnose
from perfgate.records.diagnosis import (
    CPU_COMPUTE, CPU_LAUNCH, CPU_ONLY_NOTE, DATA_LOADING, GPU_COMPUTE, H2D_COPY, SYNCHRONIZATION,
)
from perfgate.diagnosis.render import render_diagnosis_text
from perfgate.records.facts import TraceFacts
from perfgate.records.model import Analysis, GpuIdle, GpuWork, IdleGap, KernelStat, PhaseStats
from perfgate.records.steps import StepStats, Summary
from layout import TESTS

STEPS = 10


def make_analysis(phases_ms: dict[str, float], *, step_ms: float | None = None,
                  gpu: dict | None = None, idle_fraction: float | None = None,
                  gaps: tuple[tuple[float, tuple[str, ...]], ...] = (),
                  durations: tuple[float, ...] | None = None) -> Analysis:
    """An Analysis of STEPS steps whose phases take ``phases_ms`` per step (CPU)."""
    step = step_ms if step_ms is not None else sum(phases_ms.values())
    durs = durations if durations is not None else (step,) * STEPS
    n = len(durs)
    mean = sum(durs) / n
    med = sorted(durs)[(n - 1) // 2]
    summary = Summary(n, mean, med, 0.0, min(durs), max(durs), min(durs), max(durs))
    steps = StepStats("step", n, 0, tuple(durs), summary, 0, int(mean * n * 1e6))
    phases = {name: PhaseStats(name, n, ms * n, ms, ms, ms, ms / mean) for name, ms in phases_ms.items()}
    work = None
    if gpu is not None:
        g = {"kernels_per_step": 0.0, "kernel_ms_per_step": 0.0, "top_kernels": (),
             "cuda_api_ms_per_step": 0.0, "h2d_bytes_per_step": 0.0, "h2d_ms_per_step": 0.0,
             "pageable_copies": 0, "sync_calls_per_step": 0.0, **gpu}
        work = GpuWork(**g)
    idle = None
    if idle_fraction is not None:
        idle = GpuIdle(idle_fraction, {"0": idle_fraction}, mean * n,
                       tuple(IdleGap("0", 0, d, r) for d, r in gaps))
    return Analysis("test.sqlite", None, None, steps, phases, {}, idle, work)


GPU = {"kernels_per_step": 40.0, "kernel_ms_per_step": 8.0}
PHASES = {"data_load": 1.0, "h2d": 1.0, "forward": 4.0, "backward": 3.0, "optimizer": 1.0}


def gpu_run(**gpu: object) -> Analysis:
    return make_analysis(PHASES, gpu={**GPU, **gpu}, idle_fraction=0.1)


# ----------------------------------------------------------------------------- nsys twins


@pytest.mark.parametrize("pageable, fires", [(4, False), (5, True), (20, True)])
def test_pageable_copies_fire_from_half_a_copy_per_step(pageable: int, fires: bool) -> None:
    finding = checks.pageable_copies(gpu_run(pageable_copies=pageable, h2d_ms_per_step=0.5))
    assert (finding is not None) is fires
    if fires:
        assert finding.cause == "pinned memory"
        assert "pin_memory=True" in finding.suggestion
        assert finding.evidence[0].startswith(f"{pageable / STEPS:.1f} pageable memcpys per step")


@pytest.mark.parametrize("case, fires", [("gpu-resnet-pageable", True), ("gpu-seed003-loop-workers0", True),
                                         ("gpu-resnet-pinned", False), ("gpu-transformer", False)])
def test_pageable_copies_answer_the_same_from_the_trace_and_from_its_baseline_record(case: str, fires: bool) -> None:
    """One count of pageable copies: the rule used the trace's count of host-to-device copies when
    it had the trace, and the analysis's count of copies in either direction when it read a
    baseline's record, so a baseline and a run could disagree about the same program."""
    from pathlib import Path

    from perfgate.baselines.store import BaselineLaunch
    from perfgate.pipeline.inputs import analyze_file

    a = analyze_file(TESTS / "fixtures" / "traces" / case / "trace.sqlite")
    from_record = BaselineLaunch.of(a, a.metrics()).analysis()
    assert from_record.gpu is not None and from_record.gpu.pageable_copies == a.gpu.pageable_copies
    assert (checks.pageable_copies(a) is not None) is fires
    assert (checks.pageable_copies(from_record) is not None) is fires
    assert ("pageable_copies" in a.launch.diagnosis.rules_fired) is fires


@pytest.mark.parametrize("per_step, fires", [(0.9, False), (1.0, True)])
def test_synchronous_copies_need_one_cudamemcpy_per_step_from_the_trace(per_step: float, fires: bool) -> None:
    facts = TraceFacts(steps=STEPS, sync_memcpy_per_step=per_step)
    assert (checks.synchronous_copies(gpu_run(), facts) is not None) is fires
    assert checks.synchronous_copies(gpu_run(), None) is None


@pytest.mark.parametrize("calls, sync_ms, severity", [(0.9, 0.0, None), (1.0, 0.0, "info"),
                                                      (2.0, 0.49, "info"), (2.0, 0.5, "warning")])
def test_synchronizing_api_calls_severity_follows_time_blocked(calls: float, sync_ms: float,
                                                               severity: str | None) -> None:
    facts = TraceFacts(steps=STEPS, sync_ms_per_step=sync_ms)
    finding = checks.synchronizing_api_calls(gpu_run(sync_calls_per_step=calls), facts)
    assert (None if finding is None else finding.severity) == severity


@pytest.mark.parametrize("gap_ms, fires", [(0.99, False), (1.0, True)])
def test_long_gpu_gaps_fire_at_the_absolute_floor_for_short_steps(gap_ms: float, fires: bool) -> None:
    a = make_analysis(PHASES, gpu=GPU, idle_fraction=0.2, gaps=((gap_ms, ("step", "data_load")),))
    finding = checks.long_gpu_gaps(a)
    assert (finding is not None) is fires
    if fires:
        assert finding.phases == ("data_load",)
        assert "while the CPU was in step > data_load" in finding.evidence[0]


def test_long_gpu_gaps_scale_with_the_step() -> None:
    a = make_analysis({"forward": 100.0}, gpu=GPU, idle_fraction=0.2, gaps=((9.9, ("step",)),))
    assert checks.long_gpu_gaps(a) is None   # threshold 10 % of a 100 ms step


@pytest.mark.parametrize("idle, fires", [(0.49, False), (0.5, True)])
def test_low_gpu_utilization_fires_at_half_idle(idle: float, fires: bool) -> None:
    a = make_analysis(PHASES, gpu=GPU, idle_fraction=idle)
    assert (checks.low_gpu_utilization(a) is not None) is fires


# ----------------------------------------------------------------------------- PyTorch rules


def _loader_run(load_ms: float, idle_in_load: float) -> Analysis:
    phases = {"data_load": load_ms, "forward": 10.0 - load_ms}
    return make_analysis(phases, gpu=GPU, idle_fraction=idle_in_load / 10.0,
                         gaps=tuple((idle_in_load, ("step", "data_load")) for _ in range(STEPS)))


@pytest.mark.parametrize("load_ms, idle_ms, fires", [
    (0.9, 0.9, False),    # data_load share 9 % < 10 %
    (1.0, 0.99, False),   # idle while loading 9.9 % < 10 %
    (1.0, 1.0, True),
    (5.0, 4.0, True),
])
def test_dataloader_blocking_needs_share_and_idle_while_loading(load_ms: float, idle_ms: float,
                                                               fires: bool) -> None:
    finding = checks.dataloader_blocking(_loader_run(load_ms, idle_ms))
    assert (finding is not None) is fires
    if fires:
        assert finding.cause == "workers" and "num_workers>0" in finding.suggestion


def test_dataloader_blocking_on_a_cpu_only_run_fires_from_thirty_percent() -> None:
    assert checks.dataloader_blocking(make_analysis({"data_load": 2.9, "forward": 7.1})) is None
    finding = checks.dataloader_blocking(make_analysis({"data_load": 3.0, "forward": 7.0}))
    assert finding is not None and "CPU-only" in finding.evidence[0]
    # "most of the step" only above half ("most" was said of 2.3 ms in 7.1)
    assert finding.message.startswith("data loading takes 30% of the step: ")
    most = checks.dataloader_blocking(make_analysis({"data_load": 5.1, "forward": 4.9}))
    assert most is not None and most.message.startswith("data loading takes most of the step: ")


def test_blocking_copy_with_a_trace_counts_syncs_inside_h2d() -> None:
    a = gpu_run(sync_calls_per_step=3.0, h2d_bytes_per_step=1e6)
    assert checks.blocking_copy(a, TraceFacts(steps=STEPS, h2d_syncs_per_step=0.0)) is None
    finding = checks.blocking_copy(a, TraceFacts(steps=STEPS, h2d_syncs_per_step=2.0))
    assert finding is not None and finding.cause == "non-blocking copy"


@pytest.mark.parametrize("syncs, h2d_bytes, fires", [(1.9, 1e6, False), (2.0, 0.0, False), (2.0, 1e6, True)])
def test_blocking_copy_without_a_trace_needs_two_syncs_and_h2d_traffic(syncs: float, h2d_bytes: float,
                                                                       fires: bool) -> None:
    a = gpu_run(sync_calls_per_step=syncs, h2d_bytes_per_step=h2d_bytes)
    assert (checks.blocking_copy(a) is not None) is fires


@pytest.mark.parametrize("overlap, fires", [(0.21, False), (0.2, True), (0.0, True)])
def test_copy_not_overlapped_fires_when_copies_barely_overlap_kernels(overlap: float, fires: bool) -> None:
    facts = TraceFacts(steps=STEPS, h2d_copy_ms_per_step=1.0, h2d_overlap_fraction=overlap,
                       h2d_on_compute_stream_fraction=1.0)
    finding = checks.copy_not_overlapped(gpu_run(h2d_ms_per_step=1.0), facts)
    assert (finding is not None) is fires
    if fires:
        assert finding.cause == "overlap stream" and "torch.cuda.stream" in finding.suggestion


def test_copy_not_overlapped_ignores_copies_under_two_percent_of_the_step() -> None:
    facts = TraceFacts(steps=STEPS, h2d_copy_ms_per_step=0.19, h2d_overlap_fraction=0.0)
    assert checks.copy_not_overlapped(gpu_run(), facts) is None


SGEMM = "ampere_sgemm_128x64_nn"
TF32_CONV = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32"
HALF_GEMM = "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64"
BF16_GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
TRITON = "triton_poi_fused_add_relu_0"


@pytest.mark.parametrize("kernels, fires", [
    (((SGEMM, 10, 20.0), (ELEMENTWISE, 100, 80.0)), True),       # fp32 GEMM 20 % of kernel time
    (((SGEMM, 10, 19.0), (ELEMENTWISE, 100, 81.0)), False),      # 19 %
    (((TF32_CONV, 10, 50.0), (ELEMENTWISE, 100, 50.0)), True),   # TF32 is not mixed precision
    (((TF32_CONV, 10, 50.0), (HALF_GEMM, 10, 5.0), (ELEMENTWISE, 10, 45.0)), True),   # half 5 %
    (((TF32_CONV, 10, 50.0), (HALF_GEMM, 10, 6.0), (ELEMENTWISE, 10, 44.0)), False),  # half 6 %
    (((BF16_GEMM, 10, 60.0), (ELEMENTWISE, 100, 40.0)), False),
])
def test_no_mixed_precision_reads_kernel_names(kernels: tuple, fires: bool) -> None:
    top = tuple(KernelStat(n, c, t) for n, c, t in kernels)
    finding = checks.no_mixed_precision(gpu_run(top_kernels=top))
    assert (finding is not None) is fires
    if fires:
        assert finding.cause == "mixed precision" and "torch.autocast" in finding.suggestion


@pytest.mark.parametrize("kernels, fires", [
    (((ELEMENTWISE, 100, 1.0),), True),                      # 10 per step, no Triton
    (((ELEMENTWISE, 99, 1.0),), False),
    (((ELEMENTWISE, 300, 1.0), (TRITON, 10, 1.0)), False),   # compiled
])
def test_not_compiled_needs_elementwise_kernels_and_no_triton(kernels: tuple, fires: bool) -> None:
    top = tuple(KernelStat(n, c, t) for n, c, t in kernels)
    finding = checks.not_compiled(gpu_run(top_kernels=top))
    assert (finding is not None) is fires
    if fires:
        assert finding.cause == "compile" and "torch.compile" in finding.suggestion


@pytest.mark.parametrize("kernels, kernel_ms, idle, fires", [
    (100.0, 2.0, 0.3, True),     # 20 µs mean
    (99.0, 1.0, 0.3, False),
    (100.0, 2.1, 0.3, False),    # 21 µs
    (100.0, 2.0, 0.29, False),
])
def test_cpu_launch_bound_rule_thresholds(kernels: float, kernel_ms: float, idle: float, fires: bool) -> None:
    a = make_analysis(PHASES, gpu={"kernels_per_step": kernels, "kernel_ms_per_step": kernel_ms},
                      idle_fraction=idle)
    assert (checks.cpu_launch_bound(a) is not None) is fires


def test_warmup_in_window_flags_a_slow_first_measured_step() -> None:
    assert checks.warmup_in_window(make_analysis(PHASES, durations=(19.9,) + (10.0,) * 9)) is None
    finding = checks.warmup_in_window(make_analysis(PHASES, durations=(20.0,) + (10.0,) * 9))
    assert finding is not None and finding.evidence[0].startswith("first measured step 20.00 ms = 2.0x")


def test_warmup_in_window_flags_two_level_step_times_as_info() -> None:
    finding = checks.warmup_in_window(make_analysis(PHASES, durations=(10.0, 21.0) * 5))
    assert finding is not None and finding.severity == "info"
    assert "two levels: 10.00 ms and 21.00 ms (50% of steps slow" in finding.evidence[0]
    assert checks.warmup_in_window(make_analysis(PHASES, durations=(10.0, 19.0) * 5)) is None


def test_warmup_in_window_flags_kernel_set_changes_from_two_steps() -> None:
    a = gpu_run()
    assert checks.warmup_in_window(a, TraceFacts(steps=STEPS, kernel_set_changes=1)) is None
    finding = checks.warmup_in_window(a, TraceFacts(steps=STEPS, kernel_set_changes=2))
    assert finding is not None and "cudnn.benchmark autotuning" in finding.message
    assert finding.cause == "cudnn.benchmark/recompilation"


def test_warmup_in_window_names_autotuning_only_where_the_kernels_show_it() -> None:
    """A CPU MLP with a slow first step read "cudnn.benchmark autotuning, recompilation": it had neither."""
    finding = checks.warmup_in_window(make_analysis(PHASES, durations=(20.0,) + (10.0,) * 9))
    assert finding is not None and finding.message == "warm-up work falls inside the measured window"
    assert "cudnn" not in finding.suggestion and finding.cause == "warm-up"


def test_gpu_rules_stay_silent_on_a_cpu_only_run() -> None:
    a = make_analysis(PHASES)
    fired = {f.rule for f in rules.run_rules(a)}
    assert fired == set()


# ----------------------------------------------------------------------------- bottleneck


def test_cpu_only_run_says_so_and_classifies_by_phase_share() -> None:
    d = diagnose(make_analysis({"data_load": 6.0, "forward": 4.0}))
    assert (d.bottleneck, d.gpu_active) == (DATA_LOADING, False)
    assert d.evidence[0] == CPU_ONLY_NOTE
    assert d.confidence == pytest.approx(0.6)
    assert diagnose(make_analysis({"data_load": 4.0, "forward": 3.0, "backward": 3.0})).bottleneck == CPU_COMPUTE


@pytest.mark.parametrize("idle, label", [(0.15, GPU_COMPUTE), (0.16, DATA_LOADING)])
def test_gpu_compute_bound_up_to_fifteen_percent_idle(idle: float, label: str) -> None:
    a = make_analysis(PHASES, gpu=GPU, idle_fraction=idle,
                      gaps=tuple((idle * 10.0, ("step", "data_load")) for _ in range(STEPS)))
    assert diagnose(a).bottleneck == label


def test_idle_while_loading_data_makes_a_gpu_run_data_loading_bound() -> None:
    a = make_analysis({"data_load": 6.0, "forward": 4.0}, gpu=GPU, idle_fraction=0.6,
                      gaps=tuple((6.0, ("step", "data_load")) for _ in range(STEPS)))
    d = diagnose(a)
    assert d.bottleneck == DATA_LOADING
    assert d.scores[DATA_LOADING] == pytest.approx(0.6)
    assert "GPU idle 6.00 ms/step while data_load open (data_load 6.00 ms/step)" in d.evidence


def test_unoverlapped_h2d_copies_make_a_run_copy_bound() -> None:
    facts = TraceFacts(steps=STEPS, idle_ms_per_step=3.0, idle_by_phase_ms={"h2d": 3.0},
                       h2d_copy_ms_per_step=2.0, h2d_overlap_fraction=0.0)
    d = diagnose(replace(gpu_run(h2d_ms_per_step=2.0), facts=facts))
    assert d.bottleneck == H2D_COPY
    assert d.scores[H2D_COPY] == pytest.approx(0.5)


def test_host_waiting_in_syncs_with_an_idle_gpu_is_synchronization_bound() -> None:
    facts = TraceFacts(steps=STEPS, idle_ms_per_step=4.0, sync_ms_per_step=4.0, sync_calls_per_step=3,
                       idle_by_phase_ms={"(no phase)": 4.0})
    d = diagnose(replace(gpu_run(sync_calls_per_step=3.0), facts=facts))
    assert d.bottleneck == SYNCHRONIZATION


def test_idle_while_launching_in_forward_backward_is_cpu_launch_bound() -> None:
    facts = TraceFacts(steps=STEPS, idle_ms_per_step=5.0,
                       idle_by_phase_ms={"forward": 3.0, "backward": 1.5, "data_load": 0.5})
    d = diagnose(replace(gpu_run(), facts=facts))
    assert d.bottleneck == CPU_LAUNCH
    assert d.scores[CPU_LAUNCH] == pytest.approx(0.45)


def test_diagnosis_dict_is_json_and_renders_every_finding() -> None:
    d = diagnose(gpu_run(pageable_copies=20, h2d_ms_per_step=0.5, sync_calls_per_step=2.0,
                         h2d_bytes_per_step=1e6))
    doc = json.loads(json.dumps(d.to_dict()))
    assert [f["rule"] for f in doc["findings"]] == ["pageable_copies", "blocking_copy",
                                                     "synchronizing_api_calls"]
    text = render_diagnosis_text(doc)
    assert text.startswith(f"bottleneck: {d.bottleneck} (confidence")
    assert text.count("    try: ") == 3


def test_every_rule_is_one_record_and_its_findings_carry_its_id() -> None:
    ids = [r.id for r in rules.RULES]
    assert len(set(ids)) == len(ids) == 12
    assert all(r.check.__name__ == r.id and r.phrase for r in rules.RULES)
    assert rules.RULE_BY_ID["dataloader_blocking"].reason_cause == "input pipeline"
    assert checks.pageable_copies(gpu_run(pageable_copies=20, h2d_ms_per_step=0.5)).rule == "pageable_copies"
    fired = rules.run_rules(gpu_run(pageable_copies=20, h2d_ms_per_step=0.5))
    assert "pageable_copies" in {f.rule for f in fired} and {f.rule for f in fired} <= set(ids)


def test_a_cpu_loop_that_makes_its_own_batches_is_told_so() -> None:
    """Issue 42: "a DataLoader only where one exists": autostep saw none (TraceFacts.dataloader False)."""
    from perfgate.records.facts import TraceFacts

    cpu = make_analysis({"data_load": 6.0, "forward": 2.0, "backward": 2.0})
    own = checks.dataloader_blocking(cpu, TraceFacts(steps=STEPS, dataloader=False))
    assert own is not None and own.message == ("data loading takes most of the step: the loop waits for the "
                                               "batches it makes itself (no DataLoader)")
    loader = checks.dataloader_blocking(cpu, TraceFacts(steps=STEPS, dataloader=True, dataloader_workers=0))
    assert loader is not None and loader.message.endswith("(the trace records no DataLoader worker process)")
