"""The inference workload (seed 003's second half) and the memory/energy knobs of the training
workloads, on the CPU under the real nsys: batch ranges the gate finds, its self-report, its
eager, compiled and lost-compile variants through the pipeline, and what a CPU run reports of GPU
memory and energy (nothing: absent, not zero)."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from workloads.ladder import parse_self_report

from nsys_run import run_supervised

STEPS, WARMUP = 6, 2


def _nsys_run(nsys: str, repo: Path, out: Path, *args: str) -> tuple[dict, list[tuple[str, int, int]]]:
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_NVTX"}
    env["PYTHONPATH"] = str(repo)
    cmd = [nsys, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--export=sqlite",
           "-o", str(out), "-f", "true", sys.executable, "-m", "workloads.resnet_infer", "--device", "cpu",
           "--steps", str(STEPS), "--warmup-steps", str(WARMUP), *args]
    done = run_supervised(cmd, cwd=repo, env=env, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = parse_self_report(done.stdout)
    assert report is not None
    with sqlite3.connect(out.with_suffix(".sqlite")) as db:
        ranges = db.execute("SELECT text, start, end FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL "
                            "ORDER BY start").fetchall()
    return report, ranges


@pytest.fixture(scope="module")
def eager(nsys_path, torch_module, repo_root, tmp_path_factory):
    return _nsys_run(nsys_path, repo_root, tmp_path_factory.mktemp("infer") / "eager")


@pytest.fixture(scope="module")
def compiled(nsys_path, torch_module, repo_root, tmp_path_factory):
    return _nsys_run(nsys_path, repo_root, tmp_path_factory.mktemp("infer") / "compiled", "--mode", "compile")


def test_each_measured_batch_is_one_range_holding_forward_and_sync(eager) -> None:
    report, ranges = eager
    outer = [r for r in ranges if r[0].startswith(("batch ", "warmup "))]
    assert [r[0] for r in outer] == [f"warmup {i}" for i in range(1, WARMUP + 1)] + [f"batch {i}" for i in range(1, STEPS + 1)]
    for name, start, end in outer:
        inside = [r[0] for r in ranges if r[0] in ("forward", "sync") and start <= r[1] and r[2] <= end]
        assert inside == ["forward", "sync"], name
    batch_ms = [(e - s) / 1e6 for n, s, e in outer if n.startswith("batch ")]
    # host-timed latency around each range: p50 within the range durations' spread, p99 their largest
    assert min(batch_ms) - 1 <= report["latency_ms_p50"] <= max(batch_ms) + 1
    assert report["latency_ms_p99"] == pytest.approx(max(batch_ms), abs=1.5)
    assert report["latency_ms_p50"] <= report["latency_ms_p99"]
    assert (report["workload"], report["steps"], report["warmup_steps"], report["mode"], report["compiled"]) == (
        "resnet_infer", STEPS, WARMUP, "eager", False)
    assert "gpu_memory" not in report                                  # CPU: absent, not zero


def test_the_compiled_variant_compiles_on_the_cpu_with_the_eager_backend(compiled) -> None:
    report, ranges = compiled
    assert report["compiled"] is True and report["knobs"]["compile_backend"] == "eager"
    assert sum(1 for r in ranges if r[0].startswith("batch ")) == STEPS


def test_knobs_and_presets(torch_module) -> None:
    from workloads.resnet_infer import build_parser, resolve

    cpu = resolve(build_parser().parse_args(["--device", "cpu"]))
    assert (cpu["model"], cpu["batch_size"], cpu["image_size"], cpu["threads"], cpu["lost_compile"]) == (
        "resnet18", 2, 32, 1, False)
    gpu = resolve(build_parser().parse_args(["--device", "cpu", "--size", "gpu", "--mode", "compile", "--lost-compile"]))
    assert (gpu["model"], gpu["compile_mode"], gpu["compile_backend"], gpu["lost_compile"]) == (
        "resnet50", "reduce-overhead", "inductor", True)
    with pytest.raises(SystemExit):
        resolve(build_parser().parse_args(["--device", "cpu", "--steps", "0"]))


def test_lost_compile_runs_the_model_eagerly(torch_module) -> None:
    import torch

    from workloads.resnet_infer import make_model

    knobs = {"model": "resnet18", "mode": "compile", "lost_compile": True, "compile_mode": "default",
             "compile_backend": "eager"}
    model, compiled = make_model(knobs, torch.device("cpu"))
    assert not compiled and type(model).__name__ == "ResNet"
    model, compiled = make_model({**knobs, "lost_compile": False}, torch.device("cpu"))
    assert compiled and type(model).__name__ == "OptimizedModule"


@pytest.fixture(scope="module")
def gated(tmp_path_factory, repo_root, nsys_path, torch_module):
    """resnet_infer and resnet_infer[compiled] through the pipeline (one launch each), as
    pyproject.toml declares them."""
    from perfgate.settings.config import load_settings
    from perfgate.pipeline.workload_run import compare_policy, run_workload
    from perfgate.settings.workloads import discover_workloads, select_workloads

    tmp = tmp_path_factory.mktemp("gate")
    settings = load_settings(repo_root, env={}, overrides={
        "artifacts_dir": str(tmp / "runs"), "baseline_dir": str(tmp / "baselines"),
        "report_dir": str(tmp / "report"), "size": "cpu", "timeout_s": 300, "launches": 1})
    specs = select_workloads(discover_workloads(settings), ["resnet_infer"])
    small = ("--steps", str(STEPS), "--warmup-steps", str(WARMUP))
    results = {s.full_name: run_workload(replace(s, args=(*s.args, *small)), settings) for s in specs}
    return results, compare_policy(settings, specs[0])


def test_the_gate_measures_both_variants_from_their_batch_ranges(gated) -> None:
    results, policy = gated
    assert sorted(results) == ["resnet_infer", "resnet_infer[compiled]"]
    for name, result in results.items():
        assert result.verdict.value == "NEW", result.error
        analysis = result.analyses[0]
        assert analysis.steps.range_name == "batch" and analysis.steps.count == STEPS - 1   # the last has no next start
        assert set(analysis.phases) >= {"forward", "sync"}
        metrics = analysis.metrics()
        assert metrics["step_time_p99_ms"] >= metrics["step_time_ms"]
        assert not any(m.startswith(("gpu_memory.", "energy.")) for m in metrics)   # no GPU: absent
        assert analysis.launch.energy.to_dict() == {"unavailable": "no NVML readings (nvidia-ml-py not installed, "
                                                                     "or no NVIDIA GPU/driver)"}
    assert results["resnet_infer[compiled]"].analyses[0].launch.self_report["compiled"] is True
    assert policy.gate_alone == ("kernels_per_step",) and policy.is_gating("kernels_per_step")


def test_retained_outputs_and_extra_matmuls_do_what_they_say(torch_module) -> None:
    import torch

    from workloads._memory import StepExtras, gpu_memory_report

    extras = StepExtras({"retain_outputs": 2, "extra_matmuls": 0}, torch.device("cpu"))
    outputs = [torch.full((4,), float(k)) for k in range(4)]
    for out in outputs[:3]:
        extras.after_forward(out)
        extras.end_step()
    assert [float(t[0]) for t in extras.kept] == [1.0, 2.0]
    assert all(t.data_ptr() == o.data_ptr() for t, o in zip(extras.kept, outputs[1:]))   # the same memory, kept alive
    # Through the next step's forward and backward (where the peak is) the kept outputs stay: the
    # oldest leaves only when that step ends, so even N = 1 adds one output to the peak.
    one = StepExtras({"retain_outputs": 1}, torch.device("cpu"))
    one.after_forward(outputs[0])
    one.end_step()
    one.after_forward(outputs[1])
    assert [float(t[0]) for t in one.kept] == [0.0]
    one.end_step()
    assert [float(t[0]) for t in one.kept] == [1.0]
    none = StepExtras({}, torch.device("cpu"))
    none.after_forward(outputs[0])
    none.end_step()
    assert len(none.kept) == 0 and none.matmuls == 0
    assert gpu_memory_report(torch.device("cpu")) is None
    with pytest.raises(ValueError):
        StepExtras({"retain_outputs": -1}, torch.device("cpu"))


def test_training_workloads_take_the_knobs(torch_module, repo_root) -> None:
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    done = subprocess.run([sys.executable, "-m", "workloads.transformer_lm", "--device", "cpu", "--steps", "2",
                           "--warmup-steps", "1", "--retain-outputs", "1", "--extra-matmuls", "1"],
                          cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = parse_self_report(done.stdout)
    assert report["knobs"]["retain_outputs"] == 1 and report["knobs"]["extra_matmuls"] == 1
    assert "gpu_memory" not in report
