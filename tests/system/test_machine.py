"""Machine identity: the class that keys baselines, and what is recorded about this machine."""
from __future__ import annotations

import importlib.metadata
import platform
import stat
import sys

import pytest

from perfgate.system.machine import machine_class_for, machine_info, query_gpus, torch_versions, visible_gpus


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


HOST = [(0, "GPU-0a1b2c3d-0000"), (1, "GPU-1a1b2c3d-1111"), (2, "GPU-2e4f-2222"), (3, "GPU-3e4f-3333")]
"""A host of 4 GPUs as nvidia-smi lists them: (index, UUID)."""


@pytest.mark.parametrize(("value", "seen"), [
    (None, [0, 1, 2, 3]),                   # unset: every GPU
    ("", []),                               # empty: none
    ("0,1", [0, 1]),
    ("2,3", [2, 3]),
    ("3,2", [3, 2]),                        # CUDA's device 0 is the host's GPU 3
    ("1,-1,2", [1]),                        # CUDA reads up to the first invalid entry
    ("5", []),                              # no GPU 5 on a host of 4
    ("1,5,2", [1]),
    ("0,0", [0]),                           # a GPU named twice: CUDA stops there
    ("1,2,1,3", [1, 2]),
    (" 2 , 3 ", [2, 3]),                    # whitespace around entries
    ("GPU-1a1b2c3d-1111", [1]),             # a full UUID
    ("GPU-2e4f,GPU-0a", [2, 0]),            # unique prefixes
    ("GPU-0a1b2c3d-0000,1", [0, 1]),        # UUIDs and indices together
    ("3,GPU-3e4f", [3]),                    # the same GPU by index and by UUID
    ("GPU-,2", []),                         # a prefix of every UUID names no one GPU
    ("MIG-GPU-2e4f-2222/1/0", [2]),          # a MIG instance named by its GPU
    ("MIG-7c3f8a1e-aaaa-bbbb", None),       # named by its own UUID: not resolvable here
    ("gpu0", []),
])
def test_visible_gpus_follow_cudas_reading_of_cuda_visible_devices(value: str | None, seen: list[int] | None) -> None:
    assert visible_gpus(value, HOST) == seen


def _fake_nvidia_smi(folder, rows: list[dict[str, str]]) -> None:
    """An ``nvidia-smi`` that answers ``--query-gpu=FIELD,...`` with those fields of ``rows`` (one
    CSV line a GPU, as ``--format=csv,noheader`` does) and prints its banner otherwise."""
    smi = folder / "nvidia-smi"
    smi.write_text(f"""#!{sys.executable}
import sys
rows = {rows!r}
query = [a.partition("=")[2] for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if query:
    for row in rows:
        print(", ".join(row[field] for field in query[0].split(",")))
else:
    print("| NVIDIA-SMI 580.65.06    Driver Version: 580.65.06    CUDA Version: 13.0 |")
""")
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)


def test_the_machine_counts_only_the_gpus_cuda_visible_devices_leaves(tmp_path, monkeypatch) -> None:
    """A CI job given GPUs 2 and 3 of a host of 4: its machine is 2 H200s (the machine class, and
    torchrun's default nproc with it), though nvidia-smi lists all 4."""
    models = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H200"]
    _fake_nvidia_smi(tmp_path, [{"index": str(i), "uuid": uuid, "name": model, "driver_version": "580.65.06"}
                                for (i, uuid), model in zip(HOST, models)])
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert query_gpus() == (["NVIDIA H200", "NVIDIA H200"], "580.65.06", "13.0")
    machine_info.cache_clear()
    try:
        info = machine_info()
    finally:
        machine_info.cache_clear()
    assert (info.gpu_count, info.gpu_model, info.machine_class) == (2, "NVIDIA H200", "nvidia-h200-x2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-7c3f8a1e-aaaa, MIG-9d2e-bbbb")   # not resolvable: counted
    assert query_gpus()[0] == ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"]
