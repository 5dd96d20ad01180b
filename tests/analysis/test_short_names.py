"""Kernel names shortened for tables and reasons stay distinct: two cuDNN kernels of a committed H100
capture that share their first 60 characters used to print as two identical rows."""
from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize("base", [0, 1 << 40], ids=["ids", "ids-spanning-over-39-bits"])
def test_kernels_of_an_ambiguous_short_name_find_their_row_by_process_call_and_start(base: int) -> None:
    """Each kernel takes the code of its row (same process, correlation id and start); where rows
    repeat a key, the last; where no row has it, -1; a process's correlation id that two kernels
    share (a CUDA graph's) is told apart by start."""
    import numpy as np

    from perfgate.analysis.kernel_families import _matched

    pid = 7
    g = (pid << 24) | 99             # globalPid: the process above nsys's low bits
    rows = {"g": np.array([g, g, g, g, g, (8 << 24)]), "c": np.array([5, 6, 6, 9, 9, 5]) + base,
            "t": np.array([100, 200, 300, 400, 400, 100])}
    row_codes = np.array([0, 1, 2, 3, 4, 5])
    # kernels: (pid, correlation, start)
    kernel_pid = np.array([7, 7, 7, 7, 7, 8, 7])
    correlation = np.array([5, 6, 6, 9, 5, 5, 11]) + base
    start = np.array([100, 300, 200, 400, 101, 100, 100])
    kept = np.arange(7)
    assert _matched(kept, kernel_pid, correlation, start, rows, row_codes).tolist() == [0, 2, 1, 4, -1, 5, -1]
    assert _matched(kept[[3, 0]], kernel_pid, correlation, start, rows, row_codes).tolist() == [4, 0]
