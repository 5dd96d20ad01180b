"""Per-step GPU work on the H100 capture, against numbers the workload and raw SQL imply."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.trace.api_calls import api_name
from layout import TESTS

H100 = TESTS / "fixtures" / "traces" / "toy-h100" / "trace.sqlite"


@pytest.fixture(scope="module")
def analysis():
    return analyze_trace(H100, AnalysisOptions(skip_steps=5, top_kernels=3))


def test_api_names_lose_their_version_suffix() -> None:
    assert api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name("cudaLaunchKernelExC_v11060") == "cudaLaunchKernelExC"
    assert api_name("cuCtxSynchronize") == "cuCtxSynchronize"


def test_h2d_bytes_per_step_are_the_input_batch_and_labels(analysis) -> None:
    # toy_gpu_workload.py copies x (64x3x128x128 float32) and y (64 int64) each step
    assert analysis.gpu.h2d_bytes_per_step == 64 * 3 * 128 * 128 * 4 + 64 * 8
    assert analysis.gpu.pageable_copies == 2 * 34   # PIN=0: both copies from pageable memory


def test_kernels_per_step_and_top_kernels_match_the_raw_kernel_rows(analysis) -> None:
    with sqlite3.connect(f"file:{H100}?mode=ro", uri=True) as conn:
        total = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        top = conn.execute(
            "SELECT s.value, count(*), sum(k.\"end\" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "JOIN StringIds s ON s.id = k.shortName WHERE r.start BETWEEN ? AND ? "
            "GROUP BY 1 ORDER BY 3 DESC LIMIT 3",
            (analysis.steps.window_start_ns, analysis.steps.window_end_ns)).fetchall()
    assert analysis.gpu.kernels_per_step == total / 40  # every step launches the same kernels
    assert [(k.name, k.count) for k in analysis.gpu.top_kernels] == [(n, c) for n, c, _ in top]
    assert analysis.gpu.top_kernels[0].total_ms == pytest.approx(top[0][2] / 1e6)


def test_sync_calls_per_step_count_stream_and_device_synchronizes(analysis) -> None:
    with sqlite3.connect(f"file:{H100}?mode=ro", uri=True) as conn:
        n = conn.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
            "WHERE (s.value LIKE 'cudaStreamSynchronize%' OR s.value LIKE 'cudaDeviceSynchronize%') "
            "AND r.start BETWEEN ? AND ?",
            (analysis.steps.window_start_ns, analysis.steps.window_end_ns)).fetchone()[0]
    assert n > 0 and analysis.gpu.sync_calls_per_step == n / 34
    assert analysis.gpu.peak_memory_bytes is None  # captured without --cuda-memory-usage
    assert 0 < analysis.gpu.cuda_api_ms_per_step < analysis.steps.summary_ms.mean
