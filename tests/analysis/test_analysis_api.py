"""The public analysis API: options, the JSON contract of Analysis.to_dict, and the table view."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.analysis.table import render_table
from perfgate.errors import ConfigError
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
H100 = TRACES / "toy-h100" / "trace.sqlite"


@pytest.fixture(scope="module")
def analysis():
    return analyze_trace(H100, AnalysisOptions(batch_size=64))


def test_default_options_skip_five_steps() -> None:
    opts = AnalysisOptions()
    assert (opts.step_pattern, opts.skip_steps, opts.batch_size, opts.top_kernels, opts.longest_gaps) == (None, 5, None, 10, 5)


@pytest.mark.parametrize("kwargs, message", [
    ({"skip_steps": -1}, "skip_steps must be >= 0"),
    ({"batch_size": 0}, "batch_size must be a positive integer"),
])
def test_invalid_options_are_config_errors_naming_the_option(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        AnalysisOptions(**kwargs)


def test_to_dict_carries_the_documented_contract_and_is_json(analysis) -> None:
    d = json.loads(json.dumps(analysis.to_dict()))
    assert d["nsys_version"] == "2025.3.2.0"
    assert {k: d["steps"][k] for k in ("count", "warmup_skipped")} == {"count": 34, "warmup_skipped": 5}
    assert set(d["steps"]) >= {"median_ms", "mean_ms", "p90_ms", "stdev_ms", "range_median_ms"}
    assert (d["steps"]["basis"], d["steps"]["source"]) == ("period", "nvtx")
    assert 0 < d["gpu_idle_fraction"] < 1
    assert set(d["phases"]) == {"data_load", "h2d", "forward", "backward", "optimizer", "between_steps"}
    assert set(d["phases"]["backward"]) >= {"count", "cpu_total_ms", "cpu_median_ms", "gpu_ms"}
    assert d["ranges"]["step"] == {"count": 40, "total_ns": 798770059}  # nsys nvtx_sum's total
    m = d["metrics"]
    assert m["samples_per_s"] == pytest.approx(64 * 34 / (sum(analysis.steps.durations_ms) / 1e3))
    assert m["phase.backward.gpu_ms"] == analysis.phases["backward"].gpu_per_step_ms


def test_the_table_shows_steps_phases_idle_and_kernels(analysis) -> None:
    text = render_table(analysis)
    assert f"median {analysis.steps.summary_ms.median:.3f}" in text
    assert f"GPU idle: {analysis.gpu_idle.fraction:.1%}" in text
    bwd = analysis.phases["backward"]
    line = next(l for l in text.splitlines() if l.startswith("backward"))
    assert f"{bwd.cpu_per_step_ms:.3f}" in line and f"{bwd.gpu_per_step_ms:.3f}" in line
    assert analysis.gpu.top_kernels[0].name[:40] in text


def test_the_table_of_a_cpu_trace_has_no_gpu_sections() -> None:
    text = render_table(analyze_trace(TRACES / "cpu-train-loop" / "trace.sqlite"))
    assert "phases (per measured step):" in text and "GPU idle" not in text and "top kernels" not in text
