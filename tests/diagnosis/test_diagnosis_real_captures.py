"""Diagnosis on real nsys 2022.4 captures of a tiny torch.cuda.nvtx CPU training loop whose
data_load takes 30 ms (slow) or 1 ms (fast): CPU-only classification and regression attribution."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from nsys_run import run_supervised
from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.diagnosis.attribution import explain_regression
from perfgate.diagnosis.one_run import diagnose
from perfgate.records.diagnosis import CPU_COMPUTE, CPU_ONLY_NOTE, DATA_LOADING
from perfgate.diagnosis.render import render_attribution_text
from perfgate.records.model import Analysis
from perfgate.trace.export import load_trace

SCRIPT = '''
import sys, time, torch
import torch.cuda.nvtx as nvtx
torch.set_num_threads(1)
torch.manual_seed(0)
load_s = float(sys.argv[1]) / 1000
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 64), torch.randint(0, 8, (32,))
for i in range(12):
    nvtx.range_push("step")
    nvtx.range_push("data_load"); time.sleep(load_s); xb = x.clone(); nvtx.range_pop()
    nvtx.range_push("forward"); loss = torch.nn.functional.cross_entropy(model(xb), y)
    time.sleep(0.008); nvtx.range_pop()
    nvtx.range_push("backward"); opt.zero_grad(); loss.backward(); nvtx.range_pop()
    nvtx.range_push("optimizer"); opt.step(); nvtx.range_pop()
    nvtx.range_pop()
'''
OPTIONS = AnalysisOptions(skip_steps=2)


def _capture(nsys: str, folder: Path, name: str, load_ms: int) -> Path:
    script = folder / "loop.py"
    script.write_text(SCRIPT)
    cmd = [nsys, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
           "--export=sqlite", "-o", str(folder / name), "-f", "true", sys.executable, str(script),
           str(load_ms)]
    run_supervised(cmd, check=True, timeout=300)
    return folder / f"{name}.sqlite"


@pytest.fixture(scope="module")
def captures(nsys_path: str, torch_module, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("diagnosis-captures")
    return {"slow": _capture(nsys_path, folder, "slow", 30), "fast": _capture(nsys_path, folder, "fast", 1)}


def test_slow_data_load_capture_is_data_loading_bound_cpu_only_run(captures: dict[str, Path]) -> None:
    path = captures["slow"]
    diagnosis = diagnose(analyze_trace(path, OPTIONS))
    assert diagnosis.bottleneck == DATA_LOADING
    assert CPU_ONLY_NOTE in diagnosis.evidence
    assert diagnosis.gpu_active is False
    assert "dataloader_blocking" in diagnosis.rules_fired
    assert diagnosis.confidence > 0.5


def test_fast_data_load_capture_is_cpu_compute_bound(captures: dict[str, Path]) -> None:
    diagnosis = diagnose(analyze_trace(captures["fast"], OPTIONS))
    assert diagnosis.bottleneck == CPU_COMPUTE
    assert "dataloader_blocking" not in diagnosis.rules_fired


def test_regression_from_fast_to_slow_names_data_load_and_workers(captures: dict[str, Path]) -> None:
    base, cur = analyze_trace(captures["fast"], OPTIONS), analyze_trace(captures["slow"], OPTIONS)
    attribution = explain_regression(base, cur)
    assert attribution.first_reason.startswith("data_load +")
    assert attribution.cause == "input pipeline"
    assert attribution.phase_deltas[0].name == "data_load"
    assert 20.0 < attribution.phase_deltas[0].delta_ms < 60.0
    assert [f.rule for f in attribution.new_findings] == ["dataloader_blocking"]
    total = sum(p.delta_ms for p in attribution.phase_deltas) + attribution.unexplained_delta_ms
    assert total == pytest.approx(attribution.step_mean_delta_ms, abs=1e-6)
    assert "first reason: data_load +" in render_attribution_text(attribution)


def test_regression_against_a_stored_baseline_dict_gives_the_same_first_reason(
        captures: dict[str, Path]) -> None:
    from perfgate.pipeline.inputs import diagnosed

    base, cur = analyze_trace(captures["fast"], OPTIONS), analyze_trace(captures["slow"], OPTIONS)
    stored = json.loads(json.dumps(diagnosed(base).to_dict()))   # as a result or baseline keeps it
    back = Analysis.from_dict(stored)
    assert back.facts == base.facts
    assert explain_regression(back, cur).first_reason == explain_regression(base, cur).first_reason
