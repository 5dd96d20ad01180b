"""Phases inside measured steps: CPU time, share of step, and GPU time attributed the PyTorch way
(backward's kernels come from the autograd thread) next to nsys's thread projection."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
H100 = TRACES / "toy-h100" / "trace.sqlite"


@pytest.fixture(scope="module")
def h100():
    return analyze_trace(H100, AnalysisOptions(skip_steps=5))


def test_phases_are_the_step_children_in_order_with_exact_cpu_totals() -> None:
    path = TRACES / "cpu-train-loop" / "trace.sqlite"
    a = analyze_trace(path, AnalysisOptions(skip_steps=4))
    assert list(a.phases) == ["data_load", "h2d", "forward", "backward", "optimizer", "between_steps"]
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT text, \"end\" - start FROM NVTX_EVENTS WHERE eventType = 59 "
                            "AND text != 'step' ORDER BY start").fetchall()
        steps = conn.execute("SELECT start, \"end\" FROM NVTX_EVENTS WHERE eventType = 59 "
                             "AND text = 'step' ORDER BY start").fetchall()
    data_load = [d for t, d in rows if t == "data_load"][4:11]   # steps 4..10: the last has no period
    p = a.phases["data_load"]
    assert p.count == 7 and p.cpu_total_ms == pytest.approx(sum(data_load) / 1e6, rel=1e-12)
    assert p.cpu_per_step_ms == pytest.approx(p.cpu_total_ms / 7)
    total_step_ms = sum(a.steps.durations_ms)
    assert p.share_of_step == pytest.approx(p.cpu_total_ms / total_step_ms)
    # between_steps: from each measured step range's end to the next one's start, nothing else there
    gaps = [steps[k + 1][0] - steps[k][1] for k in range(4, 11)]
    assert a.phases["between_steps"].cpu_total_ms == pytest.approx(sum(gaps) / 1e6, rel=1e-12)
    assert 0.9 < sum(x.share_of_step for x in a.phases.values()) <= 1.0
    assert all(x.gpu_ms is None for x in a.phases.values())


def test_numbered_phase_names_fold_and_start_end_ranges_count() -> None:
    a = analyze_trace(TRACES / "cpu-two-procs" / "trace.sqlite", AnalysisOptions(skip_steps=3))
    assert list(a.phases) == ["forward", "backward", "checkpoint", "between_steps"]
    assert (a.phases["forward"].count, a.phases["checkpoint"].count) == (10, 4)  # batches 3..7, 2 procs


def test_backward_gets_most_gpu_time_although_nsys_thread_projection_sees_almost_none(h100) -> None:
    bwd, fwd = h100.phases["backward"], h100.phases["forward"]
    total_gpu = sum(p.gpu_ms for p in h100.phases.values())
    assert bwd.gpu_ms > fwd.gpu_ms and bwd.gpu_ms / total_gpu > 0.4
    assert bwd.gpu_thread_proj_ms < 0.01 * bwd.gpu_ms          # autograd launches from another thread
    assert fwd.gpu_thread_proj_ms == pytest.approx(fwd.gpu_ms, rel=0.05)
    assert bwd.gpu_per_step_ms == pytest.approx(bwd.gpu_ms / 34)   # 40 steps, 5 warm-up, the last has no period


def test_attributed_gpu_time_is_at_most_the_busy_time_of_ops_launched_in_the_window(h100) -> None:
    lo, hi = h100.steps.window_start_ns, h100.steps.window_end_ns
    with sqlite3.connect(f"file:{H100}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "WITH ops AS (SELECT start, \"end\", correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
            "SELECT start, \"end\", correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
            "SELECT start, \"end\", correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET) "
            "SELECT o.start, o.\"end\" FROM ops o JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = o.correlationId WHERE r.start BETWEEN ? AND ? ORDER BY 1", (lo, hi)).fetchall()
    busy, cur_s, cur_e = 0, rows[0][0], rows[0][1]
    for s, e in rows[1:]:
        if s > cur_e:
            busy, cur_s, cur_e = busy + cur_e - cur_s, s, e
        else:
            cur_e = max(cur_e, e)
    busy_ms = (busy + cur_e - cur_s) / 1e6
    attributed = sum(p.gpu_ms for p in h100.phases.values())
    assert 0.95 * busy_ms < attributed <= busy_ms + 1e-9
