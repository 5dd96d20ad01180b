"""Configuration of issue 18: the capture records GPU memory (``cuda_memory_usage``, accepted by
the real nsys), and a workload's ``gate_alone`` list reaches its compare policy."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from perfgate.capture.command import nsys_command
from perfgate.errors import ConfigError
from perfgate.pipeline.workload_run import compare_policy
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import WorkloadSpec, discover_workloads, select_workloads


def project(tmp_path: Path, table: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[project]\nname = 'demo'\n\n{table}\n")
    (tmp_path / "workloads").mkdir(exist_ok=True)
    (tmp_path / "workloads" / "infer.py").write_text("print('hi')\n")
    return tmp_path


def test_memory_usage_tracing_is_on_by_default_and_follows_the_precedence(tmp_path: Path) -> None:
    assert load_settings(project(tmp_path, ""), env={}).cuda_memory_usage is True
    root = project(tmp_path, "[tool.perfgate]\ncuda_memory_usage = false\n")
    assert load_settings(root, env={}).cuda_memory_usage is False
    assert load_settings(root, env={"PERFGATE_CUDA_MEMORY_USAGE": "true"}).cuda_memory_usage is True
    with pytest.raises(ConfigError, match="PERFGATE_CUDA_MEMORY_USAGE: expected true or false"):
        load_settings(root, env={"PERFGATE_CUDA_MEMORY_USAGE": "sometimes"})


def test_the_flag_goes_only_with_cuda_tracing() -> None:
    spec = WorkloadSpec(name="w", module="workloads.w")
    cuda = nsys_command("nsys", spec, Path("o"), trace="cuda,nvtx,osrt", cuda_memory_usage=True)
    assert "--cuda-memory-usage=true" in cuda and cuda.index("--cuda-memory-usage=true") < cuda.index("-o")
    assert "--cuda-memory-usage=true" not in nsys_command("nsys", spec, Path("o"), trace="nvtx,osrt",
                                                          cuda_memory_usage=True)
    assert "--cuda-memory-usage=true" not in nsys_command("nsys", spec, Path("o"), trace="cuda,nvtx")


def test_the_real_nsys_accepts_the_command(nsys_path: str, tmp_path: Path) -> None:
    (tmp_path / "hello.py").write_text("print('memory traced')\n")
    spec = WorkloadSpec(name="hello", module="hello")
    cmd = nsys_command(nsys_path, spec, tmp_path / "trace", trace="cuda,nvtx,osrt", cuda_memory_usage=True)
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "memory traced" in done.stdout and (tmp_path / "trace.sqlite").exists()


def test_gate_alone_reaches_the_workloads_compare_policy(tmp_path: Path) -> None:
    root = project(tmp_path, "[tool.perfgate.workloads.infer]\ngate_alone = ['kernels_per_step', 'cuda_api_*']\n"
                             "variants = { compiled = ['--compile'] }\n")
    settings = load_settings(root, env={})
    specs = select_workloads(discover_workloads(settings), ["infer"])
    assert [s.full_name for s in specs] == ["infer", "infer[compiled]"]
    for spec in specs:
        policy = compare_policy(settings, spec)
        assert policy.gate_alone == ("kernels_per_step", "cuda_api_*")
        assert policy.alone("cuda_api_ms_per_step") and policy.is_gating("cuda_api_ms_per_step")
        assert not policy.alone("step_time_ms") and not policy.alone("phase.forward.cpu_ms")
    assert compare_policy(settings, None).gate_alone == ()
    bad = project(tmp_path, "[tool.perfgate.workloads.infer]\ngate_alone = 'kernels_per_step'\n")
    with pytest.raises(ConfigError, match=r"\[tool.perfgate.workloads.infer\] gate_alone: expected a list of strings"):
        load_settings(bad, env={})


def test_this_repository_gates_the_inference_workloads_launches_alone(repo_root: Path) -> None:
    settings = load_settings(repo_root, env={})
    spec = select_workloads(discover_workloads(settings), ["resnet_infer[compiled]"])[0]
    assert spec.args[-2:] == ("--mode", "compile")
    assert compare_policy(settings, spec).gate_alone == ("kernels_per_step",)
