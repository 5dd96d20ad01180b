"""scripts/gpu/memory-energy-inference.sh, checked on this machine: its syntax, its usage error, and
its inference part run for real with the CPU presets (``--cpu``) on a copy of the repository: the
eager vs compiled table from real perfgate runs under nsys, the lost-compile change applied to the
compiled variant only, and the workload files restored afterwards."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

SCRIPT = "scripts/gpu/memory-energy-inference.sh"


def test_script_parses_and_refuses_unknown_parts(repo_root: Path) -> None:
    assert subprocess.run(["bash", "-n", SCRIPT], cwd=repo_root).returncode == 0
    done = subprocess.run(["bash", SCRIPT, "speed"], cwd=repo_root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage:" in done.stderr


def test_cpu_dry_run_of_the_inference_part(repo_root: Path, tmp_path: Path, nsys_path, torch_module) -> None:
    copy = tmp_path / "repo"
    for part in ("perfgate", "workloads", "scripts", "pyproject.toml"):
        src = repo_root / part
        (shutil.copytree(src, copy / part, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir()
         else shutil.copy2(src, copy / part))
    before = (copy / "workloads" / "resnet_infer.py").read_text()
    env = {**os.environ, "OUT": str(tmp_path / "out"), "BASE_LAUNCHES": "1", "CHANGE_LAUNCHES": "1"}
    done = subprocess.run(["bash", SCRIPT, "--cpu", "inference"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (copy / "workloads" / "resnet_infer.py").read_text() == before          # the edit undone
    dest = tmp_path / "out" / "memory-energy-inference"
    results = json.loads((dest / "results.json").read_text())
    assert sorted(results) == ["infer-compiled", "infer-eager", "infer-lost-compiled"]
    compiled = {k: [launch["compiled"] for launch in r["launches"]] for k, r in results.items()}
    assert compiled == {"infer-eager": [False], "infer-compiled": [True], "infer-lost-compiled": [False]}
    assert results["infer-eager"]["exit_code"] == "0" and results["infer-compiled"]["verdict"] == "PASS"   # baseline recorded
    for r in results.values():
        latency = r["median"]
        assert latency["latency_ms_p50"] <= latency["latency_ms_p99"] and latency["kernels_per_batch"] is None
    text = (dest / "results.md").read_text()
    assert "| eager | PASS (0) |" in text and "| compiled, the compile call lost (the change) |" in text
    assert (dest / "reports.tgz").stat().st_size > 1000


def test_results_table_takes_gpu_columns_from_the_profile_launch(repo_root: Path) -> None:
    """Kernels, graph launches and API time per batch come from the CUDA profile launch (the timing
    launches trace no CUDA); its step time never enters the timing medians."""
    import sys

    sys.path.insert(0, str(repo_root / "scripts" / "gpu"))
    try:
        from resources_table import summarize
    finally:
        sys.path.pop(0)
    timing = [{"metrics": {"step_time_ms": v}, "gpu": None, "self_report": {}} for v in (6.2, 6.3, 6.4)]
    profile = {"metrics": {"step_time_ms": 9.9, "kernels_per_step": 243.0, "cuda_api_ms_per_step": 1.5},
               "gpu": {"graph_launches_per_step": 0.0}}
    row = summarize("infer-lost", {"name": "resnet_infer[compiled]", "analyses": timing, "profile": profile,
                                   "message": "", "comparisons": []}, "1")
    assert row["median"]["step_time_ms"] == 6.3
    assert row["median"]["kernels_per_batch"] == 243.0 and row["median"]["cuda_api_ms_per_batch"] == 1.5
    assert row["median"]["graph_launches_per_batch"] == 0.0
