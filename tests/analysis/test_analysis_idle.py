"""GPU-idle fraction over the measured window, checked against a plain-Python interval merge of the
raw GPU activity rows, and the longest gaps with the CPU ranges open during them."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
H100 = TRACES / "toy-h100" / "trace.sqlite"


def _busy_ns(path: Path, lo: int, hi: int) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
            "SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
            "SELECT start, \"end\" FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY 1").fetchall()
    busy, cur_s, cur_e = 0, None, None
    for s, e in rows:
        s, e = max(s, lo), min(e, hi)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            busy += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return busy + (0 if cur_e is None else cur_e - cur_s)


def test_idle_fraction_equals_one_minus_busy_union_over_the_measured_window() -> None:
    a = analyze_trace(H100, AnalysisOptions(skip_steps=5, longest_gaps=3))
    lo, hi = a.steps.window_start_ns, a.steps.window_end_ns
    expected = 1 - _busy_ns(H100, lo, hi) / (hi - lo)
    assert a.gpu_idle.fraction == pytest.approx(expected, abs=1e-12)
    assert a.gpu_idle.per_device == {"0": pytest.approx(expected, abs=1e-12)}
    assert a.gpu_idle.window_ms == pytest.approx((hi - lo) / 1e6)
    assert a.metrics()["gpu_idle_fraction"] == a.gpu_idle.fraction


def test_longest_gaps_are_sorted_and_name_the_cpu_ranges_open_outermost_first() -> None:
    a = analyze_trace(H100, AnalysisOptions(skip_steps=5, longest_gaps=3))
    gaps = a.gpu_idle.longest_gaps
    assert len(gaps) == 3
    assert [g.duration_ms for g in gaps] == sorted((g.duration_ms for g in gaps), reverse=True)
    assert gaps[0].cpu_ranges == ("step", "data_load")  # the GPU starves while data loads
    assert all(g.device == "0" for g in gaps)


def test_a_trace_without_gpu_activity_has_no_idle_figure() -> None:
    a = analyze_trace(TRACES / "cpu-train-loop" / "trace.sqlite")
    assert a.gpu_idle is None and a.gpu is None and "gpu_idle_fraction" not in a.metrics()
