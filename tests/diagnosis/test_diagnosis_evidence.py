"""Kernel-name classes, and an Analysis read back from its record (``Analysis.from_dict``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.analysis import analyze_trace
from perfgate.analysis.kernel_classes import is_elementwise, is_fp32_matmul, is_half_matmul, is_triton
from perfgate.records.model import Analysis
from layout import TESTS

TOY = TESTS / "fixtures" / "traces" / "toy-h100" / "trace.sqlite"


@pytest.mark.parametrize("name, fp32, half", [
    ("ampere_sgemm_128x64_nn", True, False),
    ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32", True, False),
    ("wgrad_alg0_engine", True, False),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64", False, True),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nn", False, True),
    ("cutlass_80_tensorop_h16816gemm_128x128_32x3_nn_align8", False, True),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>", False, False),
])
def test_matmul_kernels_are_told_apart_by_precision(name: str, fp32: bool, half: bool) -> None:
    assert (is_fp32_matmul(name), is_half_matmul(name)) == (fp32, half)


def test_triton_kernels_are_not_counted_as_unfused_elementwise() -> None:
    assert is_triton("triton_poi_fused_add_relu_0") and not is_elementwise("triton_poi_fused_add_relu_0")
    assert is_elementwise("void at::native::unrolled_elementwise_kernel<...>")


@pytest.mark.skipif(not TOY.is_file(), reason="toy-h100 fixture absent")
def test_an_analysis_survives_its_json_dict() -> None:
    a = analyze_trace(TOY)
    back = Analysis.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back.metrics() == pytest.approx(a.metrics())
    assert back.gpu == a.gpu and back.gpu_idle == a.gpu_idle
    assert back.steps.durations_ms == a.steps.durations_ms


def test_a_baseline_launch_record_without_step_summary_takes_step_times_from_metrics() -> None:
    forward = {"count": 20, "cpu_total_ms": 80.0, "cpu_median_ms": 4.0, "cpu_mean_ms": 4.0,
               "cpu_per_step_ms": 4.0, "share_of_step": 4.0 / 11.0}
    record = {"metrics": {"step_time_ms": 10.0, "step_time_mean_ms": 11.0, "phase.forward.cpu_ms": 4.0},
              "steps": {"range": "step", "count": 20, "warmup_skipped": 5, "batch_size": None},
              "phases": {"forward": forward}}
    a = Analysis.from_dict(record)
    assert (a.steps.summary_ms.median, a.steps.summary_ms.mean, a.steps.count) == (10.0, 11.0, 20)
    assert a.phases["forward"].cpu_per_step_ms == 4.0 and a.phases["forward"].name == "forward"
    assert a.steps.basis == "range"      # a record from before the iteration period says nothing
