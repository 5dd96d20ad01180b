"""The user-style loops (plain_loop, seed003_loop, hf_trainer, lightning_loop): each runs its CPU
preset in its own process, without nsys, and reports its own iteration times; their knobs; their
warm-up counts agree with pyproject.toml; importing them imports no framework."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perfgate.settings.config import load_settings
from workloads import USER_LOOPS
from workloads.ladder import parse_self_report

SELF_REPORT_KEYS = {"workload", "device", "steps", "warmup_steps", "batch_size", "world_size",
                    "step_ms_median", "step_ms_mean", "samples_per_s"}
FRAMEWORKS = {"hf_trainer": "transformers", "lightning_loop": "lightning"}


def _framework_or_skip(name: str) -> None:
    """hf_trainer and lightning_loop need their framework: skip without it (fail in CI)."""
    needed = FRAMEWORKS.get(name)
    if needed is None:
        return
    try:
        importlib.import_module(needed if needed != "lightning" else "lightning.pytorch")
    except ImportError as exc:
        if needed == "lightning":
            try:
                importlib.import_module("pytorch_lightning")
                return
            except ImportError:
                pass
        if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
            pytest.fail(f"{needed} is required in CI (PERFGATE_REQUIRE_REAL=1) but missing: {exc}", pytrace=False)
        pytest.skip(f"{needed} not available")


def _run(repo: Path, name: str, *args: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_NVTX"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", f"workloads.{name}", "--device", "cpu", "--size", "cpu", *args]
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = parse_self_report(done.stdout)
    assert report is not None, f"no PERFGATE_SELF_REPORT line in:\n{done.stdout[-3000:]}"
    return report


@pytest.mark.parametrize("name", USER_LOOPS)
def test_cpu_preset_runs_and_reports_its_measured_iterations(name: str, torch_module, repo_root) -> None:
    _framework_or_skip(name)
    report = _run(repo_root, name, "--steps", "6", "--warmup-steps", "2")
    assert SELF_REPORT_KEYS <= set(report)
    assert (report["workload"], report["device"], report["steps"], report["warmup_steps"]) == (name, "cpu", 6, 2)
    assert report["world_size"] == 1 and report["knobs"]["threads"] == 1
    assert 0 < report["step_ms_median"] < 10_000 and report["step_ms_mean"] > 0
    expected = report["batch_size"] * 6 / (report["step_ms_mean"] * 6 / 1e3)
    assert report["samples_per_s"] == pytest.approx(expected, rel=1e-6)


def test_a_slower_dataset_lengthens_the_iteration_though_loading_is_outside_the_step(torch_module, repo_root) -> None:
    """--slow-data-ms sleeps in __getitem__, outside the step range: the loop's own iteration time
    (start to next start) still carries it."""
    report = _run(repo_root, "plain_loop", "--steps", "4", "--warmup-steps", "1", "--slow-data-ms", "80")
    assert report["knobs"]["slow_data_ms"] == 80.0
    assert report["step_ms_median"] >= 80.0


@pytest.mark.parametrize("name", USER_LOOPS)
def test_help_lists_the_common_knobs(name: str, torch_module, capsys) -> None:
    module = importlib.import_module(f"workloads.{name}")
    with pytest.raises(SystemExit) as exited:
        module.main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    for flag in ("--size", "--device", "--steps", "--warmup-steps", "--batch-size", "--workers",
                 "--slow-data-ms", "--threads", "--seed"):
        assert flag in text, flag
    if name in FRAMEWORKS:
        assert "--perfgate-callback" in text


@pytest.mark.parametrize("name", USER_LOOPS)
def test_warmup_steps_in_pyproject_match_both_presets(name: str, torch_module, repo_root) -> None:
    """The loops cannot name their warm-up ranges differently, so perfgate skips warmup_steps step
    ranges per process: the table's number has to be each preset's warm-up count."""
    config = load_settings(repo_root, env={}).workloads[name]
    presets = importlib.import_module(f"workloads.{name}").PRESETS
    assert config.enabled is False
    assert presets["cpu"]["warmup_steps"] == presets["gpu"]["warmup_steps"] == config.skip_steps


def test_importing_the_loops_imports_no_framework(torch_module, repo_root) -> None:
    code = ("import sys\n"
            + "".join(f"import workloads.{name}\n" for name in USER_LOOPS)
            + "print('HEAVY', sorted({m.split('.')[0] for m in sys.modules} & "
              "{'transformers', 'lightning', 'pytorch_lightning', 'accelerate'}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout
