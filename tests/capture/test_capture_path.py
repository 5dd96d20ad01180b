"""``perfgate ab`` and ``perfgate calibrate`` capture and analyze a launch the way the gate does
(perfgate.pipeline.workload_run.launch_analysis: checks, resources, diagnosis, the batch size the workload
reports). Their own run_capture + analyze_trace had no samples/s without a configured batch size."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from perfgate.commands.ab import capture_launcher
from perfgate.commands.calibrate import calibration_launcher
from perfgate.records.model import Capture
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import WorkloadSpec
import perfgate.capture.launch
from layout import TESTS

TRACE = TESTS / "fixtures" / "traces" / "cpu-train-loop" / "trace.sqlite"
SPEC = WorkloadSpec(name="w", module="w.py", skip_steps=2)     # no batch size configured


@pytest.fixture
def fake_capture(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """run_capture copies a committed CPU capture into the launch folder; the workload reports
    batch_size 8 on 1 process."""
    dirs: list[Path] = []

    def run_capture(spec: WorkloadSpec, settings: Any, launch_dir: Path, **kwargs: Any) -> Capture:
        launch_dir.mkdir(parents=True)
        dirs.append(launch_dir)
        sqlite = Path(shutil.copy(TRACE, launch_dir / "trace.sqlite"))
        return Capture(workload=spec.name, run_dir=launch_dir, command=("nsys",), report_path=None,
                       sqlite_path=sqlite, log_path=launch_dir / "log.txt", returncode=0, wall_s=3.5,
                       self_report={"batch_size": 8, "world_size": 1})

    monkeypatch.setattr(perfgate.capture.launch, "run_capture", run_capture)
    return dirs


def test_an_ab_launch_is_the_gates_launch(tmp_path: Path, fake_capture: list[Path]) -> None:
    settings = load_settings(tmp_path, env={})
    launch = capture_launcher(SPEC, settings, {"A": tmp_path, "B": tmp_path}, tmp_path / "run")
    metrics = launch("A", 0)
    assert metrics["samples_per_s"] > 0                  # from the reported batch size
    assert fake_capture == [tmp_path / "run" / "A-0"]


def test_a_calibration_launch_is_the_gates_launch_and_keeps_its_wall_time(
        tmp_path: Path, fake_capture: list[Path]) -> None:
    settings = load_settings(tmp_path, env={})
    metrics, wall_s = calibration_launcher(SPEC, settings, tmp_path / "run")("aa-0", ())
    assert metrics["samples_per_s"] > 0 and wall_s == 3.5
    assert fake_capture == [tmp_path / "run" / "aa-0"]
