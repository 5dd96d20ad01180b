"""One wording for a comparison (perfgate.gate.wording): the comparison's own summary line (the message
of a pytest failure and of ``perfgate compare``) and every report write a row the same way, and a
fraction's change and its confidence interval are both in percentage points."""
from __future__ import annotations

import math
import re

import numpy as np

from perfgate.gate.compare import compare_launches
from perfgate.gate.wording import describe, fmt_metric_change, fmt_stats, fmt_tolerance
from perfgate.records.model import Direction, MetricComparison, Tolerance, Verdict, WorkloadResult
from perfgate.records.notes import SUMMARY, Note
from perfgate.report.markdown import render_markdown
from perfgate.report.terminal import failure_message
from perfgate.report.digest import result_message


def launches(k: int, seed: int, *, step: float, forward: float, idle: float) -> list[dict[str, float]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(k):
        f = math.exp(rng.normal(0.0, 0.01))
        out.append({"step_time_ms": step * f, "step_time_mean_ms": step * 1.02 * f,
                    "gpu_idle_fraction": idle + rng.normal(0.0, 0.003),
                    "phase.forward.cpu_ms": forward * math.exp(rng.normal(0.0, 0.01))})
    return out


def regressed_result() -> WorkloadResult:
    outcome = compare_launches(launches(5, 1, step=100.0, forward=30.0, idle=0.20),
                               launches(5, 2, step=112.0, forward=42.0, idle=0.40))
    assert outcome.verdict is Verdict.REGRESSED
    return WorkloadResult(workload="w", verdict=outcome.verdict, comparisons=outcome.comparisons,
                          notes=(Note(SUMMARY, outcome.summary),))


def test_the_summary_line_and_the_reports_write_each_row_the_same_way() -> None:
    result = regressed_result()
    rows = {c.metric: c for c in result.comparisons if c.verdict is Verdict.REGRESSED and c.gating}
    assert {"phase.forward.cpu_ms", "gpu_idle_fraction"} <= set(rows)
    text, markdown = failure_message(result), render_markdown([result])
    for c in rows.values():
        assert describe(c) in result_message(result)                      # compare's summary line
        change, tolerance = fmt_metric_change(c), fmt_tolerance(c.tolerance, c.unit)
        table_row = next(line for line in text.splitlines() if line.strip().startswith(c.metric + " "))
        assert re.split(r"\s{2,}", table_row.strip())[3:5] == [change, tolerance]   # the terminal table
        assert change in markdown and tolerance in markdown
    forward = rows["phase.forward.cpu_ms"]
    assert "tolerance 10 % and 0.500 ms" in describe(forward) and "10% + 0.5" not in result_message(result)


def test_a_fraction_changes_in_points_and_its_interval_too() -> None:
    idle = next(c for c in regressed_result().comparisons if c.metric == "gpu_idle_fraction")
    change = fmt_metric_change(idle)
    low, high = (float(x) for x in re.fullmatch(r"p=\S+, CI \[([-+][\d.]+) pp, ([-+][\d.]+) pp\]",
                                                   fmt_stats(idle)).groups())
    assert re.fullmatch(r"\+(\d+\.\d) pp", change)
    assert 15.0 < low < float(change[1:-3]) < high < 25.0        # about +20 points, the interval around it
    assert describe(idle).startswith(f"gpu_idle_fraction {change} (20.")


def test_a_change_from_zero_is_written_in_the_metrics_unit() -> None:
    c = MetricComparison(metric="sync_calls_per_step", unit="calls", direction=Direction.LOWER_IS_BETTER,
                         baseline=0.0, current=2.0, change=None, delta=2.0, tolerance=Tolerance(abs=0.5),
                         verdict=Verdict.REGRESSED)
    assert describe(c) == "sync_calls_per_step +2.00 calls (0 calls -> 2.00 calls, tolerance 0.500 calls)"
