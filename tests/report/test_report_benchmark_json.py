"""pytest-benchmark JSON: exact statistics in seconds, and the fields github-action-benchmark reads."""
from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
from report_results import make_analysis, make_result

from perfgate.records.model import Verdict
from perfgate.report.benchmark_json import render_benchmark_json


def test_stats_are_the_step_times_in_seconds() -> None:
    r = replace(make_result("w", Verdict.PASS), analyses=[make_analysis([10.0, 12.0, 14.0], {}), make_analysis([20.0], {})])
    (bench,) = render_benchmark_json([r], {}, {})["benchmarks"]
    s = bench["stats"]
    assert s["data"] == [0.010, 0.012, 0.014, 0.020]
    assert s["rounds"] == 4 and s["iterations"] == 1
    assert s["mean"] == pytest.approx(0.014) and s["median"] == pytest.approx(0.013)
    assert s["stddev"] == pytest.approx(statistics.stdev([0.010, 0.012, 0.014, 0.020]))
    assert s["ops"] == pytest.approx(1 / 0.014)
    assert s["min"] == pytest.approx(0.010) and s["max"] == pytest.approx(0.020)
    assert s["total"] == pytest.approx(0.056)


def test_github_action_benchmark_fields_are_present_and_typed() -> None:
    doc = render_benchmark_json([make_result("w", Verdict.REGRESSED, forward_ms=8.0)], None, {"id": "sha"})
    bench = doc["benchmarks"][0]
    assert bench["fullname"] == "perfgate::w" and bench["name"] == "w"
    for key in ("ops", "stddev", "mean"):
        assert isinstance(bench["stats"][key], float)
    assert isinstance(bench["stats"]["rounds"], int)
    assert bench["extra_info"]["verdict"] == "REGRESSED"
    assert bench["extra_info"]["metrics"]["phase.forward.cpu_ms"] == 8.0
    assert {"machine_info", "commit_info", "datetime", "version", "benchmarks"} <= set(doc)


def test_workloads_without_measured_steps_are_left_out() -> None:
    empty = replace(make_result("empty", Verdict.ERROR, error="capture failed"), analyses=[])
    assert render_benchmark_json([empty], {}, {})["benchmarks"] == []
