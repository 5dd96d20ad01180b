"""Machine identity: the class that keys baselines, and what is recorded about this machine."""
from __future__ import annotations

import importlib.metadata
import platform

from perfgate.system.machine import machine_class_for, machine_info, torch_versions


def test_gpu_machine_class_is_model_slug_and_count() -> None:
    assert machine_class_for("NVIDIA H100 80GB HBM3", 1) == "nvidia-h100-80gb-hbm3-x1"
    assert machine_class_for("NVIDIA H200", 8) == "nvidia-h200-x8"
    assert machine_class_for("Tesla V100-SXM2-16GB", 2) == "nvidia-tesla-v100-sxm2-16gb-x2"


def test_machine_without_gpu_is_classed_by_cpu_architecture() -> None:
    assert machine_class_for(None, 0, "x86_64") == "cpu-x86_64"
    assert machine_class_for(None, 0, "aarch64") == "cpu-aarch64"


def test_torch_version_is_read_without_importing_torch() -> None:
    version, _cuda = torch_versions()
    try:
        expected = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        expected = None
    assert version == expected


def test_this_cpu_machine_has_a_cpu_class_and_records_python() -> None:
    info = machine_info()
    if info.gpu_count == 0:
        assert info.machine_class == f"cpu-{platform.machine().lower()}"
        assert info.gpu_model is None
    assert info.python == platform.python_version()


def test_configured_machine_class_overrides_the_detected_one() -> None:
    assert machine_info(None, "ci-pool-a").machine_class == "ci-pool-a"


def test_nsys_version_is_recorded_when_nsys_is_given(nsys_path: str) -> None:
    from pathlib import Path

    info = machine_info(Path(nsys_path))
    assert info.nsys is not None and info.nsys[:4].isdigit()
