"""Kernel names shortened for tables and reasons stay distinct: two cuDNN kernels of a committed H100
capture that share their first 60 characters used to print as two identical rows."""
from __future__ import annotations

from pathlib import Path

from perfgate.analysis.kernel_names import ELLIPSIS, cut, shortened

WGRAD = "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize{}_warpgroupsize1x1x1_g1_execute_segment_k_on_kernel__5x_cudnn"
SEGMENT = "sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x32_warpgroupsize1x1x1_g1_execute_segment_k_{}_kernel__5x_cudnn"


def test_a_long_name_keeps_its_start_and_its_end() -> None:
    short = cut(SEGMENT.format("off"))
    assert len(short) == 60 and short.startswith("sm90_xmma_fprop_implicit_gemm_") and short.endswith("off_kernel__5x_cudnn")
    assert ELLIPSIS in short and cut("nchwToNhwcKernel") == "nchwToNhwcKernel"
    # names that differ only at the end (k_off / k_on): the kept end tells them apart
    assert cut(SEGMENT.format("off")) != cut(SEGMENT.format("on"))


def test_names_alike_once_cut_are_shown_whole() -> None:
    a, b = WGRAD.format("128x128x32"), WGRAD.format("64x64x32")   # they differ in the middle only
    assert a[:60] == b[:60] and cut(a) == cut(b)
    assert shortened([a, b, "nhwcToNchwKernel", a]) == {a: a, b: b, "nhwcToNchwKernel": "nhwcToNchwKernel"}


def test_the_top_kernel_table_of_a_real_capture_has_no_two_rows_alike(fixtures_dir: Path) -> None:
    from perfgate.analysis import AnalysisOptions
    from perfgate.analysis.table import render_table
    from perfgate.pipeline.inputs import analyze_file

    analysis = analyze_file(fixtures_dir / "traces" / "gpu-resnet-pinned" / "trace.sqlite", AnalysisOptions(skip_steps=0))
    names = [k.name for k in analysis.gpu.top_kernels]
    assert WGRAD.format("128x128x32") in names and WGRAD.format("64x64x32") in names
    lines = render_table(analysis).splitlines()
    start = lines.index("top kernels:") + 3
    rows = [line.rsplit(None, 2)[0].strip() for line in lines[start:start + len(names)]]
    assert len(set(rows)) == len(rows) == len(names)          # was: two rows "sm90_xmma_wgrad_indexed_implicit_gemm_f32f32_tf32f32_f32_nhw"
    assert WGRAD.format("64x64x32") in rows
