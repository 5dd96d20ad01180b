"""The kernel families (perfgate.diagnosis.mechanisms) checked on real captures: nsys 2025.3.1 on an
H100 (tests/fixtures/corpus, tests/fixtures/traces) and nsys 2026.2.1 on two H100s
(../shared/fixtures, where this checkout has it); each kernel's family read from its demangled name
through TraceFacts.kernels_by_family, and the replacements they make."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze
from perfgate.analysis.kernel_families import GRAPH_NAME, family_of
from perfgate.diagnosis.mechanisms import replacements
from perfgate.trace.export import load_trace
from layout import FIXTURES

SHARED = FIXTURES.parent.parent.parent / "shared" / "fixtures" / "emit-nvtx-2xh100-nsys2026.2.1.sqlite"

# (capture, place, family, a kernel name of that family there)
EXPECTED = [
    ("corpus/base2", "Forward Pass", "attention.cudnn",
     "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0"),
    ("corpus/base2", "Backward Pass", "attention.cudnn", "compute_dot_do_o_specialized"),
    ("corpus/base2", "Forward Pass", "matmul.half", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"),
    ("corpus/base2", "Forward Pass", "norm.layer", "vectorized_layer_norm_kernel"),
    ("corpus/base2", "Optimizer Step", "optimizer.fused", "multi_tensor_apply_kernel"),
    ("corpus/base2", "Loss Computation", "loss", "nll_loss_forward_reduce_cuda_kernel_2d"),
    ("corpus/attention_math", "Forward Pass", "softmax", "softmax_warp_forward"),
    ("corpus/tf32_off-base", "Forward Pass", "matmul.tf32",
     "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"),
    ("corpus/tf32_off", "Backward Pass", "matmul.fp32", "cutlass_80_simt_sgemm_256x128_8x4_nn_align1"),
    ("corpus/amp_off", "Forward Pass", "attention.mem_efficient", "fmha_cutlassF_f32_aligned_64x64_rf_sm80"),
    ("corpus/compile_removed-base", "Forward Pass", "triton", "triton_poi_fused_add_mul_tanh_0"),
    ("corpus/cuda_graphs_lost-base", "Forward Pass", "graph", GRAPH_NAME),
    ("corpus/fused_adam_off", "Optimizer Step", "optimizer.foreach", "multi_tensor_apply_kernel"),
    ("corpus/optimizer_loop", "Optimizer Step", "optimizer.per_parameter", "vectorized_elementwise_kernel"),
    ("corpus/dropout", "Forward Pass", "dropout", "fused_dropout_kernel_vec"),
    ("corpus/cudnn_benchmark_off", "Forward Pass", "conv.half",
     "cutlass_tensorop_bf16_s16816fprop_optimized_bf16_256x128_64x3_nhwc_align8"),
    ("corpus/cudnn_benchmark_off", "Backward Pass", "conv.layout", "nchwToNhwcKernel"),
    ("traces/reverse-ladder-no-amp", "forward", "conv.tf32",
     "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"),
    ("traces/gpu-resnet-pinned", "forward", "norm.batch", "bn_fw_tr_1C11_kernel_NCHW"),
]


def _families(capture: str) -> dict:
    path = FIXTURES / capture / "trace.sqlite"
    if not path.is_file():
        pytest.skip(f"{capture} not unpacked")
    trace = load_trace(path)
    return analyze(trace, AnalysisOptions(skip_steps=5)).facts.kernels_by_family


@pytest.mark.parametrize("capture, place, family, name", EXPECTED, ids=[f"{c}-{f}" for c, _, f, _ in EXPECTED])
def test_a_kernel_is_read_into_its_family_on_a_real_capture(capture: str, place: str, family: str, name: str) -> None:
    families = _families(capture)
    assert name in families[place][family], sorted(families[place].get(family, {}))


def test_one_short_name_of_two_families_is_told_apart_by_its_demangled_name() -> None:
    # softmax_warp_forward: the loss's log-softmax on one side of the corpus, attention's softmax on the other
    families = _families("corpus/attention_math")
    assert "softmax_warp_forward" in families["Forward Pass"]["softmax"]
    assert "softmax_warp_forward" not in families["Loss Computation"].get("softmax", {})


def test_nsys_2026_names_the_same_kernels_the_same_way() -> None:
    if not SHARED.is_file():
        pytest.skip("../shared/fixtures is not beside this checkout")
    con = sqlite3.connect(SHARED)
    rows = con.execute("SELECT s.value, d.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                       "JOIN StringIds d ON d.id = k.demangledName GROUP BY k.demangledName").fetchall()
    families = {short: family_of(demangled) for short, demangled in rows}
    assert families["sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_"
                    "alignc4_execute_kernel__5x_cublas"] == "matmul.fp32"
    assert families["vectorized_elementwise_kernel"] == "elementwise"
    assert families["softmax_warp_forward"] in ("softmax", "loss")


def test_a_replacement_is_told_in_its_direction() -> None:
    half = {"matmul.half": {"nvjet_a": [10.0, 1.0]}}
    fp32 = {"matmul.fp32": {"sgemm_b": [10.0, 8.0]}}
    slower, = replacements(half, fp32)
    faster, = replacements(fp32, half)
    assert slower.text.startswith("GEMMs went from bf16/fp16 to fp32") and slower.gone[0][0] == "nvjet_a"
    assert faster.text.startswith("GEMMs went from fp32 to bf16/fp16") and faster.new[0][0] == "nvjet_a"
    assert slower.evidence() == "gone: nvjet_a -10/step; new: sgemm_b +10/step"
    assert replacements(half, half) == []


def test_a_pattern_of_two_words_looks_ahead_from_the_names_start_only() -> None:
    """Unanchored, ``(?=.*conv)(?=.*bf16)`` ran both look-aheads from every position of a name
    (re.search), O(n^2) in its length: a ResNet capture's 61 cuDNN kernels (names up to 5,805
    characters) took 9 s of a 10 s ``perfgate analyze``. Anchored, each pattern reads a name once
    (benchmarks/bench_command.py); the families of the committed captures' names are unchanged
    (test_a_kernel_is_read_into_its_family_on_a_real_capture)."""
    from perfgate.analysis.kernel_families import FAMILIES

    two_words = [f for f in FAMILIES if "(?=" in f.pattern.pattern]
    assert {f.id for f in two_words} == {"conv.half", "conv.tf32", "matmul.half", "matmul.tf32"}
    assert all(f.pattern.pattern.startswith(r"\A(?=.*?") for f in two_words), [f.pattern.pattern for f in two_words]
    long_name = "void cudnn::engines::kernel<" + "float, " * 2000 + "bf16>"   # both words, far apart
    assert family_of(long_name) == "conv.half" and family_of(long_name.replace("bf16", "f32")) == "conv.fp32"


def test_attention_moved_between_fused_paths_and_back_to_a_fused_one() -> None:
    """`attention: A -> B: F.scaled_dot_product_attention moved from the A path …` where one fused
    family fell and another rose; `attention now takes the fused B path` where a fused family rose and
    softmax fell; nothing where the same family ran on both sides (docs/diagnosis.md, every claim)."""
    flash = {"attention.flash": {"pytorch_flash::flash_fwd_kernel": [12.0, 0.5]}}
    efficient = {"attention.mem_efficient": {"fmha_cutlassF_f32_aligned_64x64_rf_sm80": [12.0, 0.9]}}
    math = {"softmax": {"softmax_warp_forward": [12.0, 0.3]}, "matmul.half": {"nvjet_hsh_64x8": [24.0, 1.2]}}
    moved, = [r for r in replacements(flash, efficient) if r.kind == "attention"]
    assert moved.text.startswith("attention: flash attention (SDPA)") and "-> memory-efficient attention (SDPA)" in moved.text
    assert "F.scaled_dot_product_attention moved from the flash attention (SDPA) path (a mask, dtype or head dim " \
           "that path does not take?)" in moved.text and moved.cause == "attention path"
    fused, = [r for r in replacements(math, {**flash, "matmul.half": math["matmul.half"]}) if r.kind == "attention"]
    assert fused.text.endswith("attention now takes the fused flash attention (SDPA) path"), fused.text
    assert not [r for r in replacements(flash, flash) if r.kind == "attention"]
