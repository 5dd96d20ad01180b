"""Step detection, numbering folding, warm-up and step summaries on real captures."""
from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.analysis.periods import summarize
from perfgate.analysis.steps import DEFAULT_STEP_REGEX, fold_name
from perfgate.errors import ConfigError, TraceError
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"


def _durations(path: Path, name_like: str) -> pd.DataFrame:
    """Step ranges read straight from the export with SQL (independent of perfgate.trace.export)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return pd.read_sql_query(
            "SELECT globalTid >> 24 & 16777215 AS pid, start, \"end\" - start AS dur FROM NVTX_EVENTS "
            "WHERE eventType = 59 AND text LIKE ? ORDER BY pid, start", conn, params=(name_like,))


@pytest.mark.parametrize("raw, folded", [
    ("forward 12", "forward"), ("Step 3 Start", "Step Start"), ("ProfilerStep#4", "ProfilerStep"),
    ("batch_7", "batch"), ("layer1", "layer1"), ("conv2d", "conv2d"),
    ("aten::add, op_id = 314359", "aten::add, op_id"), ("step", "step"), ("__next__ 5", "__next__"),
    ("copy data 12", "copy data"), ("step-3", "step"), ("layer_1", "layer"),
])
def test_fold_name_drops_only_set_off_iteration_numbers(raw: str, folded: str) -> None:
    assert fold_name(raw) == folded


@pytest.mark.parametrize("name", ["step", "train_step", "Step 3", "Step 3 Start", "ProfilerStep#12",
                                  "iteration", "iteration 5", "batch 0", "training step", "TRAIN_STEP"])
def test_default_step_patterns_match_common_iteration_names(name: str) -> None:
    assert re.fullmatch(DEFAULT_STEP_REGEX, name)


@pytest.mark.parametrize("name", ["forward", "aten::batch_norm", "optimizer.step#SGD.step", "stepper", "data_load"])
def test_default_step_patterns_reject_other_ranges(name: str) -> None:
    assert not re.fullmatch(DEFAULT_STEP_REGEX, name)


def test_summary_uses_sample_stdev_and_linear_percentiles() -> None:
    s = summarize([1.0, 2.0, 3.0, 4.0, 10.0])
    assert (s.count, s.mean, s.median, s.min, s.max) == (5, 4.0, 3.0, 1.0, 10.0)
    assert s.stdev == pytest.approx(np.std([1, 2, 3, 4, 10], ddof=1))
    assert (s.p10, s.p90) == (pytest.approx(1.4), pytest.approx(7.6))
    assert summarize([7.0]).stdev == 0.0


def test_measured_steps_are_the_iteration_periods_after_warmup_and_the_last_range_is_left_out() -> None:
    path = TRACES / "cpu-train-loop" / "trace.sqlite"
    a = analyze_trace(path, AnalysisOptions(skip_steps=5, batch_size=32))
    raw = _durations(path, "step")
    assert len(raw) == 12
    starts = raw["start"].to_numpy()
    expected_ms = (np.diff(starts)[5:] / 1e6).tolist()          # start to next start, steps 5..10
    range_ms = (raw["dur"].to_numpy()[5:11] / 1e6).tolist()
    assert (a.steps.range_name, a.steps.count, a.steps.warmup_skipped, a.steps.source) == ("step", 6, 5, "nvtx")
    assert list(a.steps.durations_ms) == pytest.approx(expected_ms, abs=0, rel=1e-12)
    assert list(a.steps.range_durations_ms) == pytest.approx(range_ms, abs=0, rel=1e-12)
    assert all(p > r for p, r in zip(a.steps.durations_ms, a.steps.range_durations_ms))
    assert a.steps.summary_ms.median == pytest.approx(float(np.median(expected_ms)))
    assert a.metrics()["step_range_ms"] == pytest.approx(float(np.median(range_ms)))
    assert a.steps.samples_per_s == pytest.approx(32 * 6 / (sum(expected_ms) / 1e3))
    assert (a.steps.window_start_ns, a.steps.window_end_ns) == (int(starts[5]), int(starts[11]))


def test_too_few_steps_for_the_warmup_skip_fewer_and_warn() -> None:
    a = analyze_trace(TRACES / "cpu-train-loop" / "trace.sqlite", AnalysisOptions(skip_steps=20))
    assert (a.steps.count, a.steps.warmup_skipped) == (1, 10)
    assert any("skipping 10 warm-up steps instead of 20" in w for w in a.warnings)


def test_numbered_steps_fold_and_warmup_applies_per_process_with_throughput_summed() -> None:
    path = TRACES / "cpu-two-procs" / "trace.sqlite"
    a = analyze_trace(path, AnalysisOptions(skip_steps=3, batch_size=8))
    raw = _durations(path, "batch %")
    assert raw["pid"].nunique() == 2
    measured = raw.groupby("pid").apply(lambda g: g.iloc[3:], include_groups=False)
    assert (a.steps.range_name, a.steps.count, a.processes) == ("batch", 10, 2)
    periods = raw.groupby("pid")["start"].apply(lambda s: np.diff(s.to_numpy())[3:])
    per_proc = periods.apply(lambda p: 8 * len(p) / (p.sum() / 1e9))
    assert a.steps.samples_per_s == pytest.approx(per_proc.sum())
    assert sorted(a.steps.durations_ms) == pytest.approx(sorted(np.concatenate(periods.to_list()) / 1e6))
    assert sorted(a.steps.range_durations_ms) == pytest.approx(sorted(measured["dur"].to_numpy() / 1e6)[:0]
                                                               or sorted(measured.groupby(level=0).apply(
                                                                   lambda g: g.iloc[:-1])["dur"] / 1e6))


def test_a_user_step_pattern_must_be_a_valid_regex() -> None:
    with pytest.raises(ConfigError, match="step_pattern"):
        analyze_trace(TRACES / "cpu-train-loop" / "trace.sqlite", AnalysisOptions(step_pattern="step("))


def test_no_matching_step_range_names_the_file_and_the_most_frequent_ranges() -> None:
    path = TRACES / "cpu-train-loop" / "trace.sqlite"
    with pytest.raises(TraceError) as err:
        analyze_trace(path, AnalysisOptions(step_pattern="epoch"))
    assert str(path) in str(err.value) and "'data_load' (12; step_pattern = \"data_load\")" in str(err.value)


def test_every_range_the_error_names_comes_with_a_step_pattern_that_selects_it() -> None:
    """The error names each frequent range with a step_pattern; every one of them, given back,
    finds steps (numbered ranges fold: 'batch 3' is named with 'batch \\d+')."""
    import json
    import re

    path = TRACES / "cpu-train-loop" / "trace.sqlite"
    with pytest.raises(TraceError) as err:
        analyze_trace(path, AnalysisOptions(step_pattern="epoch"))
    suggested = [json.loads(s) for s in re.findall(r'step_pattern = ("[^"]+")\)', str(err.value))]
    assert len(suggested) >= 3
    for pattern in suggested:
        found = analyze_trace(path, AnalysisOptions(step_pattern=pattern, skip_steps=0))
        assert found.steps.count >= 1, pattern


def emit_nvtx_like(tmp_path: Path) -> Path:
    """The committed two-process, two-GPU DDP capture with every range named the way
    ``torch.autograd.profiler.emit_nvtx()`` names them (``aten::<op>, op_id = <n>``): each step
    range becomes an ``aten::linear`` one, every other range ``aten::as_strided``; no step ranges."""
    path = tmp_path / "trace.sqlite"
    shutil.copyfile(TRACES / "gpu-ddp-2proc" / "trace.sqlite", path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = CASE WHEN coalesce(text, '') = 'step' "
                     "THEN 'aten::linear, op_id = ' || rowid ELSE 'aten::as_strided, op_id = ' || rowid END, "
                     "textId = NULL WHERE eventType = 59")
    return path


def test_emit_nvtx_trace_without_step_ranges_gives_a_clear_error_or_an_analysis_with_a_pattern(tmp_path: Path) -> None:
    trace = emit_nvtx_like(tmp_path)
    with pytest.raises(TraceError, match=r"no NVTX range matches the default step patterns.*'aten::as_strided, op_id' \(328; "
                       r'step_pattern = "aten::as_strided, op_id = \\\\d\+"\)'):
        analyze_trace(trace)
    a = analyze_trace(trace, AnalysisOptions(step_pattern=r"aten::linear, op_id = \d+", skip_steps=2))
    assert a.processes == 2 and a.devices == ("0", "1")
    assert set(a.gpu_idle.per_device) == {"0", "1"}
    assert a.steps.count == 2 * (10 - 2 - 1)   # per process: 10 steps, 2 skipped, the last has no next start


@pytest.mark.parametrize("raw, phase", [
    ("perfgate/data_load", "data_load"), ("perfgate/optimizer", "optimizer"),
    ("torch.utils.data.dataloader._BaseDataLoaderIter.__next__", "data_load"),
    ("torch.autograd.backward", "backward"), ("torch.optim.AdamW.step", "optimizer"),
    ("torch.nn.modules.Module.__call__", "forward"), ("torch.Tensor.to", "h2d"),
    ("forward 3", "forward"), ("torch.compile", "torch.compile"),
])
def test_phase_names_of_hook_and_nsys_pytorch_ranges(raw: str, phase: str) -> None:
    from perfgate.analysis.steps import phase_name

    assert phase_name(raw) == phase
